"""One turn's model/tool conversation (seed 000, "Agent safety guardrails") and what it leaves.

:class:`ToolLoop` asks the model, runs the tools it calls and feeds their results back until
a final answer, under :class:`Guardrails`: at most 15 tool calls, stop when the same tool is
called with identical arguments twice in a row (the 120 s wall clock is the caller's cancel
scope), tool_use/tool_result pairs repaired before every request. A transient model error
(:func:`is_outage`: unreachable, timeout, 429, 5xx, 529) is retried with backoff (the
provider's ``retry_after`` when it gives one) while the turn's deadline allows; a permanent one
(400, 401, 403, 404) ends the loop at once with an operator-facing log line naming the setting
to fix (``agent.model_rejected``; the rule is ``memory.llm.settings.settings_to_fix``).
:func:`transcript_rows` turns the conversation into the rows to store (tool results truncated
for storage) and :func:`reply_text` into what the person gets (the answer, a partial answer
with a note, or an apology). Used by :class:`actors.agent.handler.Agent`.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import attrs
import trio

from actors.agent.context import repair_messages
from memory.conversation.messages import ChatMessage, ToolCall
from memory.errors import (
    LLMError,
    LLMOverloaded,
    LLMRateLimited,
    LLMRequestError,
    LLMTimeout,
    LLMUnavailable,
)
from memory.llm.protocol import (
    LLM,
    CacheTTL,
    Completion,
    Message,
    OnEvent,
    StreamEvent,
    System,
    TextBlock,
    TextDelta,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
)
from memory.llm.settings import settings_to_fix
from memory.tools.registry import ToolContext, ToolRegistry
from memory.tools.results import truncate_for_storage
from runtime.backoff import backoff_delay
from runtime.logs import get_logger

log = get_logger(__name__)

PURPOSE = "agent"
SORRY_BUSY = "Sorry, I'm overloaded right now. Please try again in a minute."
SORRY_SLOW = "Sorry, the language model took too long to answer. Please try again."
SORRY_FAILED = "Sorry, I couldn't get an answer just now. Please try again in a moment."
CAP_NOTE = "(Tool call limit reached: answer now with what you have, without calling tools.)"
STOP_REASONS = {
    "tool_limit": "I stopped after too many tool calls",
    "repeated_call": "I stopped because I kept repeating the same lookup",
    "time_limit": "I ran out of time for this answer",
}
NOTHING_DONE = "Sorry, I couldn't finish that: {reason}. Please try again or ask more narrowly."
DONE = "Done."
STOPPED = "(stopped)"
NO_ANSWER = "I'm not sure what to say to that."


@attrs.frozen
class Guardrails:
    """Hard limits of one turn's tool loop."""

    max_tool_calls: int = 15
    turn_seconds: float = 120.0
    #: waits between tries of a model that is down: doubling from base, at most cap (seconds)
    model_retry_base: float = 1.0
    model_retry_cap: float = 20.0


#: the model is down or busy, not refusing us: worth waiting for
OUTAGES = (LLMUnavailable, LLMTimeout, LLMRateLimited, LLMOverloaded)


def is_outage(exc: Exception) -> bool:
    """A transient model error (unreachable, timeout, 429, 5xx, 529): retry it later."""
    return isinstance(exc, OUTAGES)


def tool_specs(registry: ToolRegistry) -> tuple[ToolSpec, ...]:
    """The registry's tools as neutral :class:`ToolSpec`."""
    return tuple(ToolSpec(s["name"], s["description"], s["input_schema"]) for s in registry.specs())


def sorry(exc: LLMError) -> str:
    """The reply for a turn whose model call failed."""
    if isinstance(exc, LLMRateLimited | LLMOverloaded):
        return SORRY_BUSY
    if isinstance(exc, LLMTimeout):
        return SORRY_SLOW
    return SORRY_FAILED


def _call_key(name: str, arguments: Any) -> tuple[str, str]:
    return name, json.dumps(arguments, sort_keys=True, default=str)


# --- the tool loop -------------------------------------------------------------------------------


