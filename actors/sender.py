"""SenderActor (singleton): the outbox -> Telegram, in order per chat, paced and resumable.

The chat actor commits a reply to the outbox, then sends :class:`OutboxReady` ``(chat_id)``.
The sender runs one worker task per chat with open rows (rows of a chat strictly in id order,
different chats concurrently); every request passes the per-chat pacing (one request per
``chat_interval`` seconds) and the global limiter shared by all workers (at most
``global_rate`` requests in any ``global_period``). On start-up, and every ``sweep_interval``,
every chat with open rows (``pending``, or ``sending`` left by a crash) gets a worker, so a
lost notification only delays a reply.

A reply is split with :mod:`actors.telegram.chunking` (UTF-16 limit, paragraph/line/word boundaries,
never inside an HTML tag or entity); each delivered chunk is recorded at once
(``record_chunk_sent``), so a restart resumes after the last delivered chunk. Per request:

* 429: wait exactly ``retry_after`` and resend (at most ``max_rate_limit_waits`` times);
* 400 "can't parse entities": resend the same chunk as plain text;
* pre-connect network errors and 5xx: retry after ``retry_delays`` (1 s, 2 s, 4 s), then the
  row is ``failed``;
* may-have-been-delivered network errors (reset, read timeout...): the row is ``uncertain``
  and is NOT resent (the user may miss the rest of the reply rather than see it twice);
* 403 and every other API error: the row is ``failed``, without retry.

Replies are thus sent at least once per chunk that Telegram confirmed, and never resent
blindly after an ambiguous failure; a crash between Telegram's answer and the recording of the
chunk can still duplicate that one chunk.
"""

from __future__ import annotations

import re
from typing import Literal, Protocol, runtime_checkable

import attrs
import structlog
import trio

from actors.queues import outbox
from actors.queues.outbox import OutboxRow
from actors.sender_policy import SenderSettings, SlidingWindowLimiter
from actors.telegram.chunking import (
    MAX_MESSAGE_UTF16,
    ChunkPlan,
    html_to_text,
    plan_reply,
    split_text,
    utf16_len,
    visible_text,
)
from actors.telegram.errors import (
    ApiError,
    BadRequest,
    MalformedHtml,
    NetworkError,
    PreConnectError,
    RateLimited,
    ServerError,
    UnexpectedResponse,
)
from runtime.actor import Address, Mailbox, serve
from runtime.db import Queries
from runtime.errors import DatabaseUnavailable

__all__ = [
    "DbOutbox",
    "MessageClient",
    "OutboxReady",
    "OutboxStore",
    "SenderActor",
    "SenderSettings",
    "SlidingWindowLimiter",
    "plain_fallback",
    "plan_chunks",
]

log = structlog.get_logger(__name__)


@attrs.frozen
class OutboxReady:
    """Sent by the chat actor after committing a reply: ``chat_id`` has outbox rows to send.
    ``row``: the new row when the commit already started its first send attempt (it was the
    chat's only open row): with no worker on the chat, it is sent without reading it back."""

    chat_id: int
    row: OutboxRow | None = None


class MessageClient(Protocol):
    """The part of the Bot API client the sender uses (``BotApiClient`` satisfies it)."""

    async def send_message(
        self,
        chat_id: int | str,
        text: str,
        parse_mode: str | None = None,
        *,
        reply_to_message_id: int | None = None,
    ) -> int: ...


@runtime_checkable
class OutboxStore(Protocol):
    """Outbox access the sender needs; :class:`DbOutbox` is the PostgreSQL implementation."""

    async def chats_with_pending(self) -> list[int]: ...

    async def next_pending(self, chat_id: int, limit: int) -> list[OutboxRow]: ...

    async def next_pending_claimed(
        self, chat_id: int, limit: int
    ) -> tuple[list[OutboxRow], int | None]:
        """The chat's open rows and the id of the first, whose send attempt is started
        (as :meth:`mark_sending`), in one round trip."""
        ...

    async def mark_sending(self, row_id: int) -> int | None: ...

    async def record_chunk_sent(self, row_id: int, telegram_message_id: int) -> int | None: ...

    async def mark_sent(self, row_id: int) -> bool: ...

    async def mark_failed(self, row_id: int, error: str) -> bool: ...

    async def mark_uncertain(self, row_id: int, error: str) -> bool: ...


