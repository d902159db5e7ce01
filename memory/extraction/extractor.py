"""Pattern extraction during compaction (seed 000, "Pattern extraction during compaction",
"Pattern hierarchy", "Extraction reliability"; seeds 003/004: an episode summary per span).

The model gets the oldest uncompacted messages (ids, roles, local times; tool results wrapped in
``<untrusted source="tool:NAME">``) and the chat's current top patterns, and answers one JSON
object::

    {"new_patterns": [...], "reinforcements": [...], "contradictions": [...],
     "supersedes": [...], "meta_patterns": [...], "episode_summary": "..."}

:func:`parse_extraction` validates it strictly into :class:`Extraction` (wrong types, unknown
kinds or signals, confidences outside [0, 1] -> :class:`ExtractionInvalid`; a ```json fence and
prose around the object are tolerated). :func:`check_extraction`
(:mod:`memory.extraction.guardrails`) then
applies the guardrails and returns what survives plus a :class:`Rejection` for everything dropped
(see its docstring).
:func:`extract` is the only I/O: one call, and exactly one "return valid JSON only" repair call
when the first answer does not parse; ``None`` after two invalid answers (the caller leaves the
messages uncompacted). LLM errors propagate.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from zoneinfo import ZoneInfo

from memory.errors import ExtractionInvalid
from memory.extraction.claims import (
    ChunkMessage,
    Extraction,
    KnownPattern,
    parse_extraction,
)
from memory.extraction.guardrails import Rejection, check_extraction
from memory.extraction.prompt import EXTRACTION_SYSTEM, repair_prompt, user_prompt
from memory.llm.protocol import LLM, Message
from runtime.logs import get_logger

__all__ = ["extract"]

log = get_logger(__name__)

EXTRACTOR_VERSION = "v1"
EXTRACTION_MAX_TOKENS = 4096
PURPOSE = "compaction"


# --- the call (the prompt: memory.extraction.prompt) -------------------------------------


async def extract(
    llm: LLM,
    chunk: Sequence[ChunkMessage],
    known: Sequence[KnownPattern],
    known_entry_uuids: Collection[str],
    *,
    chat_id: int,
    timezone: str,
) -> tuple[Extraction, list[Rejection]] | None:
    """Ask the model for the extraction of ``chunk`` and apply the guardrails.

    One repair call when the first answer is invalid; ``None`` (logged) when that is invalid too.
    :class:`memory.errors.LLMError` from either call propagates.
    """
    prompt = user_prompt(chunk, known, ZoneInfo(timezone))
    messages = [Message.user(prompt)]
    for attempt in (1, 2):
        completion = await llm.complete(
            system=EXTRACTION_SYSTEM,
            messages=messages,
            tools=[],
            max_tokens=EXTRACTION_MAX_TOKENS,
            purpose=PURPOSE,
            chat_id=chat_id,
        )
        try:
            extraction = parse_extraction(completion.text)
        except ExtractionInvalid as exc:
            log.warning(
                "extraction.invalid",
                chat_id=chat_id,
                attempt=attempt,
                reason=exc.reason,
                stop_reason=completion.stop_reason,
            )
            reply = completion.text.strip() or "(empty reply)"
            messages += [Message.assistant(reply), Message.user(repair_prompt(exc.reason))]
            continue
        checked, rejections = check_extraction(extraction, chunk, known, known_entry_uuids)
        log.info(
            "extraction.ok",
            chat_id=chat_id,
            attempt=attempt,
            messages=len(chunk),
            new=len(checked.new_patterns),
            reinforced=len(checked.reinforcements),
            contradicted=len(checked.contradictions),
            superseded=len(checked.supersedes),
            meta=len(checked.meta_patterns),
            rejected=len(rejections),
        )
        for rejection in rejections:
            log.info(
                "extraction.rejected", chat_id=chat_id, what=rejection.what, reason=rejection.reason
            )
        return checked, rejections
    log.error(
        "extraction.failed",
        chat_id=chat_id,
        messages=len(chunk),
        error="invalid JSON twice; messages stay uncompacted",
    )
    return None