@attrs.define
class LoopState:
    """What the tool loop has done so far (read after it ends, finished or cancelled)."""

    messages: list[Message]
    pending: list[ToolResultBlock] = attrs.field(factory=list)  # results not yet in messages
    tool_calls: int = 0
    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    last_text: str = ""
    final_text: str | None = None
    tripped: str | None = None  # a key of STOP_REASONS
    error: LLMError | None = None
    #: the model called a stop tool (:attr:`ToolLoop.stops`): its name and input; the loop
    #: ended there
    stopped: tuple[str, dict[str, Any]] | None = None
    #: the text the model call in progress has streamed so far
    partial: str = ""
    #: the person stopped the turn (:meth:`halt`)
    halted: bool = False

    def halt(self) -> None:
        """The person stopped the turn: the text streamed so far becomes the answer (marked
        stopped by :func:`reply_text`) and the last assistant turn of the conversation."""
        self.halted = True
        self.flush()
        if self.partial.strip():
            self.messages.append(Message.assistant(self.partial))
            self.last_text = self.partial.strip()
            self.partial = ""

    def flush(self, note: str | None = None) -> None:
        """Append the pending tool results (and an optional note) as the next user message."""
        if self.pending:
            extra = [TextBlock(note)] if note else []
            self.messages.append(Message.user(*self.pending, *extra))
            self.pending = []


@attrs.frozen
class ToolLoop:
    """One turn's model/tool conversation under :class:`Guardrails`."""

    llm: LLM
    registry: ToolRegistry
    specs: tuple[ToolSpec, ...]
    system: System
    ctx: ToolContext
    guardrails: Guardrails = attrs.field(factory=Guardrails)
    max_tokens: int = 2048
    #: a prompt-cache breakpoint on each request's last message, so the next call of the turn
    #: reads what this one sent (None: none)
    cache: CacheTTL | None = None
    #: tools that end the turn when called (e.g. a routine turn's ``decline``): not run, no
    #: further model call; :attr:`LoopState.stopped` says which
    stops: frozenset[str] = frozenset()
    #: stream each model call, handing its events here (None: calls are not streamed)
    on_event: OnEvent | None = None

    def _listener(self, state: LoopState) -> OnEvent | None:
        """The call's stream listener: the text kept in ``state.partial``, every event passed
        on to :attr:`on_event`."""
        forward = self.on_event
        if forward is None:
            return None

        def listen(event: StreamEvent) -> None:
            if isinstance(event, TextDelta):
                state.partial += event.text
            forward(event)

        return listen

    async def run(self, state: LoopState, deadline: float | None = None) -> None:
        """Run until a final answer, a guardrail or an LLM error (recorded in ``state``; a
        transient one only once retrying would pass ``deadline``, a trio time)."""
        cap = self.guardrails.max_tool_calls
        previous: tuple[str, str] | None = None
        while True:
            repaired = repair_messages(state.messages)
            if repaired != state.messages:
                log.warning("agent.pairing_repaired", chat_id=self.ctx.chat_id)
            state.messages = repaired
            completion = await self._complete(state, deadline)
            if completion is None:
                return
            state.llm_calls += 1
            state.input_tokens += completion.input_tokens
            state.output_tokens += completion.output_tokens
            state.cost_usd += completion.cost_usd
            state.messages.append(completion.as_message())
            if completion.text.strip():
                state.last_text = completion.text.strip()
            if not completion.tool_uses:
                state.final_text = completion.text.strip()
                return
            stop = next((u for u in completion.tool_uses if u.name in self.stops), None)
            if stop is not None:
                state.stopped = (stop.name, dict(stop.input))
                return
            for use in completion.tool_uses:
                key = _call_key(use.name, use.input)
                if key == previous:
                    state.tripped = "repeated_call"
                    break
                if state.tool_calls >= cap:
                    state.tripped = "tool_limit"
                    break
                outcome = await self.registry.call(use.name, use.input, self.ctx)
                state.tool_calls += 1
                previous = key
                state.pending.append(ToolResultBlock(use.id, outcome.content, outcome.is_error))
            state.flush(CAP_NOTE if state.tool_calls >= cap else None)
            if state.tripped:
                return

    async def _complete(self, state: LoopState, deadline: float | None) -> Completion | None:
        """One model call, retried through transient errors while ``deadline`` allows; None
        when it failed (``state.error`` says why; it stays set while a retry is pending, so a
        turn cut by its deadline during an outage is known as one)."""
        g, failures = self.guardrails, 0
        while True:
            state.partial = ""
            try:
                completion = await self.llm.complete(
                    system=self.system,
                    messages=with_breakpoint(state.messages, self.cache),
                    tools=self.specs,
                    max_tokens=self.max_tokens,
                    purpose=PURPOSE,
                    chat_id=self.ctx.chat_id,
                    on_event=self._listener(state),
                )
            except LLMError as exc:
                state.error = exc
                if isinstance(exc, LLMRequestError):
                    log.error(
                        "agent.model_rejected",
                        chat_id=self.ctx.chat_id,
                        provider=exc.provider,
                        model=exc.model,
                        status=exc.status,
                        error=exc.message,
                        fix=f"check {settings_to_fix(exc)}",
                    )
                if not is_outage(exc):
                    return None
                delay = backoff_delay(
                    failures,
                    base=g.model_retry_base,
                    cap=g.model_retry_cap,
                    jitter=0.2,
                    draw=random.random(),
                )
                if exc.retry_after is not None and exc.retry_after > 0:
                    delay = exc.retry_after
                failures += 1
                if deadline is not None and trio.current_time() + delay >= deadline:
                    return None
                log.warning(
                    "agent.model_retrying",
                    chat_id=self.ctx.chat_id,
                    attempt=failures,
                    cause=type(exc).__name__,
                    status=exc.status,
                    delay=delay,
                )
                await trio.sleep(delay)
                continue
            state.error = None
            state.partial = ""
            return completion