@attrs.frozen
class DbOutbox:
    """:class:`OutboxStore` over the ``outbox`` table (see :mod:`actors.queues.outbox`)."""

    db: Queries

    async def chats_with_pending(self) -> list[int]:
        return await outbox.chats_with_pending(self.db)

    async def next_pending(self, chat_id: int, limit: int) -> list[OutboxRow]:
        return await outbox.next_pending(self.db, chat_id, limit)

    async def next_pending_claimed(
        self, chat_id: int, limit: int
    ) -> tuple[list[OutboxRow], int | None]:
        return await outbox.next_pending_claimed(self.db, chat_id, limit)

    async def mark_sending(self, row_id: int) -> int | None:
        return await outbox.mark_sending(self.db, row_id)

    async def record_chunk_sent(self, row_id: int, telegram_message_id: int) -> int | None:
        return await outbox.record_chunk_sent(self.db, row_id, telegram_message_id)

    async def mark_sent(self, row_id: int) -> bool:
        return await outbox.mark_sent(self.db, row_id)

    async def mark_failed(self, row_id: int, error: str) -> bool:
        return await outbox.mark_failed(self.db, row_id, error)

    async def mark_uncertain(self, row_id: int, error: str) -> bool:
        return await outbox.mark_uncertain(self.db, row_id, error)


def plan_chunks(text: str, parse_mode: str | None, limit: int = MAX_MESSAGE_UTF16) -> ChunkPlan:
    """The messages for one outbox row; deterministic, so ``chunks_sent`` indexes into it.

    HTML is split into well-formed chunks (malformed HTML falls back to plain text up front);
    other text is split as plain text and keeps its ``parse_mode``.
    """
    if parse_mode == "HTML" or parse_mode is None:
        return plan_reply(text, html_mode=parse_mode == "HTML", limit=limit)
    return ChunkPlan(tuple(split_text(text, limit)), parse_mode)


_MD_ESCAPE_RE = re.compile(r"\\([_*\[\]()~`>#+\-=|{}.!\\])")


def plain_fallback(chunk: str, parse_mode: str | None, limit: int = MAX_MESSAGE_UTF16) -> str:
    """Plain text for a chunk Telegram could not parse; always one message (within ``limit``)."""
    if parse_mode != "HTML":
        return _MD_ESCAPE_RE.sub(r"\1", chunk).strip() or chunk
    text = html_to_text(chunk).strip()
    if text and utf16_len(text) <= limit:
        return text
    try:  # link URLs made it too long: the visible text is within the limit by construction
        return visible_text(chunk).strip()
    except MalformedHtml:
        return split_text(text, limit)[0]


Outcome = Literal["failed", "uncertain", "closed"]


@attrs.frozen
class _Final:
    """Why a chunk was not delivered: the row ends ``failed``/``uncertain``, or was closed."""

    outcome: Outcome
    error: str = ""


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


