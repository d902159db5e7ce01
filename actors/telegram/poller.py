"""Long polling (``engram serve --polling``): getUpdates -> inbox, offset confirmed after storage.

Durability rule (the same as the webhook's): an update is confirmed to Telegram only once it is
in the inbox. Every update of a batch goes through :func:`actors.telegram.ingest.ingest`; only then
is the next offset stored in ``bot_state`` (key ``polling_offset``) and used for the next call,
which is what tells Telegram to forget the batch. A start-up resumes from the stored offset.

Failures: 409 (a webhook is set, or another poller runs) ends the poller with
:class:`PollingConflict`, 401 with :class:`TokenRejected` (a configuration error); 429 waits
``retry_after``; 5xx and network errors back off (1 s doubling up to 30 s); a
:class:`~runtime.errors.DatabaseError` while storing keeps the offset, backs off and polls the
same offset again, so Telegram re-delivers the batch (what was already stored is a duplicate
then). Malformed updates, and payloads the inbox cannot store, are logged
and skipped: their ids still advance the offset, since they can never become valid. A poll that
brings nothing back sooner than :data:`EMPTY_POLL_FLOOR` is followed by a wait up to it, so a
server that does not hold long polls costs a poll a second, not a spinning core.

Shutdown: when ``stop`` is set, a long poll in flight is abandoned (nothing of it was
confirmed), a batch in hand is finished, and one last ``getUpdates(offset=next, timeout=0)``
makes Telegram forget the confirmed updates.

The Bot API sits behind :class:`UpdateSource`, the inbox behind an :data:`IngestOne` callable
and the offset behind :class:`OffsetStore`, so the timers are tested with a ``MockClock`` and
in-memory fakes.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Container, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import attrs
import trio

from actors.queues.dedupe import DedupeCache
from actors.telegram.client import BotApiClient
from actors.telegram.errors import (
    Conflict,
    MalformedUpdate,
    NetworkError,
    PollingConflict,
    RateLimited,
    ServerError,
    TelegramError,
    TokenRejected,
    Unauthorized,
    UnexpectedResponse,
)
from actors.telegram.ingest import Notify, Outcome, Strangers, ingest
from actors.telegram.types import ALLOWED_UPDATES, Update
from actors.telegram.update_batch import UpdateBatch, parse_update_batch
from runtime.backoff import backoff_delay as capped_backoff
from runtime.db import Queries
from runtime.errors import DatabaseError
from runtime.logs import get_logger

log = get_logger(__name__)

T = TypeVar("T")

OFFSET_KEY = "polling_offset"
BATCH_LIMIT = 100
BACKOFF_BASE = 1.0
BACKOFF_CAP = 30.0
FINAL_CALL_TIMEOUT = 10.0
#: Least time between the starts of two polls when the first brought nothing: a server that
#: answers a long poll at once (a misbehaving local Bot API server) must not make it spin.
EMPTY_POLL_FLOOR = 1.0

# --- seams -------------------------------------------------------------------------------------


@attrs.frozen
class PolledUpdate:
    """One parsed update with the JSON object it came from (what the inbox stores)."""

    update: Update
    payload: Mapping[str, Any]


@attrs.frozen
class PollBatch:
    """One getUpdates answer: readable updates, unreadable ones, the offset that confirms all."""

    updates: tuple[PolledUpdate, ...] = ()
    malformed: tuple[MalformedUpdate, ...] = ()
    #: 1 + the highest update_id seen (malformed entries included); None when nothing came
    next_offset: int | None = None


class UpdateSource(Protocol):
    """The part of the Bot API the poller needs."""

    async def get_updates(
        self,
        offset: int | None,
        timeout: int,  # noqa: ASYNC109 - the Bot API long-poll parameter
        allowed_updates: Sequence[str],
        limit: int,
    ) -> PollBatch: ...


class OffsetStore(Protocol):
    """Durable home of the polling offset."""

    async def load(self) -> int | None: ...

    async def save(self, offset: int) -> None: ...


#: Store one update durably (raises ValueError: unstorable; DatabaseError: storage down).
IngestOne = Callable[[Update, Mapping[str, Any]], Awaitable[object]]


def parse_batch(result: object) -> PollBatch:
    """A getUpdates ``result`` (a JSON list) as a :class:`PollBatch`."""
    return from_update_batch(parse_update_batch(result))


def from_update_batch(batch: UpdateBatch) -> PollBatch:
    """Pair each parsed update with its raw JSON."""
    pairs = tuple(PolledUpdate(u, p) for u, p in zip(batch.updates, batch.payloads, strict=True))
    return PollBatch(pairs, batch.malformed, batch.next_offset)


@attrs.frozen
class BotApiUpdates:
    """:class:`UpdateSource` over a :class:`BotApiClient`, keeping each update's raw JSON."""

    client: BotApiClient

    async def get_updates(
        self,
        offset: int | None,
        timeout: int,  # noqa: ASYNC109 - the Bot API long-poll parameter
        allowed_updates: Sequence[str],
        limit: int,
    ) -> PollBatch:
        batch = await self.client.get_updates(offset, timeout, allowed_updates, limit=limit)
        return from_update_batch(batch)


