"""What a running turn shows the person before its reply is committed, and how they stop it.

The chat actor gives each :class:`~actors.agent.turn.TurnInput` a :class:`TurnProgress`; the
agent passes the model's stream events to it (text as it is written, a tool call starting) and
runs the generation inside :meth:`TurnProgress.stoppable` — a cancel scope the person's Stop
(``/stop`` or Telegram's button) cancels; the agent then keeps what was written as the reply,
marked stopped. The chat actor's implementation shows the events as a draft of the reply in
Telegram; the draft is ephemeral, the reply itself still goes through the outbox.
:data:`NO_PROGRESS` shows nothing and nobody can stop it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

import attrs
import trio

from memory.llm.protocol import StreamEvent


class TurnProgress(Protocol):
    #: whether the turn's model calls are to stream (their events are shown)
    @property
    def streaming(self) -> bool: ...

    def on_event(self, event: StreamEvent) -> None:
        """The model's answer grew, or it started a tool call (never blocks)."""
        ...

    def stoppable(self) -> AbstractContextManager[trio.CancelScope]:
        """The generation's cancel scope, cancelled when the person stops the turn."""
        ...


@contextmanager
def unstoppable() -> Iterator[trio.CancelScope]:
    with trio.CancelScope() as scope:
        yield scope


@attrs.frozen
class NoProgress:
    """Shows nothing; nobody can stop it."""

    @property
    def streaming(self) -> bool:
        return False

    def on_event(self, event: StreamEvent) -> None:
        return None

    def stoppable(self) -> AbstractContextManager[trio.CancelScope]:
        return unstoppable()


NO_PROGRESS: TurnProgress = NoProgress()
