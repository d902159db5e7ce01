"""The images of a turn (the person's photos): a model that refuses them gets one clear line;
once the reply is committed, the model describes them in a sentence added to the stored user row
(``[sent a photo] caption — a short description``), so compaction and recall can use what the
photo showed though its bytes are not kept."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence

import trio

from actors.agent.tool_loop import LoopState, reply_text
from memory.errors import LLMError, LLMRequestError
from memory.llm.protocol import LLM, ImageBlock, Message
from runtime.db import Queries
from runtime.logs import get_logger

log = get_logger(__name__)

IMAGES_REFUSED = (
    "The model I'm running on can't look at images, so I couldn't see your photo; your "
    "message is kept. Tell me in words what it shows?"
)
#: the model refused the photo for its size (the provider's own limit, e.g. a self-hosted
#: OpenAI-compatible server's, under what photos.py chose by): not "can't look at images"
IMAGE_TOO_LARGE = (
    "That photo is too large for the model I'm running on to look at; your message is kept. "
    "Tell me in words what it shows, or send it smaller?"
)
_ABOUT_IMAGES = re.compile(r"image|vision|multi-?modal", re.IGNORECASE)
_TOO_LARGE = re.compile(r"exceed|too (?:large|big)|maximum|max allowed", re.IGNORECASE)


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
    :data:`IMAGES_REFUSED` when the turn sent images and the model refused them
    (:data:`IMAGE_TOO_LARGE` when it refused them for their size)."""
    error = state.error
    if sent_images and error is not None and refuses_images(error):
        return IMAGE_TOO_LARGE if _TOO_LARGE.search(error.message) else IMAGES_REFUSED
    return reply_text(state)


DESCRIBE = (
    "Describe the photo (or photos) in one short sentence of at most 25 words, as a note in "
    "the person's diary: what is visible, nothing invented. No preamble."
)
DESCRIPTION_PURPOSE = "photo_description"
MAX_DESCRIPTION = 300
_ADD = """
UPDATE chat_messages SET content = content || $3
WHERE chat_id = $1 AND external_message_id = $2 AND role = 'user'
"""
_KEEP = """
INSERT INTO chat_photos (chat_id, message_id, position, media_type, data)
SELECT m.chat_id, m.id, p.position, p.media_type, p.data
FROM chat_messages m,
     unnest($3::text[], $4::bytea[]) WITH ORDINALITY AS p(media_type, data, position)
WHERE m.chat_id = $1 AND m.external_message_id = $2 AND m.role = 'user'
ON CONFLICT DO NOTHING
"""


async def describe(llm: LLM, chat_id: int, images: Sequence[ImageBlock]) -> str | None:
    """One short sentence about ``images`` (its own model call, priced as any); None when the
    model fails or refuses."""
    with trio.move_on_after(60):
        try:
            answer = await llm.complete(
                system=DESCRIBE,
                messages=[Message.user(*images, "Describe it.")],
                tools=[],
                max_tokens=100,
                purpose=DESCRIPTION_PURPOSE,
                chat_id=chat_id,
            )
        except LLMError as exc:
            log.info("agent.photo_not_described", chat_id=chat_id, error=exc.message)
            return None
        text = " ".join(answer.text.split())
        return text[:MAX_DESCRIPTION] or None
    return None


def with_description(
    after: Callable[[], Awaitable[object]] | None,
    llm: LLM,
    db: Queries,
    chat_id: int,
    external_id: str | None,
    images: Sequence[ImageBlock],
    keep: bool = False,
) -> Callable[[], Awaitable[object]] | None:
    """``after`` (the turn's after-commit hook), then, for a turn with images, their bytes kept
    (``keep``: KEEP_PHOTOS) and their description added to its stored user row."""
    if not images or external_id is None:
        return after

    async def run() -> None:
        if after is not None:
            await after()
        if keep:
            types, data = [i.media_type for i in images], [i.data for i in images]
            await db.execute(_KEEP, chat_id, external_id, types, data)
        text = await describe(llm, chat_id, images)
        if text:
            await db.execute(_ADD, chat_id, external_id, f" — {text}")

    return run
