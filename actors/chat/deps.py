"""What every chat actor shares (:class:`ChatDeps`: its store, the turn handler, the bot, the
limits and retry waits, the commands and buttons), built once by the composition root; and the
two edges it is given, the voice :data:`Transcriber` and the typing :class:`ChatActionClient`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Protocol

import attrs

from actors.agent.turn import TurnHandler
from actors.chat.callbacks import Callbacks
from actors.chat.command_base import CommandTable
from actors.chat.commands import command_table
from actors.chat.drafts import Drafts
from actors.chat.erase_command import EraseConfirm
from actors.chat.proactive import Proactive
from actors.chat.store import ChatStore
from actors.chat.wakes import PendingWakes, RunningTurns
from actors.queues import inbox, outbox
from actors.telegram.media import PhotoSize
from actors.telegram.types import Voice
from memory.llm.protocol import ImageBlock

Transcriber = Callable[[int, Voice], Awaitable[str]]
#: a message's photos (each one's sizes) -> image blocks (raises PhotoError)
PhotoFetcher = Callable[[Sequence[Sequence[PhotoSize]]], Awaitable[tuple[ImageBlock, ...]]]


class ChatActionClient(Protocol):
    async def send_chat_action(self, chat_id: int | str, action: str = "typing") -> None: ...


@attrs.define
class ChatDeps:
    """What every chat actor shares."""

    store: ChatStore
    turns: TurnHandler
    bot: ChatActionClient
    outbox_ready: Callable[[int, outbox.OutboxRow | None], None]
    running: RunningTurns = attrs.field(factory=RunningTurns)
    wakes: PendingWakes = attrs.field(factory=PendingWakes)
    transcribe: Transcriber | None = None
    #: downloads photos for the model (None: photos are read by their captions only)
    photos: PhotoFetcher | None = None
    typing_interval: float = 5.0
    max_attempts: int = 3
    max_crashes: int = inbox.MAX_CRASHES
    #: waits before retrying a chat's oldest row while the model is down (seconds)
    model_retry_base: float = 5.0
    model_retry_cap: float = 300.0
    #: a row waiting for the model is answered MODEL_GAVE_UP once this old (SEND_DEADLINE)
    model_deadline: float = 86_400.0
    #: waits before the chat's rows are taken again after one failed (seconds; doubling)
    failure_retry_base: float = 0.5
    failure_retry_cap: float = 30.0
    wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    #: the chat commands (``engram serve``: with the memory commands)
    commands: CommandTable = attrs.field(factory=command_table)
    #: inline buttons' handlers (None: taps are skipped)
    callbacks: Callbacks | None = None
    #: model turns a chat may start per minute (CHAT_TURNS_PER_MINUTE; 0: no limit)
    turns_per_minute: int = 0
    #: CHAT_DAILY_COST_USD (None: no limit) and what a chat's model calls cost today
    daily_cost_usd: float | None = None
    spent_today: Callable[[int, datetime], Awaitable[float]] | None = None
    #: when the next day starts (the daily limit renews), from the wall clock's ``now``
    next_day: Callable[[datetime], datetime] | None = None
    #: due routine runs and reminders: the routines by name, the gates, the summaries (None:
    #: such rows are skipped; see :mod:`actors.chat.due_runs`)
    proactive: Proactive | None = None
    #: ``/forget everything``'s typed word (None: the word is an ordinary message)
    erase: EraseConfirm | None = None
    #: each turn's streamed draft (STREAM_REPLIES; None: not streamed)
    drafts: Drafts | None = None
