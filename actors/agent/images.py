"""The images of a turn (the person's photos): a model that refuses them gets one clear line."""

from __future__ import annotations

import re

from memory.errors import LLMError, LLMRequestError

IMAGES_REFUSED = (
    "The model I'm running on can't look at images, so I couldn't see your photo; your "
    "message is kept. Tell me in words what it shows?"
)
_ABOUT_IMAGES = re.compile(r"image|vision|multi-?modal", re.IGNORECASE)


def refuses_images(exc: LLMError) -> bool:
    """A 4xx request error about image content (a model or provider that takes none)."""
    return (
        isinstance(exc, LLMRequestError)
        and exc.status is not None
        and 400 <= exc.status < 500
        and bool(_ABOUT_IMAGES.search(exc.message))
    )
