"""The summary of a routine's message (seed 004, "Phase 2.5"): made once, when it is sent, by
the memory model; the window shows it instead of the full text. A short message (under
:data:`OWN_SUMMARY_WORDS` words) is its own summary, no model call; a model that fails or
answers nothing leaves a cut of the text (:func:`fallback_summary`): the message is sent and
stored either way."""

from __future__ import annotations

import attrs

from memory.errors import LLMError
from memory.llm.protocol import LLM, Message
from runtime.logs import get_logger

log = get_logger(__name__)

PURPOSE = "routine_summary"
#: a message shorter than this many words is its own summary
OWN_SUMMARY_WORDS = 60
#: the fallback's length (characters), when the model cannot summarise
FALLBACK_CHARS = 300
MAX_TOKENS = 200
SYSTEM = (
    "You summarise a message a companion bot sent on its own (a routine) for its memory. "
    "Write 2-3 concise sentences in plain text, no markdown: keep the key facts, numbers, "
    "dates and any question or action item. Never add anything the message does not say."
)


def is_own_summary(text: str) -> bool:
    """Whether ``text`` is short enough to be shown as it is."""
    return len(text.split()) < OWN_SUMMARY_WORDS


def fallback_summary(text: str) -> str:
    """A cut of ``text`` at a word boundary, for when the model cannot summarise."""
    flat = " ".join(text.split())
    if len(flat) <= FALLBACK_CHARS:
        return flat
    return flat[:FALLBACK_CHARS].rsplit(" ", 1)[0] + "…"


@attrs.frozen
class Summary:
    """A summary and the model calls it took (0 or 1)."""

    text: str
    model_calls: int = 0


@attrs.frozen
class RoutineSummarizer:
    """Summaries by ``llm`` (MEMORY_MODEL); None: every message summarised by its cut."""

    llm: LLM | None = None

    async def summarize(self, chat_id: int, routine: str, text: str) -> Summary:
        if is_own_summary(text):
            return Summary(" ".join(text.split()))
        if self.llm is None:
            return Summary(fallback_summary(text))
        prompt = f"Summarise this {routine} message in 2-3 sentences:\n\n{text}"
        try:
            completion = await self.llm.complete(
                system=SYSTEM,
                messages=[Message.user(prompt)],
                tools=[],
                max_tokens=MAX_TOKENS,
                purpose=PURPOSE,
                chat_id=chat_id,
            )
        except LLMError as exc:
            log.warning(
                "routine.summary_failed", chat_id=chat_id, routine=routine, error=type(exc).__name__
            )
            return Summary(fallback_summary(text), model_calls=1)
        summary = " ".join(completion.text.split())
        if not summary or len(summary) >= len(" ".join(text.split())):
            return Summary(fallback_summary(text), model_calls=1)
        return Summary(summary, model_calls=1)
