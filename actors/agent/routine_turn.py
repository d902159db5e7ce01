"""A routine turn (``reason`` "routine"): the model is asked with a routine's brief, not a
message from the person, and may decline.

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
from typing import TYPE_CHECKING, Any

import trio

from actors.agent.context import build_context
from actors.agent.tool_loop import LoopState, ToolLoop, is_outage, tool_specs
from actors.agent.turn import TurnInput, TurnReply
from actors.errors import ModelUnavailable
from memory.llm.protocol import Message, ToolSpec
from memory.tools.registry import ToolContext
from runtime.concurrency import both
from runtime.logs import get_logger

if TYPE_CHECKING:
    from actors.agent.handler import Agent

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
MARKER_WORDS = frozenset({"none", "skip", "skipped", "decline", "declined", "noreply", "silent",
                          "pass", "nothing", "null", "empty"})  # fmt: skip


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


async def run_routine_turn(agent: Agent, turn: TurnInput) -> TurnReply:
    """One routine turn by ``agent`` (see the module docstring). Raises
    :class:`~actors.errors.ModelUnavailable` when the model is down and
    :class:`RoutineTurnFailed` when it ends without a message."""
    chat_id = turn.chat_id
    deadline = trio.current_time() + agent.guardrails.turn_seconds
    now = agent.clock()
    (window, (memory, episodes)), profile = await both(
        lambda: both(
            lambda: agent.conversation.recent(chat_id, agent.window_limit),
            lambda: both(
                lambda: agent._retrieve(chat_id, turn.text),
                lambda: agent._episodes(chat_id),
            ),
        ),
        lambda: agent._profile(chat_id, now),
    )
    specs = (*tool_specs(agent.tools), DECLINE_SPEC)
    context = build_context(
        now=now, timezone=agent.timezone, memory=memory, window=window, tools=specs,
        persona=f"{agent.persona}\n\n{ROUTINE_NOTE}", episodes=episodes,
        episode_budget=agent.episode_budget, profile=profile, cache=agent.prompt_cache,
        recent_rows=agent.recent_rows, block_rows=agent.block_rows,
    )  # fmt: skip
    tool_ctx = ToolContext(
        db=agent.tool_db, embedder=agent.embedder, chat_id=chat_id, timezone=agent.timezone,
        now=now,
    )  # fmt: skip
    loop = ToolLoop(agent.llm, agent.tools, specs, context.blocks, tool_ctx, agent.guardrails,
                    agent.max_tokens, stops=frozenset({DECLINE}))  # fmt: skip
    state = LoopState([Message.user(brief_message(turn))])
    with trio.move_on_at(deadline) as scope:
        await loop.run(state, deadline)
    calls = state.llm_calls
    fields: dict[str, Any] = {"chat_id": chat_id, "routine": turn.routine, "llm_calls": calls,
                              "tool_calls": state.tool_calls}  # fmt: skip
    if state.error is not None and is_outage(state.error):
        raise ModelUnavailable(state.error)
    if state.stopped is not None:
        reason = str(state.stopped[1].get("reason") or "declined").strip()[:200]
        log.info("agent.routine_declined", reason=reason, **fields)
        return TurnReply("", declined=reason or "declined", model_calls=calls)
    if state.error is not None:
        raise RoutineTurnFailed(f"model error: {type(state.error).__name__}", calls)
    if scope.cancelled_caught or state.tripped is not None:
        raise RoutineTurnFailed(f"guardrail: {state.tripped or 'time_limit'}", calls)
    text = (state.final_text or "").strip()
    if looks_like_marker(text):
        log.warning("agent.routine_marker", reply_chars=len(text), **fields)
        return TurnReply("", declined="no message (empty or marker reply)", model_calls=calls)
    log.info("agent.routine_turn", **fields)
    return TurnReply(text, model_calls=calls)
