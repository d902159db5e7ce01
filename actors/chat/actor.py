"""ChatActor: one per chat, processes that chat's inbox rows strictly in order.

The inbox table is the chat's queue. A :class:`Wake` tells the actor something new may be
there; it loads the open rows it has not taken yet (by id) and, for each:

* text: fragment reassembly (a >= 4000-char text waits up to 1.5 s for its continuation) and
  media-group buffering (500 ms), via the pure rules in :mod:`actors.chat.fragments`; the actor is a
  :class:`~runtime.registry.TimedHandler`, so the registry wakes it at the buffer's deadline;
* a ``/command``: answered from the command table (:mod:`actors.chat.commands`; ``/stop`` was
  already acted on by the router, which cancelled the running turn), never by the model;
* voice: downloaded and transcribed, then handled as text; too large or failed -> a reply
  saying so;
* a forwarded message (text, caption or voice): someone else's words, never a command, handed to
  the model inside ``<untrusted>`` tags naming its origin (:func:`memory.untrusted.wrap_forwarded`);
* edited messages: handled as text; button presses (callback queries, already answered by the
  router): the handler their token names (:mod:`actors.chat.callbacks`), nothing without
  ``callbacks``; anything else is skipped with a reason.

A turn runs the :class:`~actors.agent.turn.TurnHandler` with ``typing`` shown, then commits in one
transaction: the reply's ``persist`` hook, the outbox row, and the inbox rows marked done.

Nothing a chat sends stops the actor (see :mod:`actors.queues.inbox`): an exception while rows
are in hand (a command, a button tap, a turn; other than the database being unreachable or busy)
is charged to those rows as a failed attempt, and the actor starts over from the inbox (as a
restart would, without being one) after ``failure_retry_base`` seconds, doubling up to
``failure_retry_cap``, the chat's later rows waiting behind; a row with ``max_attempts``
failures, or in its turn at ``max_crashes`` process crashes, is skipped and the person told
(``GAVE_UP``, one short line): a poison update is quarantined, it can neither loop, nor hold up
the chat's later messages, nor reach the registry's restart budget (whose escalation ends the
process). A statement timeout or a serialization failure is nobody's fault: the rows are handed
back uncharged and retried the same way. Only the database being unreachable leaves the actor
(restarted uncharged; ``DB_OUTAGE_LIMIT`` decides for the process).

A model outage is waited out: a turn raising :class:`~actors.errors.ModelUnavailable` (the
model still down after the turn's own retries) hands its rows back uncharged, tells the person
once (``MODEL_AWAY``: not repeated while it is the chat's latest reply), and the actor retries
the chat's oldest open row on a timer (``model_retry_base`` doubling up to ``model_retry_cap``,
jittered), the chat's later messages waiting behind it, until the row is ``model_deadline``
seconds old; then it is answered ``MODEL_GAVE_UP``.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import attrs
import trio

from actors.agent.turn import TurnHandler, TurnInput, TurnReply
from actors.chat import fragments, limits
from actors.chat.callbacks import Callbacks
from actors.chat.command_base import CommandTable
from actors.chat.commands import command_table
from actors.chat.store import ChatStore
from actors.chat.typing_indicator import typing_while
from actors.chat.wakes import PendingWakes, RunningTurns, Wake
from actors.errors import ModelUnavailable
from actors.queues import inbox, outbox
from actors.telegram.errors import MalformedUpdate, VoiceError
from actors.telegram.types import Message, Voice, parse_update
from memory.untrusted import wrap_forwarded
from runtime.backoff import backoff_delay
from runtime.errors import (
    DatabaseError,
    DatabaseOutage,
    DatabaseUnavailable,
    QueryCanceled,
    SerializationFailure,
)
from runtime.logs import get_logger

log = get_logger(__name__)

#: the database's troubles, not the rows': never charged to them (a constraint violation is)
NOT_THE_ROWS = (DatabaseUnavailable, DatabaseOutage, QueryCanceled, SerializationFailure)
#: of those, the ones that leave the actor (the registry restarts it uncharged; the process
#: gives up past DB_OUTAGE_LIMIT): the others are retried by the actor itself
OUTAGE = (DatabaseUnavailable, DatabaseOutage)

SORRY = "Sorry, something went wrong on my side. Please try again in a moment."
GAVE_UP = "Sorry, I could not process one of your messages, so I skipped it."
NO_VOICE = "I can't transcribe voice messages here (no speech-to-text is configured). Please type."
UNSUPPORTED = "I can only read text, captions and voice messages for now."
HELP = command_table().help_text()  # /start and /help without the memory commands
MODEL_AWAY = "I can't reach my model right now; I'll answer as soon as it's back."
MODEL_GAVE_UP = (
    "Sorry, my model stayed unreachable for too long, so I could not answer one of your "
    "messages. Please send it again."
)


Transcriber = Callable[[int, Voice], Awaitable[str]]


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


@attrs.define
class ChatActor:
    """The per-chat actor body (a registry handler with a timer)."""

    chat_id: int
    deps: ChatDeps
    state: fragments.Reassembler = attrs.field(factory=fragments.Reassembler)
    cursor: int = 0  # highest inbox id already taken into memory
    sources: dict[int, tuple[str, str]] = attrs.field(factory=dict)  # inbox id -> (ext id, kind)
    in_hand: tuple[int, ...] = ()  # the rows being processed: charged if it raises
    received: dict[int, datetime] = attrs.field(factory=dict)  # inbox id -> received_at
    retry_at: float | None = None  # the model is down: when to retry the chat's oldest row
    model_failures: int = 0  # postponements in a row (the retry backoff's exponent)
    failures: int = 0  # failures since a row was last answered (the retry's exponent)
    ready: list[fragments.Flushed] = attrs.field(factory=list)  # taken, for the next turn
    held: list[fragments.Flushed] = attrs.field(factory=list)  # waiting for a per-chat limit
    held_until: float | None = None  # when the limit lets the held messages' turn start
    told_limit: bool = False  # the person was told the chat is at its limit (once)
    turn_starts: list[float] = attrs.field(factory=list)  # recent turns (the rate limit)
    turns_run: int = 0

    # --- registry hooks ------------------------------------------------------------------------

    async def handle(self, msg: Wake) -> None:
        self.deps.wakes.release(self.chat_id)  # before reading: a later insert wakes us again
        if self.retry_at is None:  # else the model is down: new rows wait behind the oldest
            await self._charging(self._take_new)

    def deadline(self) -> float | None:
        dues = [fragments.deadline(self.state), self.retry_at, self.held_until]
        return min((d for d in dues if d is not None), default=None)

    async def on_deadline(self) -> None:
        held_until, now = self.held_until, trio.current_time()
        if held_until is not None and self.retry_at is None and now >= held_until:
            held, self.held, self.held_until = self.held, [], None  # the limit lets them pass
            await self._charging(lambda: self._reclaim_and_run(held))
            return
        # still held: a fragment's timer, or closing; what it flushes joins the held (their
        # rows wait in the inbox for the next start)
        if self.retry_at is not None:
            if trio.current_time() < self.retry_at:
                return  # the mailbox closes early: the rows wait in the inbox for the next start
            self.retry_at = None
            await self._charging(self._take_new)  # the oldest open row again, then the rest
            return
        flushed = fragments.expire(self.state, trio.current_time())
        if not flushed:  # called early: the mailbox is closing, flush what is buffered
            flushed = fragments.flush_all(self.state)
        await self._charging(lambda: self._run_flushed(flushed))

    async def _charging(self, work: Callable[[], Awaitable[None]]) -> None:
        """Run ``work``; an exception is charged to the rows in hand as a failed attempt (their
        own failure) and the chat's rows are taken again later (:meth:`_start_over`), never
        re-raised. Not the database being busy or slow (``NOT_THE_ROWS``): the rows are handed
        back uncharged; unreachable (``OUTAGE``): re-raised, the actor restarts."""
        try:
            await work()
        except ModelUnavailable:
            return  # postponed (see _postpone): not the rows' failure
        except OUTAGE:
            raise
        except Exception as exc:
            ids, store = list(self.in_hand), self.deps.store
            if isinstance(exc, NOT_THE_ROWS):
                log.warning("chat.rows_delayed", inbox_ids=ids, error=type(exc).__name__)
                await store.release(ids, f"{type(exc).__name__}: {exc}")
            elif ids:
                log.error("chat.rows_failed", inbox_ids=ids, exc_info=exc)
                await store.mark_failed(ids, f"{type(exc).__name__}: {exc}")
            else:
                log.error("chat.failed", exc_info=exc)
            self._start_over()
        else:
            self.failures = 0

    def _start_over(self) -> None:
        """Forget what is in memory (it is all in the inbox) and take the chat's open rows
        again after the failure backoff, as a restarted actor would."""
        deps = self.deps
        delay = backoff_delay(
            self.failures, base=deps.failure_retry_base, cap=deps.failure_retry_cap
        )
        self.failures += 1
        self.retry_at = trio.current_time() + delay
        self._forget()

    def _forget(self) -> None:
        self.state, self.cursor, self.in_hand = fragments.Reassembler(), 0, ()
        self.ready, self.held, self.held_until = [], [], None
        self.sources.clear()
        self.received.clear()

    async def _take_new(self) -> None:
        rows, claimed = await self.deps.store.take_open(
            self.chat_id, self.cursor, self.deps.max_attempts, self.deps.max_crashes
        )
        fresh = self.cursor == 0  # a (re)start: the oldest row first, alone (see below)
        for row in rows:
            if row.id <= self.cursor:
                continue
            self.cursor = row.id
            # alone, claimed only when its turn comes: a row that may be what killed the
            # process or failed (in hand at a crash, charged an attempt), and the oldest after
            # a start (it may kill it); every other text waits for the turn of the burst
            alone = fresh or row.crashes > 0 or row.attempts > 0
            if alone:
                await self._run_flushed(())
            turns = self.turns_run
            await self._take(row, claimed=row.id == claimed)
            if alone:
                await self._run_flushed(())
            fresh = fresh and self.turns_run == turns  # until the first turn has run
        await self._run_flushed(())  # the texts taken, together (a burst: one turn)

    # --- per row -------------------------------------------------------------------------------

    async def _take(self, row: inbox.InboxRow, *, claimed: bool = False) -> None:
        store = self.deps.store
        self.in_hand = (row.id,)
        self.received[row.id] = row.received_at
        failed = row.attempts >= self.deps.max_attempts
        if failed or row.crashes >= self.deps.max_crashes:
            log.warning(
                "chat.giving_up", inbox_id=row.id, attempts=row.attempts, crashes=row.crashes
            )
            why = "too many failed attempts" if failed else f"in its turn at {row.crashes} crashes"
            await self._run_flushed(fragments.flush_all(self.state))
            await self._commit(TurnReply(GAVE_UP), [row.id], skipped=why)
            return
        if not claimed:
            await store.mark_processing([row.id])
        try:
            update = parse_update(row.payload)
        except MalformedUpdate as exc:
            await store.mark_skipped([row.id], f"malformed update: {exc}")
            return
        ext = row.update_key
        msg = update.message or update.edited_message
        if update.kind == "message" and msg is not None:
            await self._message(row.id, ext, msg)
        elif update.kind == "edited_message" and msg is not None and (msg.text or msg.caption):
            await self._flush_then_turn(
                row.id, ext, f"(edited) {msg.text or msg.caption}", msg, kind="edited"
            )
        elif update.kind == "callback_query" and update.callback_query is not None:
            await self._run_flushed(fragments.flush_all(self.state))
            self.received.pop(row.id, None)
            if self.deps.callbacks is None:
                await store.mark_skipped([row.id], "button tap: no callback handlers")
            elif await self.deps.callbacks.tap(self.chat_id, row.id, update.callback_query):
                self.deps.outbox_ready(self.chat_id, None)
        else:
            await store.mark_skipped([row.id], f"unsupported update kind {update.kind}")

    async def _message(self, inbox_id: int, ext: str, msg: Message) -> None:
        text = msg.text
        if msg.forwarded_from is not None:  # someone else's words: never a command, untrusted
            said = text if text is not None else msg.caption
            text = None if said is None else wrap_forwarded(msg.forwarded_from, said)
        elif text is not None and text.startswith("/"):
            await self._command(inbox_id, ext, text, msg)
            return
        if msg.voice is not None:
            await self._voice(inbox_id, ext, msg, msg.voice)
            return
        if text is None and msg.caption is None and msg.media_group_id is None:
            await self._run_flushed(fragments.flush_all(self.state))
            await self._commit(TurnReply(UNSUPPORTED), [inbox_id], skipped="no text")
            return
        self.sources[inbox_id] = (ext, "media_group" if msg.media_group_id else "text")
        item = fragments.Inbound(
            chat_id=self.chat_id,
            sender_id=msg.from_user_id or 0,
            message_id=msg.message_id,
            text=text if text is not None else (msg.caption or ""),
            received_at=trio.current_time(),
            update_ids=(inbox_id,),
            media_group_id=msg.media_group_id,
        )
        self.ready += fragments.offer(self.state, item, trio.current_time())

    async def _command(self, inbox_id: int, ext: str, text: str, msg: Message) -> None:
        """A ``/command``: answered from the table, in the chat's order, without the model."""
        await self._run_flushed(fragments.flush_all(self.state))
        deps = self.deps
        reply = await deps.commands.run(
            self.chat_id,
            text,
            sender_id=msg.from_user_id,
            now=deps.wall_clock(),
            consume_stopped=lambda: deps.running.consume_stopped(self.chat_id),
        )
        await self._commit(reply, [inbox_id])

    async def _voice(self, inbox_id: int, ext: str, msg: Message, voice: Voice) -> None:
        await self._run_flushed(fragments.flush_all(self.state))
        if self.deps.transcribe is None:
            await self._commit(TurnReply(NO_VOICE), [inbox_id])
            return
        try:
            async with typing_while(self.deps.bot, self.chat_id, self.deps.typing_interval):
                text = await self.deps.transcribe(self.chat_id, voice)
        except VoiceError as exc:  # too large / failed: str(exc) is meant for the person
            await self._commit(TurnReply(str(exc)), [inbox_id])
            return
        if msg.forwarded_from is not None:
            text = wrap_forwarded(msg.forwarded_from, text)
        await self._flush_then_turn(inbox_id, ext, text, msg, kind="voice")

    async def _flush_then_turn(
        self,
        inbox_id: int,
        ext: str,
        text: str,
        msg: Message | None,
        *,
        kind: str,
        sender: int | None = None,
    ) -> None:
        await self._run_flushed(fragments.flush_all(self.state))
        message_ids = (msg.message_id,) if msg is not None else ()
        sender_id = sender if sender is not None else (msg.from_user_id if msg else None)
        await self._run_turn(
            TurnInput(self.chat_id, text, (inbox_id,), message_ids, (ext,), sender_id, kind=kind)
        )

    def _ext(self, inbox_id: int) -> str:
        return self.sources.pop(inbox_id, (f"inbox:{inbox_id}", "text"))[0]

    # --- turns ---------------------------------------------------------------------------------

    async def _run_flushed(self, flushed: Sequence[fragments.Flushed]) -> None:
        """Turns for the texts taken so far and ``flushed``: consecutive ones together
        (:func:`actors.chat.limits.coalesce`), unless the chat is at a limit (then they wait)."""
        batch = limits.coalesce([*self.ready, *flushed])
        self.ready = []
        for n, item in enumerate(batch):
            if not item.text.strip():
                await self._commit(TurnReply(UNSUPPORTED), item.update_ids, skipped="no text")
                continue
            if await self._held(batch[n:]):
                return
            kinds = {self.sources.get(i, ("", "text"))[1] for i in item.update_ids}
            turn = TurnInput(
                chat_id=self.chat_id,
                text=item.text,
                inbox_ids=tuple(item.update_ids),
                message_ids=tuple(item.message_ids),
                external_ids=tuple(self._ext(i) for i in item.update_ids),
                sender_id=item.sender_id or None,
                kind="media_group" if "media_group" in kinds else "text",
            )
            await self._run_turn(turn)

    async def _reclaim_and_run(self, held: Sequence[fragments.Flushed]) -> None:
        """The held messages' turn, now that the limit allows it (claimed again first)."""
        ids = [i for item in held for i in item.update_ids]
        self.in_hand = tuple(ids)
        await self.deps.store.mark_processing(ids)
        await self._run_flushed(held)

    async def _held(self, items: Sequence[fragments.Flushed]) -> bool:
        """True when the chat is at a per-chat limit (:mod:`actors.chat.limits`): ``items``
        then wait, handed back to the inbox uncharged, for :attr:`held_until`; the person is
        told once."""
        deps, now = self.deps, trio.current_time()
        until, why = self.held_until, ""
        if until is None:
            until, why = limits.next_turn_at(self.turn_starts, now, deps.turns_per_minute), "rate"
        if until is None and deps.daily_cost_usd is not None and deps.spent_today is not None:
            wall = deps.wall_clock()
            if await deps.spent_today(self.chat_id, wall) >= deps.daily_cost_usd:
                renew = deps.next_day(wall) if deps.next_day is not None else wall
                until, why = now + max(1.0, (renew - wall).total_seconds()), "cost"
        if until is None:
            return False
        ids = [i for item in items for i in item.update_ids]
        self.held += items
        self.held_until = until
        await deps.store.release(ids, "waiting: per-chat limit")
        if not self.told_limit and why:
            self.told_limit = True
            text = limits.RATE_LIMITED if why == "rate" else limits.COST_LIMITED
            notice = await deps.store.notify(self.chat_id, text)
            if notice is not None:
                deps.outbox_ready(self.chat_id, notice if notice.status == "sending" else None)
            log.info("chat.limited", limit=why, inbox_ids=ids, wait=round(until - now, 1))
        return True

    async def _run_turn(self, turn: TurnInput) -> None:
        self.in_hand = turn.inbox_ids
        self.told_limit = False
        self.turns_run += 1
        self.turn_starts = [
            *self.turn_starts[-max(1, self.deps.turns_per_minute) :],
            trio.current_time(),
        ]
        reply: TurnReply | None = None
        outage: ModelUnavailable | None = None
        with trio.CancelScope() as scope:
            self.deps.running.register(self.chat_id, scope)
            try:
                async with typing_while(self.deps.bot, self.chat_id, self.deps.typing_interval):
                    reply = await self.deps.turns.run_turn(turn)
            except ModelUnavailable as exc:
                outage = exc
            except DatabaseError:
                raise  # the rows' failure or the database's (see _charging), not a SORRY
            except Exception as exc:
                log.error("chat.turn_failed", inbox_ids=list(turn.inbox_ids), exc_info=exc)
                reply = TurnReply(SORRY)
            finally:
                self.deps.running.unregister(self.chat_id, scope)
        if outage is not None:
            if await self._postpone(turn, outage):
                raise outage  # leaves the actor's loops: the chat's later rows wait behind it
            reply = TurnReply(MODEL_GAVE_UP)
        self.model_failures = 0  # the model answered, or the wait for it is over
        if scope.cancelled_caught or reply is None:
            log.info("chat.turn_stopped", inbox_ids=list(turn.inbox_ids))
            await self.deps.store.mark_skipped(turn.inbox_ids, "stopped by /stop")
            return
        await self._commit(reply, turn.inbox_ids)
        if reply.after_commit is not None:
            try:
                await reply.after_commit()
            except Exception as exc:  # the reply is committed: nothing to undo, keep going
                log.error("chat.after_commit_failed", inbox_ids=list(turn.inbox_ids), exc_info=exc)

    async def _postpone(self, turn: TurnInput, outage: ModelUnavailable) -> bool:
        """The model is down: hand the turn's rows back uncharged, tell the person (once), and
        retry the chat's oldest open row later, forgetting what is in memory (it is all in the
        inbox). False when the turn's oldest row is past ``model_deadline``: answer it."""
        deps, ids = self.deps, turn.inbox_ids
        arrived = [self.received[i] for i in ids if i in self.received]
        age = (deps.wall_clock() - min(arrived)).total_seconds() if arrived else 0.0
        cause = type(outage.cause).__name__
        if age >= deps.model_deadline:
            log.error("chat.model_gave_up", inbox_ids=list(ids), age=round(age), cause=cause)
            return False
        await deps.store.release(ids, str(outage))
        notice = await deps.store.notify(self.chat_id, MODEL_AWAY)
        if notice is not None:
            deps.outbox_ready(self.chat_id, notice if notice.status == "sending" else None)
        base, cap = deps.model_retry_base, deps.model_retry_cap
        delay = backoff_delay(
            self.model_failures, base=base, cap=cap, jitter=0.2, draw=random.random()
        )
        self.model_failures += 1
        self.retry_at = trio.current_time() + delay
        self._forget()
        log.warning(
            "chat.model_unavailable",
            inbox_ids=list(ids),
            cause=cause,
            retry_in=round(delay, 3),
            told=notice is not None,
        )
        return True

    async def _commit(
        self, reply: TurnReply, inbox_ids: Sequence[int], *, skipped: str | None = None
    ) -> None:
        """Commit the reply and finish the rows (see :class:`ChatStore`); then notify."""
        self.in_hand = tuple(inbox_ids)
        claimed = await self.deps.store.commit(self.chat_id, reply, inbox_ids, skipped)
        self.failures = 0  # rows answered: the next failure is a new row's
        for row_id in inbox_ids:
            self.received.pop(row_id, None)
        self.deps.outbox_ready(self.chat_id, claimed)


def chat_factory(deps: ChatDeps) -> Callable[[int], ChatActor]:
    """The registry factory: a fresh actor body per chat (and per restart)."""

    def build(chat_id: int) -> ChatActor:
        return ChatActor(chat_id, deps)

    return build


__all__: Any = ["ChatActor", "ChatDeps", "PendingWakes", "RunningTurns", "Wake", "chat_factory"]
