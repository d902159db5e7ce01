"""After a turn: what the agent logs of it, and whether the compaction rule says the chat must
be compacted before the next one (the turn's own rows against the next window, its context with
those rows against ``CONTEXT_TOKEN_BUDGET``)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

from actors.agent.context import TurnContext, context_tokens
from actors.agent.tool_loop import LoopState
from actors.agent.turn import TurnInput
from actors.agent.window_text import format_window
from memory.conversation.messages import ChatMessage
from memory.conversation.window import CompactionRule, WindowState
from memory.retrieval.retriever import RetrievedMemory
from runtime.logs import get_logger

#: tokens added to the after-turn estimate: the turn's rows formatted on their own differ by a
#: few characters from how the next turn shows them (a day separator, the split into stamped and
#: aged rows), so the estimate must not land a token under the budget the next context exceeds
ESTIMATE_MARGIN_TOKENS = 32

log = get_logger("actors.agent.handler")

#: what the agent calls when the chat must be compacted (the compactor's ``request``)
OverBudget = Callable[[int], Awaitable[None] | None]


def compaction_reason(
    rule: CompactionRule,
    chat_id: int,
    context: TurnContext,
    shown: int,
    new_rows: Sequence[ChatMessage],
    *,
    timezone: str,
    now: datetime,
) -> str | None:
    """Why the chat must be compacted after this turn (logged), or None: its ``shown`` window
    rows and the turn's own rows against the next window, and this turn's context (already
    formatted) with the turn's own rows after it against the budget."""
    added = format_window(new_rows, timezone, now)
    window = f"{context.window}\n{added}"
    tokens = context_tokens(
        system=context.base,
        patterns=context.patterns,
        window=window,
        tools=context.tools,
        episodes=context.episodes,
    )
    reason = rule.reason(
        WindowState(rows=shown + len(new_rows), tokens=tokens + ESTIMATE_MARGIN_TOKENS)
    )
    if reason is not None:
        log.info(
            "agent.over_budget",
            chat_id=chat_id,
            reason=reason,
            tokens=tokens,
            rows=shown + len(new_rows),
            budget=rule.token_budget,
        )
    return reason


def log_turn(turn: TurnInput, state: LoopState, memory: RetrievedMemory) -> None:
    """One log line per turn: its calls, tokens and cost; a failure or a tripped guardrail as a
    warning."""
    fields: dict[str, Any] = {
        "chat_id": turn.chat_id,
        "inbox_ids": list(turn.inbox_ids),
        "llm_calls": state.llm_calls,
        "tool_calls": state.tool_calls,
        "input_tokens": state.input_tokens,
        "output_tokens": state.output_tokens,
        "cost_usd": round(state.cost_usd, 6),
        "memory_degraded": memory.degraded,
    }
    if state.error is not None:
        exc = state.error
        log.warning(
            "agent.turn_failed",
            cause=type(exc).__name__,
            status=exc.status,
            error_type=exc.error_type,
            error=exc.message,
            retry_after=exc.retry_after,
            **fields,
        )
    elif state.tripped is not None:
        log.warning(
            "agent.guardrail",
            guardrail=state.tripped,
            partial_answer=bool(state.last_text),
            **fields,
        )
    else:
        log.info("agent.turn", **fields)


async def request_compaction(on_over_budget: OverBudget | None, chat_id: int) -> None:
    """Call ``on_over_budget`` (run by the chat actor once the turn's rows are committed, so
    the compactor's own budget check sees them); its failure is logged, not raised."""
    if on_over_budget is None:
        return
    try:
        result = on_over_budget(chat_id)
        if inspect.isawaitable(result):
            await result
    except Exception as exc:  # the compaction trigger must not fail the turn
        log.error("agent.over_budget_callback_failed", chat_id=chat_id, error=repr(exc))
