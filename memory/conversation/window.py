"""The compaction rule: when a chat's uncompacted rows must be compacted (issue 14, item 1).

A turn shows the newest ``window_limit - 1`` uncompacted rows before its new message
(:meth:`memory.conversation.messages.SqlConversationStore.add_user_and_recent`). The memory
invariant: for every chat, once a turn's compaction has settled, no uncompacted row is older
than the oldest row the next turn's window shows — nothing leaves the window without becoming
patterns and an episode first. :meth:`CompactionRule.reason` says whether a chat must be
compacted now, and why:

* ``rows``: more uncompacted rows than the next window shows (one would fall out unseen);
* ``tokens``: the next turn's estimated context exceeds the token budget;
* ``idle``: nobody has written for ``idle_after`` seconds and there are rows beyond
  ``keep_recent`` (a quiet chat's facts become patterns the same night).

The rule is written once, here: the agent applies it after every turn
(:mod:`actors.agent.handler`, with the turn's own rows counted), the compaction re-checks it
inside the chat's lock before every chunk (:func:`memory.compaction.run.compact_chat`, fed
by :class:`actors.compactor.WindowEstimate`), and the maintenance sweep applies it to every
chat's backlog (:mod:`memory.compaction.backlog`). A compaction removes the oldest rows, at most
``chunk_messages`` per round, and runs round after round while the rule still says so.
"""

from __future__ import annotations

import math
from typing import Literal

import attrs

from memory.conversation.messages import DEFAULT_WINDOW_LIMIT
from memory.settings import MemorySettings

Reason = Literal["rows", "tokens", "idle"]
#: the most rows one turn stores: its user row, 15 tool calls (an assistant row and a result
#: each, at most) and the final answer (the tool loop's guardrail is 15 calls)
MAX_TURN_ROWS = 32
#: the default of ``COMPACTION_IDLE_AFTER``: six hours
IDLE_AFTER = 6 * 3600.0


@attrs.frozen
class WindowState:
    """What the rule looks at: a chat's uncompacted rows (a count capped anywhere above the
    window is enough), the estimated tokens of its next turn's context, and the seconds since
    its newest row."""

    rows: int
    tokens: int
    idle_seconds: float = 0.0


def _below_window(instance: CompactionRule, _: object, value: int) -> None:
    if not 0 <= value < instance.window_limit - 1:
        raise ValueError(
            f"keep_recent must be below the window's {instance.window_limit - 1} rows, got {value}"
        )


@attrs.frozen(kw_only=True)
class CompactionRule:
    """When a chat must be compacted (see the module docstring)."""

    token_budget: int
    keep_recent: int = attrs.field(default=20, validator=_below_window)
    chunk_messages: int = 40
    idle_after: float = IDLE_AFTER
    window_limit: int = DEFAULT_WINDOW_LIMIT

    @classmethod
    def from_settings(cls, settings: MemorySettings, **overrides: int | float) -> CompactionRule:
        """The rule of ``CONTEXT_TOKEN_BUDGET``, ``WINDOW_MESSAGES``, ``COMPACTION_KEEP_RECENT``,
        ``COMPACTION_CHUNK_MESSAGES`` and ``COMPACTION_IDLE_AFTER``."""
        values: dict[str, int | float] = {
            "token_budget": settings.context_token_budget,
            "window_limit": settings.window_messages,
            "keep_recent": settings.compaction_keep_recent,
            "chunk_messages": settings.compaction_chunk_messages,
            "idle_after": settings.compaction_idle_after,
            **overrides,
        }
        return cls(**values)  # type: ignore[arg-type]

    @property
    def window_rows(self) -> int:
        """The rows the next turn's window shows before its new message."""
        return self.window_limit - 1

    @property
    def max_rounds(self) -> int:
        """Chunks one request may compact: enough to take a full window plus one turn's rows
        down to ``keep_recent`` (a chat kept by this rule never needs more; an older backlog is
        the maintenance sweep's, a chunk at a time)."""
        return math.ceil((self.window_limit + MAX_TURN_ROWS) / max(1, self.chunk_messages)) + 1

    def reason(self, state: WindowState) -> Reason | None:
        """Why the chat must be compacted now, or None when it need not be."""
        if state.rows > self.window_rows:
            return "rows"
        if state.tokens > self.token_budget:
            return "tokens"
        if state.rows > self.keep_recent and state.idle_seconds >= self.idle_after:
            return "idle"
        return None
