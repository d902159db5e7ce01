"""A routine turn (``reason`` "routine", run by :meth:`actors.agent.handler.Agent.run_turn`):
the model is asked with a routine's brief, not a message from the person, and may decline.

The system prompt says so (:data:`ROUTINE_NOTE`); the brief goes in as the turn's first message
inside ``<routine>`` tags and is not stored as the person's words; the ``decline`` tool is
offered on these turns only. Declining is structured, never a word in the text: a call to
``decline`` ends the loop at once (no further model call) and the reply is
:attr:`~actors.agent.turn.TurnReply.declined`, with no text to send. A reply that is empty or
looks like an internal marker (:func:`looks_like_marker`, e.g. ``NO_REPLY``) is taken as a
decline too, so such a token can never reach the person. A failed or cut-short turn
(:class:`RoutineTurnFailed`) sends nothing either: no apology to someone who did not write.
"""

from __future__ import annotations

import re
from typing import Any

from actors.agent.tool_loop import LoopState, is_outage
from actors.agent.turn import TurnInput, TurnReply
from actors.errors import ModelUnavailable
from memory.llm.protocol import ToolSpec
from runtime.logs import get_logger

log = get_logger(__name__)

DECLINE = "decline"
DECLINE_SPEC = ToolSpec(
    DECLINE,
    "Send nothing this time: call this instead of writing a message when you have nothing "
    "worth the person's attention right now. Only offered when you are writing on your own.",
    {
        "type": "object",
        "properties": {"reason": {"type": "string", "description": "why, in a few words"}},
        "required": ["reason"],
        "additionalProperties": False,
    },
)
ROUTINE_NOTE = """\
This turn is not a reply: the person did not write. A routine of yours is due, and its brief is
below inside <routine> tags. Write one short message they would be glad to get now, in your
own voice, without mentioning routines, schedules or this note. If it is not worth their
attention now, call the decline tool instead of writing anything: then nothing is sent."""
#: a whole reply that looks like an internal token (NO_REPLY, HEARTBEAT_OK, [SKIP], <none>)
MARKER = re.compile(r"[\[(<{]*[A-Za-z]+(?:[_-][A-Za-z0-9]+)*[\])>}]*[.!]?")
#: words a marker-like reply may be when it is not all capitals or joined by _/-
MARKER_WORDS = frozenset(
    {
        "none",
        "skip",
        "skipped",
        "decline",
        "declined",
        "noreply",
        "silent",
        "pass",
        "nothing",
        "null",
        "empty",
    }
)


class RoutineTurnFailed(Exception):
    """A routine turn ended without a message to send (a model error or a guardrail)."""

    def __init__(self, reason: str, model_calls: int) -> None:
        super().__init__(reason)
        self.model_calls = model_calls


def looks_like_marker(text: str) -> bool:
    """Whether a whole reply is an internal marker rather than a message: empty, or one
    token that is all capitals or joined by ``_``/``-`` (``NO_REPLY``, ``HEARTBEAT_OK``,
    ``[SKIP]``), or one of :data:`MARKER_WORDS`."""
    flat = text.strip()
    if not flat:
        return True
    if not MARKER.fullmatch(flat):
        return False
    core = flat.strip("[](){}<>.!")
    return (
        (core.isupper() and len(core) > 1)
        or "_" in core
        or "-" in core
        or (core.lower().replace("_", "") in MARKER_WORDS)
    )


def brief_message(turn: TurnInput) -> str:
    """The routine's brief as the turn's first message."""
    return f'<routine name="{turn.routine or "routine"}">\n{turn.text}\n</routine>'


def routine_reply(state: LoopState, cut: bool, chat_id: int, routine: str | None) -> TurnReply:
    """What a routine turn's loop leaves (see the module docstring): a declined reply, or the
    message to send. Raises :class:`~actors.errors.ModelUnavailable` when the model is down and
    :class:`RoutineTurnFailed` when the turn ended without a message (``cut``: by its
    deadline)."""
    calls = state.llm_calls
    fields: dict[str, Any] = {
        "chat_id": chat_id,
        "routine": routine,
        "llm_calls": calls,
        "tool_calls": state.tool_calls,
    }
    if state.error is not None and is_outage(state.error):
        raise ModelUnavailable(state.error)
    if state.stopped is not None:
        reason = str(state.stopped[1].get("reason") or "").strip()[:200] or "declined"
        log.info("agent.routine_declined", reason=reason, **fields)
        return TurnReply("", declined=reason, model_calls=calls)
    if state.error is not None:
        raise RoutineTurnFailed(f"model error: {type(state.error).__name__}", calls)
    if cut or state.tripped is not None:
        raise RoutineTurnFailed(f"guardrail: {state.tripped or 'time_limit'}", calls)
    text = (state.final_text or "").strip()
    if looks_like_marker(text):
        log.warning("agent.routine_marker", reply_chars=len(text), **fields)
        return TurnReply("", declined="no message (empty or marker reply)", model_calls=calls)
    log.info("agent.routine_turn", **fields)
    return TurnReply(text, model_calls=calls)