@attrs.frozen
class BotStateOffsets:
    """:class:`OffsetStore` in the ``bot_state`` table (a JSON number under ``key``)."""

    db: Queries
    key: str = OFFSET_KEY

    async def load(self) -> int | None:
        value = await self.db.fetchval("SELECT value FROM bot_state WHERE key = $1", self.key)
        if isinstance(value, str | bytes):
            value = json.loads(value)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if value is not None:
            log.warning("poller.offset_unreadable", key=self.key, value=repr(value)[:100])
        return None

    async def save(self, offset: int) -> None:
        await self.db.execute(
            "INSERT INTO bot_state (key, value) VALUES ($1, $2::jsonb) "
            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()",
            self.key,
            json.dumps(offset),
        )


def backoff_delay(failures: int, base: float = BACKOFF_BASE, cap: float = BACKOFF_CAP) -> float:
    """Delay after the ``failures``-th consecutive failure: base, 2*base, 4*base... up to cap."""
    return capped_backoff(max(failures - 1, 0), base=base, cap=cap)


# --- the poller --------------------------------------------------------------------------------


class Poller:
    """getUpdates long polling into the inbox; ``run`` returns after ``stop`` is set."""

    def __init__(
        self,
        db: Queries | None,
        client: BotApiClient | UpdateSource,
        *,
        allowed_chat_ids: Container[int],
        dedupe: DedupeCache,
        notify: Notify,
        stop: trio.Event,
        strangers: Strangers | None = None,
        poll_timeout: int = 50,
        offsets: OffsetStore | None = None,
        ingest_one: IngestOne | None = None,
        allowed_updates: Sequence[str] = ALLOWED_UPDATES,
        backoff_base: float = BACKOFF_BASE,
        backoff_cap: float = BACKOFF_CAP,
        empty_poll_floor: float = EMPTY_POLL_FLOOR,
    ) -> None:
        if db is None and (offsets is None or ingest_one is None):
            raise ValueError("Poller needs a database unless offsets and ingest_one are given")
        self._source: UpdateSource = (
            BotApiUpdates(client) if isinstance(client, BotApiClient) else client
        )
        self._db = db
        self._allowed_chat_ids = allowed_chat_ids
        self._strangers = strangers
        self._dedupe = dedupe
        self._notify = notify
        self._stop = stop
        self._poll_timeout = poll_timeout
        self._offsets = offsets if offsets is not None else BotStateOffsets(_require(db))
        self._ingest_one = ingest_one if ingest_one is not None else self._ingest
        self._allowed_updates = tuple(allowed_updates)
        self._backoff_base = backoff_base
        self._backoff_cap = backoff_cap
        self._empty_poll_floor = empty_poll_floor
        #: the next offset to ask for: everything below it is in the inbox
        self.offset: int | None = None
        #: the offset of the last answered getUpdates: Telegram forgot everything below it
        self._told: int | None = None

    async def _ingest(self, update: Update, payload: Mapping[str, Any]) -> Outcome:
        return await ingest(
            _require(self._db),
            update,
            payload,
            allowed_chat_ids=self._allowed_chat_ids,
            dedupe=self._dedupe,
            notify=self._notify,
            source="polling",
            strangers=self._strangers,
        )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Load the stored offset, report ready, poll until ``stop``, confirm and return."""
        self.offset, self._told = await self._offsets.load(), None
        log.info("poller.started", offset=self.offset, timeout=self._poll_timeout)
        task_status.started()
        api_failures = 0
        db_failures = 0
        while not self._stop.is_set():
            started = trio.current_time()
            try:
                batch = await self._until_stop(self._poll)
            except Conflict as exc:
                log.error("poller.conflict", error=exc.description)
                raise PollingConflict(exc.description) from None
            except Unauthorized:
                raise TokenRejected() from None
            except RateLimited as exc:
                if exc.retry_after is not None:
                    delay = exc.retry_after
                else:
                    api_failures += 1
                    delay = self._delay(api_failures)
                log.warning("poller.rate_limited", retry_after=delay)
                await self._sleep(delay)
                continue
            except (ServerError, NetworkError, UnexpectedResponse) as exc:
                api_failures += 1
                delay = self._delay(api_failures)
                log.warning("poller.api_failed", error=str(exc)[:300], retry_in=delay)
                await self._sleep(delay)
                continue
            if batch is None:  # stop was set during the long poll
                break
            api_failures = 0
            self._told = self.offset
            try:
                await self._store(batch)
            except DatabaseError as exc:
                db_failures += 1
                delay = self._delay(db_failures)
                log.error(
                    "poller.storage_failed",
                    error=str(exc)[:300],
                    offset=self.offset,
                    retry_in=delay,
                )
                await self._sleep(delay)
                continue
            db_failures = 0
            wait = started + self._empty_poll_floor - trio.current_time()
            if batch.next_offset is None and wait > 0:  # nothing came, at once: the floor
                await self._sleep(wait)
        await self._confirm()
        log.info("poller.stopped", offset=self.offset)

    def _delay(self, failures: int) -> float:
        return backoff_delay(failures, self._backoff_base, self._backoff_cap)

    async def _poll(self) -> PollBatch:
        return await self._source.get_updates(
            self.offset, self._poll_timeout, self._allowed_updates, BATCH_LIMIT
        )

    async def _store(self, batch: PollBatch) -> None:
        """Ingest the whole batch, then advance and persist the offset."""
        for bad in batch.malformed:
            log.warning("poller.malformed_update", update_id=bad.update_id, reason=bad.reason)
        for polled in batch.updates:
            try:
                await self._ingest_one(polled.update, polled.payload)
            except ValueError as exc:
                log.error(
                    "poller.unstorable_update",
                    update_id=polled.update.update_id,
                    error=str(exc)[:300],
                )
        new = batch.next_offset
        if new is None or (self.offset is not None and new <= self.offset):
            return
        await self._offsets.save(new)
        self.offset = new
        log.debug("poller.offset_saved", offset=new, updates=len(batch.updates))

    async def _confirm(self) -> None:
        """One last getUpdates(offset, timeout=0) so Telegram forgets the confirmed updates."""
        if self.offset is None or self.offset == self._told:
            return
        with trio.move_on_after(FINAL_CALL_TIMEOUT, shield=True) as scope:
            try:
                await self._source.get_updates(self.offset, 0, self._allowed_updates, 1)
            except TelegramError as exc:
                log.warning("poller.confirm_failed", offset=self.offset, error=str(exc)[:300])
                return
            self._told = self.offset
            log.info("poller.offset_confirmed", offset=self.offset)
        if scope.cancelled_caught:
            log.warning("poller.confirm_timed_out", offset=self.offset)

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but wake up as soon as ``stop`` is set."""
        with trio.move_on_after(seconds):
            await self._stop.wait()

    async def _until_stop(self, call: Callable[[], Awaitable[T]]) -> T | None:
        """``await call()``; None (and the call cancelled) if ``stop`` is set first.

        The call's own exception is re-raised as it is, not inside an exception group.
        """
        result: list[T] = []
        error: list[Exception] = []

        async def watch(scope: trio.CancelScope) -> None:
            await self._stop.wait()
            scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch, nursery.cancel_scope)
            try:
                result.append(await call())
            except Exception as exc:
                error.append(exc)
            nursery.cancel_scope.cancel()
        if error:
            raise error[0]
        return result[0] if result else None


def _require(db: Queries | None) -> Queries:
    if db is None:
        raise ValueError("a database is required")
    return db