def with_breakpoint(messages: Sequence[Message], cache: CacheTTL | None) -> list[Message]:
    """``messages`` with a prompt-cache breakpoint on the last one (unchanged for None)."""
    out = list(messages)
    if cache is not None and out:
        out[-1] = attrs.evolve(out[-1], cache=cache)
    return out


def transcript_rows(messages: Sequence[Message], at: datetime) -> list[ChatMessage]:
    """The rows to store for a turn's conversation after its user message (pairs repaired;
    results truncated for storage; notes in user messages are not stored)."""
    rows: list[ChatMessage] = []
    names: dict[str, str] = {}
    for message in repair_messages(messages)[1:]:
        if message.role == "assistant":
            calls = tuple(
                ToolCall(b.id, b.name, b.input)
                for b in message.blocks
                if isinstance(b, ToolUseBlock)
            )
            names.update((c.id, c.name) for c in calls)
            if calls or message.text.strip():
                rows.append(
                    ChatMessage(
                        role="assistant",
                        content=message.text.strip(),
                        created_at=at,
                        tool_calls=calls,
                    )
                )
            continue
        for block in message.blocks:
            if isinstance(block, ToolResultBlock):
                name = names.get(block.tool_use_id, "tool")
                rows.append(
                    ChatMessage(
                        role="tool_result",
                        content=truncate_for_storage(name, block.content),
                        created_at=at,
                        tool_call_id=block.tool_use_id,
                        tool_name=name,
                    )
                )
    return rows


def reply_text(state: LoopState) -> str:
    """What the person gets: the answer, the partial answer with a note, or an apology."""
    if state.halted:
        return f"{state.last_text}\n\n{STOPPED}" if state.last_text else STOPPED
    if state.error is not None:
        return sorry(state.error)
    if state.tripped is not None:
        reason = STOP_REASONS[state.tripped]
        if state.last_text:
            return f"{state.last_text}\n\n({reason}.)"
        return NOTHING_DONE.format(reason=reason)
    return state.final_text or state.last_text or (DONE if state.tool_calls else NO_ANSWER)
