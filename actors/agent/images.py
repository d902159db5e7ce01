"""The images of a turn (the person's photos): a model that refuses them gets one clear line."""

from __future__ import annotations

import re

from actors.agent.tool_loop import LoopState, reply_text
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


def turn_reply_text(state: LoopState, sent_images: bool) -> str:
    """What the person gets (:func:`~actors.agent.tool_loop.reply_text`), or
    :data:`IMAGES_REFUSED` when the turn sent images and the model refused them."""
    if sent_images and state.error is not None and refuses_images(state.error):
        return IMAGES_REFUSED
    return reply_text(state)
