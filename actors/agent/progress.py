"""What a running turn shows the person before its reply is committed.

The chat actor gives each :class:`~actors.agent.turn.TurnInput` a :class:`TurnProgress`; the
agent passes the model's stream events to it (text as it is written, a tool call starting).
The chat actor's implementation turns them into a draft of the reply in Telegram; the draft is
ephemeral, the reply itself still goes through the outbox. :data:`NO_PROGRESS` shows nothing.
"""

from __future__ import annotations

from typing import Protocol

import attrs

from memory.llm.protocol import StreamEvent


class TurnProgress(Protocol):
    def on_event(self, event: StreamEvent) -> None:
        """The model's answer grew, or it started a tool call (never blocks)."""
        ...


@attrs.frozen
class NoProgress:
    """Shows nothing."""

    def on_event(self, event: StreamEvent) -> None:
        return None


NO_PROGRESS: TurnProgress = NoProgress()
