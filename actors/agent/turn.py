"""The turn-handler interface between the chat actor and the agent.

The chat actor assembles what the person said (fragments joined, album captions combined,
voice transcribed) into a :class:`TurnInput`, asks a :class:`TurnHandler` for a
:class:`TurnReply`, and then, in one transaction, runs the reply's ``persist`` hook, puts the
reply text in the outbox and marks the inbox rows done. The agent (Claude tool loop) implements
``TurnHandler``; tests use their own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, Protocol

import attrs

from actors.agent.progress import NO_PROGRESS, TurnProgress
from actors.queues.outbox import ParseMode
from actors.telegram.keyboards import InlineKeyboard
from memory.llm.protocol import ImageBlock
from memory.tools.registry import Confirmations
from runtime.db import Connection

#: why a turn runs: the person wrote, a routine is due, a reminder is due
Reason = Literal["user_message", "routine", "reminder"]


@attrs.frozen
class TurnInput:
    """One assembled user message."""

    chat_id: int
    text: str
    inbox_ids: tuple[int, ...]
    message_ids: tuple[int, ...]
    #: durable ids of the source updates (``update:<id>``), for chat_messages.external_message_id
    external_ids: tuple[str, ...]
    sender_id: int | None = None
    kind: str = "text"  # text | voice | media_group | edited | callback
    #: why the turn runs: the person wrote, or a routine is due (then ``text`` is the
    #: routine's brief, not the person's words, and the model may decline: see
    #: :mod:`actors.agent.routine_turn`)
    reason: Reason = "user_message"
    #: the routine's name (``reason`` "routine")
    routine: str | None = None
    #: the person's photos, given to the model with ``text`` (never stored)
    images: tuple[ImageBlock, ...] = attrs.field(default=(), eq=False, repr=False)
    #: where the turn shows its progress (the streamed draft)
    progress: TurnProgress = attrs.field(default=NO_PROGRESS, eq=False, repr=False)


@attrs.frozen
class TurnReply:
    """What to send back; ``persist`` runs inside the outbox transaction (e.g. store rows),
    ``after_commit`` once that transaction has committed (e.g. ask for a compaction, which
    must see the turn's rows). ``keyboard``: inline buttons under the reply (on its last
    chunk), built with :func:`actors.chat.callbacks.keyboard`."""

    text: str
    parse_mode: ParseMode | None = None
    persist: Callable[[Connection], Awaitable[Any]] | None = None
    after_commit: Callable[[], Awaitable[Any]] | None = None
    keyboard: InlineKeyboard | None = None
    #: a routine turn the model declined (with the ``decline`` tool): why. Nothing is sent;
    #: ``text`` is never used
    declined: str | None = None
    #: the model calls the turn made (for ``proactive_runs``)
    model_calls: int = 0


class TurnConfirmations(Confirmations, Protocol):
    """One turn's asks (:class:`memory.tools.registry.Confirmations`), sent with the turn's
    commit: ``send`` queues their messages and buttons in the outbox transaction."""

    async def send(self, conn: Connection, inbox_ids: Sequence[int]) -> None: ...


#: a chat's asks for one turn (:func:`actors.chat.model_asks.model_asks`)
AskFactory = Callable[[int], TurnConfirmations]


class TurnHandler(Protocol):
    async def run_turn(self, turn: TurnInput) -> TurnReply: ...


@attrs.frozen
class NoAgent:
    """The handler used until an LLM is configured: says so instead of pretending to think."""

    async def run_turn(self, turn: TurnInput) -> TurnReply:
        return TurnReply(
            "I received your message, but no language model is configured yet, so I cannot "
            "answer. (The operator needs to set up engram's agent.)"
        )