@attrs.define(eq=False)
class SenderActor:
    """The outbox sender; ``run`` reports ``Address[OutboxReady]`` once the start-up scan is done.

    ``db`` is a database handle (wrapped in :class:`DbOutbox`) or any :class:`OutboxStore`.
    Timing uses only ``trio.sleep``/``trio.current_time``, so it runs on a MockClock.
    """

    db: Queries | OutboxStore
    client: MessageClient
    settings: SenderSettings = attrs.field(factory=SenderSettings, kw_only=True)
    limiter: SlidingWindowLimiter | None = attrs.field(default=None, kw_only=True)
    store: OutboxStore = attrs.field(init=False)
    _nursery: trio.Nursery | None = attrs.field(init=False, default=None)
    _workers: set[int] = attrs.field(init=False, factory=set)
    _again: set[int] = attrs.field(init=False, factory=set)
    _last_request: dict[int, float] = attrs.field(init=False, factory=dict)
    _stopping: bool = attrs.field(init=False, default=False)
    _sweep_scope: trio.CancelScope = attrs.field(init=False, factory=trio.CancelScope)

    def __attrs_post_init__(self) -> None:
        self.store = self.db if isinstance(self.db, OutboxStore) else DbOutbox(self.db)
        if self.limiter is None:
            self.limiter = SlidingWindowLimiter(
                self.settings.global_rate, self.settings.global_period
            )

    @property
    def active_chats(self) -> frozenset[int]:
        """Chats that have a worker right now."""
        return frozenset(self._workers)

    async def run(
        self, *, task_status: trio.TaskStatus[Address[OutboxReady]] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Send every open row, then serve notifications until the mailbox is closed.

        After the mailbox closes, each worker finishes the row in hand and ``run`` returns;
        what is left is resumed by the next start.
        """
        mailbox: Mailbox[OutboxReady] = Mailbox("sender", capacity=self.settings.mailbox_capacity)
        with mailbox.inbox as inbox:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await self._sweep()
                if self.settings.sweep_interval is not None:
                    nursery.start_soon(self._sweeper, self.settings.sweep_interval)
                log.info("sender.started", chats=len(self._workers))
                task_status.started(mailbox.address)
                await serve(inbox, self._handle)
                self._stopping = True
                self._sweep_scope.cancel()
        log.info("sender.stopped")

    async def _handle(self, msg: OutboxReady) -> None:
        if msg.row is not None and self._idle(msg.chat_id):
            self._start_worker(msg.chat_id, msg.row)
        else:
            self._wake(msg.chat_id)

    async def _sweep(self) -> None:
        for chat_id in await self.store.chats_with_pending():
            self._wake(chat_id)

    async def _sweeper(self, interval: float) -> None:
        with self._sweep_scope:
            while True:
                await trio.sleep(interval)
                await self._sweep()

    def _idle(self, chat_id: int) -> bool:
        """No worker on ``chat_id`` and workers may start."""
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
        """Send the chat's open rows in order; ``first``: a row already claimed (its send
        attempt started by the chat actor's commit), sent before looking for more."""
        with structlog.contextvars.bound_contextvars(chat_id=chat_id):
            try:
                if first is not None:
                    await self._send_row(first, claimed=True)
                while not self._stopping:
                    self._again.discard(chat_id)
                    rows, claimed = await self.store.next_pending_claimed(
                        chat_id, self.settings.batch_size
                    )
                    if not rows and chat_id not in self._again:
                        return
                    for row in rows:
                        await self._send_row(row, claimed=row.id == claimed)
                        if self._stopping:
                            return
            finally:
                self._workers.discard(chat_id)
                self._again.discard(chat_id)
                self._forget_old_pacing()

    def _forget_old_pacing(self) -> None:
        horizon = trio.current_time() - self.settings.chat_interval
        for chat_id in [c for c, t in self._last_request.items() if t < horizon]:
            if chat_id not in self._workers:
                del self._last_request[chat_id]

    async def _send_row(self, row: OutboxRow, *, claimed: bool = False) -> None:
        """Deliver the row's remaining chunks, then mark it sent (or failed/uncertain).
        ``claimed``: its next send attempt is already started (``next_pending_claimed``)."""
        rlog = log.bind(chat_id=row.chat_id, outbox_id=row.id)
        plan = plan_chunks(row.text, row.parse_mode, self.settings.chunk_limit)
        if not plan.chunks:
            await self.store.mark_failed(row.id, "empty reply: nothing to send")
            return
        if row.chunks_sent:
            rlog.info("sender.resuming", chunks_sent=row.chunks_sent, chunks=len(plan.chunks))
        message_ids = list(row.telegram_message_ids)
        for index in range(row.chunks_sent, len(plan.chunks)):
            result = await self._deliver(
                row, index, plan.chunks[index], plan.parse_mode, claimed=claimed
            )
            claimed = False
            if isinstance(result, _Final):
                await self._finish(row, index, len(plan.chunks), result)
                return
            message_ids.append(result)
            await self._record(row.id, result)
        await self.store.mark_sent(row.id)
        rlog.info("sender.sent", chunks=len(plan.chunks), telegram_message_ids=message_ids)

    async def _finish(self, row: OutboxRow, index: int, total: int, result: _Final) -> None:
        rlog = log.bind(chat_id=row.chat_id, outbox_id=row.id, chunk=index + 1, chunks=total)
        if result.outcome == "closed":
            rlog.info("sender.row_closed")
        elif result.outcome == "uncertain":
            await self.store.mark_uncertain(row.id, result.error)
            rlog.warning("sender.uncertain", error=result.error, resent=False)
        else:
            await self.store.mark_failed(row.id, result.error)
            rlog.warning("sender.failed", error=result.error)

    async def _deliver(
        self, row: OutboxRow, index: int, chunk: str, parse_mode: str | None, *, claimed: bool
    ) -> int | _Final:
        """Send one chunk, applying the retry policy; the message id, or why it was not sent."""
        rlog = log.bind(chat_id=row.chat_id, outbox_id=row.id, chunk=index + 1)
        text, mode = chunk, parse_mode
        reply_to = row.reply_to_message_id if index == 0 else None
        failures = rate_limited = 0
        while True:
            await self._pace(row.chat_id)
            if claimed:
                claimed = False
            elif await self.store.mark_sending(row.id) is None:
                return _Final("closed")
            try:
                return await self.client.send_message(
                    row.chat_id, text, mode, reply_to_message_id=reply_to
                )
            except RateLimited as exc:
                rate_limited += 1
                if rate_limited > self.settings.max_rate_limit_waits:
                    return _Final("failed", f"rate limited {rate_limited} times: {exc}")
                delay = self.settings.default_retry_after
                if exc.retry_after is not None:
                    delay = exc.retry_after
                rlog.warning("sender.rate_limited", retry_after=delay)
                await trio.sleep(delay)
            except BadRequest as exc:
                if not (exc.is_parse_error and mode is not None):
                    return _Final("failed", _describe(exc))
                rlog.warning("sender.parse_fallback", parse_mode=mode, error=str(exc))
                text, mode = plain_fallback(chunk, mode, self.settings.chunk_limit), None
            except (ServerError, PreConnectError) as exc:
                if failures >= len(self.settings.retry_delays):
                    return _Final("failed", f"gave up after {failures + 1} attempts: "
                                  f"{_describe(exc)}")  # fmt: skip
                delay = self.settings.retry_delays[failures]
                failures += 1
                rlog.warning("sender.retrying", attempt=failures, delay=delay, error=str(exc))
                await trio.sleep(delay)
            except ApiError as exc:  # 403 blocked, 401, 404, ...: permanent
                return _Final("failed", _describe(exc))
            except (NetworkError, UnexpectedResponse) as exc:  # may have been delivered
                return _Final("uncertain", _describe(exc))

    async def _pace(self, chat_id: int) -> None:
        """Wait for the chat's pacing slot, then for a global slot."""
        last = self._last_request.get(chat_id)
        if last is not None:
            await trio.sleep_until(last + self.settings.chat_interval)
        assert self.limiter is not None
        await self.limiter.acquire()
        self._last_request[chat_id] = trio.current_time()

    async def _record(self, row_id: int, message_id: int) -> None:
        """Record a delivered chunk, shielded: a cancelled sender must not forget it."""
        with trio.move_on_after(self.settings.record_timeout, shield=True):
            await self.store.record_chunk_sent(row_id, message_id)
            return
        raise DatabaseUnavailable(f"recording a delivered chunk of outbox row {row_id} timed out")
