"""SenderActor (singleton): the outbox -> Telegram, in order per chat, paced and resumable.

The chat actor commits a reply to the outbox, then sends :class:`OutboxReady` ``(chat_id)``.
One worker task per chat with open rows sends them strictly in id order (chats concurrently);
every request passes the per-chat pacing (one per ``chat_interval`` s) and the global limiter
(``global_rate`` per ``global_period``). On start-up, and every ``sweep_interval``, every chat
with open rows gets a worker (with ``may_send``: a chat whose lease this process holds), so a
lost notification only delays a reply.

Exactly once, or visibly uncertain. Before a chunk (:func:`~actors.sender.store.plan_chunks`)
is handed to the Bot API its row records, committed, that it is in flight (``mark_in_flight``;
for a reply claimed by its turn's commit, that commit did it); after Telegram's answer the
outcome is recorded (``record_chunk_sent``, idempotent, or ``release_in_flight`` when not
delivered), retried through database errors with backoff, each attempt shielded for
``record_timeout``. A starting sender marks ``uncertain`` the open rows still in flight — left
by this process's crashed sender (:class:`~actors.sender.policy.SenderLedger`) or by an
earlier process (unless the leases recover those per chat): interrupted between request and
record, never resent.

Per request, the policy of :mod:`actors.sender.policy` (429, parse errors, retries up to the
deadline, uncertain, failed). A worker waiting out a failure keeps its row open; a closed sender
leaves it to the next start. The local chats (``local``, a
:class:`~actors.sender.store.ChunkTransport`) are not paced; a row of one waits while its
transport has no receiver (the worker ends; the transport wakes the sender).
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from datetime import datetime
from functools import partial
from typing import TypeVar

import attrs
import structlog
import trio

from actors.errors import Unreachable
from actors.queues.outbox import OutboxRow
from actors.sender.db_retry import retry_db
from actors.sender.policy import (
    ChatPacer,
    SenderLedger,
    SenderSettings,
    SlidingWindowLimiter,
    Undelivered,
    describe,
    wall_now,
)
from actors.sender.store import (
    ChunkTransport,
    DbOutbox,
    MessageClient,
    OutboxStore,
    plain_fallback,
    plan_row,
    send_chunk,
)
from actors.telegram.errors import (
    ApiError,
    BadRequest,
    Forbidden,
    NetworkError,
    PreConnectError,
    RateLimited,
    ServerError,
    UnexpectedResponse,
)
from runtime.actor import Address, Mailbox, serve
from runtime.backoff import backoff_delay
from runtime.db import Queries
from runtime.errors import DatabaseError

__all__ = ["OutboxReady", "SenderActor"]

log = structlog.get_logger(__name__)
T = TypeVar("T")


@attrs.frozen
class OutboxReady:
    """Sent to the sender by the chat actor after committing a reply: ``chat_id`` has outbox
    rows to send. ``row``: the new row when the commit already started its first send attempt
    (it was the chat's only open row; its first chunk is marked in flight): with no worker on
    the chat, it is sent without reading it back."""

    chat_id: int
    row: OutboxRow | None = None


@attrs.define(eq=False)
class SenderActor:
    """The outbox sender; ``run`` reports ``Address[OutboxReady]`` once the start-up scan is done.

    ``db``: a database handle (wrapped in :class:`~actors.sender.store.DbOutbox`) or any
    :class:`~actors.sender.store.OutboxStore`; ``ledger``: shared by the senders of one process.
    Timing is ``trio.sleep``/``current_time`` (MockClock); ``wall_clock`` only ages rows."""

    db: Queries | OutboxStore
    client: MessageClient
    settings: SenderSettings = attrs.field(factory=SenderSettings, kw_only=True)
    limiter: SlidingWindowLimiter | None = attrs.field(default=None, kw_only=True)
    ledger: SenderLedger = attrs.field(factory=SenderLedger, kw_only=True)
    wall_clock: Callable[[], datetime] = attrs.field(default=wall_now, kw_only=True)
    rng: random.Random = attrs.field(factory=random.Random, kw_only=True)
    #: told when a chat blocked the bot (403, or 400 chat not found): its proactive jobs pause
    on_blocked: Callable[[int, str], Awaitable[object]] | None = attrs.field(
        default=None, kw_only=True
    )
    #: the transport of the chats not on Telegram (the local chats), if any
    local: ChunkTransport | None = attrs.field(default=None, kw_only=True)
    #: several processes: a chat's rows are sent only where this says (its lease is held)
    may_send: Callable[[int], Awaitable[bool]] | None = attrs.field(default=None, kw_only=True)
    store: OutboxStore = attrs.field(init=False)
    _nursery: trio.Nursery | None = attrs.field(init=False, default=None)
    _workers: set[int] = attrs.field(init=False, factory=set)
    _again: set[int] = attrs.field(init=False, factory=set)
    _pacer: ChatPacer = attrs.field(init=False)
    _stopping: bool = attrs.field(init=False, default=False)
    _stopped: trio.Event = attrs.field(init=False, factory=trio.Event)
    _sweep_scope: trio.CancelScope = attrs.field(init=False, factory=trio.CancelScope)

    def __attrs_post_init__(self) -> None:
        redeliver = self.local.chats if self.local is not None else range(0)
        self.store = self.db if isinstance(self.db, OutboxStore) else DbOutbox(self.db, redeliver)
        if self.limiter is None:
            self.limiter = SlidingWindowLimiter(
                self.settings.global_rate, self.settings.global_period
            )
        self._pacer = ChatPacer(self.settings.chat_interval, self.limiter)

    def working(self, chat_id: int) -> bool:
        return chat_id in self._workers  # the chat has a worker right now

    @property
    def gave_up(self) -> int:
        """Replies this process made ``failed`` after retrying past the deadline."""
        return self.ledger.gave_up

    async def run(
        self, *, task_status: trio.TaskStatus[Address[OutboxReady]] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Recover rows left in flight, send every open row, then serve notifications until the
        mailbox is closed.

        After the mailbox closes, each worker finishes the request in hand (a worker waiting
        out a failure stops waiting) and ``run`` returns; what is left is resumed by the next
        start.
        """
        mailbox: Mailbox[OutboxReady] = Mailbox("sender", capacity=self.settings.mailbox_capacity)
        with mailbox.inbox as inbox:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await self._recover()
                await self._sweep()
                if self.settings.sweep_interval is not None:
                    nursery.start_soon(self._sweeper, self.settings.sweep_interval)
                log.info("sender.started", chats=len(self._workers))
                task_status.started(mailbox.address)
                await serve(inbox, self._handle)
                self._stopping = True
                self._stopped.set()
                self._sweep_scope.cancel()
        log.info("sender.stopped")

    async def _handle(self, msg: OutboxReady) -> None:
        if msg.row is not None and self._idle(msg.chat_id):
            self._start_worker(msg.chat_id, msg.row)
        else:
            self._wake(msg.chat_id)

    async def _recover(self) -> None:
        """Mark ``uncertain`` the rows left in flight: by any earlier process (the first sender
        of this one), or by this process's crashed sender (the ledger's rows)."""
        ledger = self.ledger
        ids = sorted(ledger.in_flight) if ledger.recovered else None
        if ids == []:
            return
        rows = await self._db("recover", partial(self.store.recover_in_flight, ids))
        ledger.recovered = True
        ledger.in_flight.clear()
        ledger.uncertain += len(rows)
        for row in rows:
            log.warning(
                "sender.uncertain",
                chat_id=row.chat_id,
                outbox_id=row.id,
                chunk=(row.chunk_in_flight or 0) + 1,
                error=row.last_error,
                resent=False,
                recovered=True,
            )

    async def _sweep(self) -> None:
        for chat_id in await self._db("sweep", self.store.chats_with_pending):
            self._wake(chat_id)

    async def _sweeper(self, interval: float) -> None:
        with self._sweep_scope:
            while True:
                await trio.sleep(interval)
                await self._sweep()

    def _idle(self, chat_id: int) -> bool:  # no worker on ``chat_id``; workers may start
        return chat_id not in self._workers and not self._stopping and self._nursery is not None

    def _wake(self, chat_id: int) -> None:
        """Make sure a worker will look at ``chat_id``'s open rows."""
        if chat_id in self._workers:
            self._again.add(chat_id)
        elif self._idle(chat_id):
            self._start_worker(chat_id)

    def _start_worker(self, chat_id: int, first: OutboxRow | None = None) -> None:
        assert self._nursery is not None
        self._workers.add(chat_id)
        self._nursery.start_soon(self._chat_worker, chat_id, first, name=f"sender:{chat_id}")

    async def _chat_worker(self, chat_id: int, first: OutboxRow | None = None) -> None:
        """Send the chat's open rows in order; ``first``: a row already claimed (its first
        chunk marked in flight by the chat actor's commit), sent before looking for more."""
        with structlog.contextvars.bound_contextvars(chat_id=chat_id):
            try:
                rows = [] if first is None else [first]
                while True:
                    for row in rows:  # a row waiting for a receiver ends the worker (unless
                        # the transport woke the sender meanwhile: _again)
                        if not await self._send_row(row) and chat_id not in self._again:
                            return
                        if self._stopping:
                            return
                    self._again.discard(chat_id)  # the lease first (taking it over recovers
                    if self.may_send is not None and not await self.may_send(chat_id):
                        return  # what a dead owner left in flight), then the rows
                    rows = await self._db(
                        "read", partial(self.store.next_pending, chat_id, self.settings.batch_size)
                    )
                    if not rows and chat_id not in self._again:
                        return
            finally:
                self._workers.discard(chat_id)
                self._again.discard(chat_id)
                self._pacer.forget_old(self._workers)

    async def _send_row(self, row: OutboxRow) -> bool:
        """Deliver the row's remaining chunks, each recorded (the last one with the row
        ``sent``), or end it failed/uncertain, or leave it open (closed, stopping). False when
        it waits for its chat's transport to have a receiver."""
        rlog = log.bind(chat_id=row.chat_id, outbox_id=row.id)
        plan = plan_row(row, self.settings.chunk_limit)  # an edit is one request
        if not plan.chunks:
            await self._finish(row, 0, 0, Undelivered("failed", "empty reply: nothing to send"))
            return True
        if row.chunks_sent:
            rlog.info("sender.resuming", chunks_sent=row.chunks_sent, chunks=len(plan.chunks))
        deadline = self._deadline(row)
        # an open row read in this process with a chunk in flight was claimed by its turn's
        # commit and never handed to anyone (rows a sender left so are recovered at its start)
        marked = row.chunk_in_flight is not None and row.chunk_in_flight == row.chunks_sent
        message_ids = list(row.telegram_message_ids)
        for index in range(row.chunks_sent, len(plan.chunks)):
            chunk, last = plan.chunks[index], index == len(plan.chunks) - 1
            result = await self._deliver(row, index, chunk, plan.parse_mode, deadline, marked, last)
            marked = False
            if isinstance(result, Undelivered):
                await self._finish(row, index, len(plan.chunks), result)
                return result.outcome != "waiting"
            message_ids.append(result)
            if not await self._record(row, index, result, last=last):
                rlog.info("sender.row_closed", chunk=index + 1)
                return True
        rlog.info("sender.sent", chunks=len(plan.chunks), telegram_message_ids=message_ids)
        return True

    def _deadline(self, row: OutboxRow) -> float:
        """The trio time after which no retry of the row starts (``deadline`` after its
        ``created_at``)."""
        age = max(0.0, (self.wall_clock() - row.created_at).total_seconds())
        return trio.current_time() + self.settings.deadline - age

    async def _finish(self, row: OutboxRow, index: int, total: int, result: Undelivered) -> None:
        rlog = log.bind(chat_id=row.chat_id, outbox_id=row.id, chunk=index + 1, chunks=total)
        if result.outcome == "closed":
            rlog.info("sender.row_closed")
        elif result.outcome == "waiting":
            rlog.info("sender.waiting_for_receiver")
        elif result.outcome == "uncertain":
            await self._db("uncertain", partial(self.store.mark_uncertain, row, result.error))
            self.ledger.uncertain += 1
            rlog.warning("sender.uncertain", error=result.error, resent=False)
        else:
            await self._db("failed", partial(self.store.mark_failed, row, result.error))
            if result.gave_up:
                self.ledger.gave_up += 1
                rlog.error("sender.gave_up", error=result.error, deadline=self.settings.deadline)
            else:
                rlog.warning("sender.failed", error=result.error)
        self.ledger.in_flight.discard(row.id)

    async def _deliver(
        self,
        row: OutboxRow,
        index: int,
        chunk: str,
        parse_mode: str | None,
        deadline: float,
        marked: bool,
        last: bool,
    ) -> int | Undelivered:
        """Send one chunk (:func:`~actors.sender.store.send_chunk`: the last carries the row's
        keyboard; an edit row edits its message), applying the retry policy; the message id, or
        why it was not sent. ``marked``: the chunk is already marked in flight (by the turn's
        commit)."""
        rlog = log.bind(chat_id=row.chat_id, outbox_id=row.id, chunk=index + 1)
        text, mode = chunk, parse_mode
        failures = attempts = 0
        local = self.local if self.local is not None and row.chat_id in self.local.chats else None
        while True:
            if local is None:
                await self._pacer.wait(row.chat_id)
            if not marked:
                mark = partial(self.store.mark_in_flight, row, index)
                if await self._db("mark_in_flight", mark) is None:
                    return Undelivered("closed")
            marked = False
            self.ledger.in_flight.add(row.id)
            attempts += 1
            try:
                return await send_chunk(self.client, row, index, text, mode, last=last, via=local)
            except Unreachable:  # no receiver on the chat's own transport: the row waits
                await self._db("release", partial(self.store.release_in_flight, row, index, "-"))
                self.ledger.in_flight.discard(row.id)
                return Undelivered("waiting")
            except RateLimited as exc:
                error: Exception = exc
                delay = self.settings.default_retry_after
                if exc.retry_after is not None:
                    delay = exc.retry_after
                event = "sender.rate_limited"
            except BadRequest as exc:
                if not (exc.is_parse_error and mode is not None):
                    await self._blocked(row.chat_id, exc)
                    return Undelivered("failed", describe(exc))
                rlog.warning("sender.parse_fallback", parse_mode=mode, error=str(exc))
                text, mode = plain_fallback(chunk, mode, self.settings.chunk_limit), None
                marked = True  # still in flight (refused, not delivered): sent again as plain
                continue
            except (ServerError, PreConnectError) as exc:
                error, delay, event = exc, self._backoff(failures), "sender.retrying"
                failures += 1
            except ApiError as exc:  # 403 blocked, 401, 404, ...: permanent
                await self._blocked(row.chat_id, exc)
                return Undelivered("failed", describe(exc))
            except (NetworkError, UnexpectedResponse) as exc:  # may have been delivered
                return Undelivered("uncertain", describe(exc))
            if trio.current_time() + delay > deadline:
                why = f"gave up after {attempts} attempts at the deadline: {describe(error)}"
                return Undelivered("failed", why, gave_up=True)
            release = partial(self.store.release_in_flight, row, index, describe(error))
            await self._db("release", release)
            self.ledger.in_flight.discard(row.id)
            rlog.warning(event, attempt=attempts, retry_after=delay, error=str(error))
            if not await self._wait(delay):
                return Undelivered("closed")

    async def _blocked(self, chat_id: int, exc: ApiError) -> None:  # 403, 400 chat not found
        gone = isinstance(exc, Forbidden) or "chat not found" in exc.description.lower()
        if not gone or self.on_blocked is None:
            return
        try:
            await self.on_blocked(chat_id, describe(exc))
        except DatabaseError as err:
            log.warning("sender.pause_failed", chat_id=chat_id, error=str(err))

    def _backoff(self, failures: int) -> float:
        s = self.settings
        return backoff_delay(
            failures, base=s.retry_base, cap=s.retry_cap, jitter=s.jitter, draw=self.rng.random()
        )

    async def _wait(self, delay: float) -> bool:  # False at once when closed meanwhile
        with trio.move_on_after(delay):
            await self._stopped.wait()
            return False
        return True

    async def _record(self, row: OutboxRow, chunk: int, message_id: int, *, last: bool) -> bool:
        """Record a delivered chunk: retried through database errors, each attempt shielded from
        cancellation for ``record_timeout`` (a cancelled sender leaves the chunk in flight, and
        the next start marks the row uncertain). False when the row was closed meanwhile."""
        record = partial(self.store.record_chunk_sent, row, chunk, message_id, last=last)
        recorded = await self._db("record", record, shielded=True)
        self.ledger.in_flight.discard(row.id)
        return recorded

    async def _db(
        self, step: str, call: Callable[[], Awaitable[T]], *, shielded: bool = False
    ) -> T:
        return await retry_db(step, call, self.settings, self.rng, shielded=shielded)
