"""Long polling: timers with a MockClock and in-memory fakes; then the real client, fake Bot API
and a real PostgreSQL (no autojump there)."""

from __future__ import annotations

import inspect
import itertools
import json
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import pytest
import trio
import trio.lowlevel
import trio.testing
from fakes.bot_api import Failure, FakeBotApi, message_object

from actors.queues.dedupe import DedupeCache
from actors.telegram.client import BotApiClient
from actors.telegram.errors import (
    Conflict,
    MaybeDeliveredError,
    PollingConflict,
    PreConnectError,
    RateLimited,
    ServerError,
)
from actors.telegram.poller import BotStateOffsets, PollBatch, Poller, backoff_delay, parse_batch
from actors.telegram.types import ALLOWED_UPDATES, Update
from runtime import db as dbmod
from runtime.errors import DatabaseUnavailable

CHAT = 4242
OTHER_CHAT = 999


def update(update_id: int, chat_id: int = CHAT, text: str = "hello") -> dict[str, Any]:
    msg = message_object(chat_id, update_id + 1000, text=text)
    msg["from"] = {"id": chat_id, "is_bot": False, "first_name": "A"}
    return {"update_id": update_id, "message": msg}


# --- in-memory fakes ---------------------------------------------------------------------------


@attrs.frozen
class PollCall:
    time: float
    offset: int | None
    timeout: int
    limit: int


@attrs.define
class MemoryTelegram:
    """getUpdates semantics in memory: confirms below ``offset``, long-polls ``timeout`` s."""

    queue: list[dict[str, Any]] = attrs.Factory(list)
    failures: deque[Exception] = attrs.Factory(deque)
    calls: list[PollCall] = attrs.Factory(list)
    changed: trio.Event = attrs.Factory(trio.Event)

    def push(self, *updates: dict[str, Any]) -> None:
        self.queue.extend(updates)
        self.changed.set()
        self.changed = trio.Event()

    async def get_updates(
        self,
        offset: int | None,
        timeout: int,  # noqa: ASYNC109
        allowed_updates: Sequence[str],
        limit: int,
    ) -> PollBatch:
        assert tuple(allowed_updates) == ALLOWED_UPDATES
        self.calls.append(PollCall(trio.current_time(), offset, timeout, limit))
        if self.failures:
            raise self.failures.popleft()
        if offset is not None:
            self.queue = [u for u in self.queue if u.get("update_id", 0) >= offset]
        with trio.move_on_after(timeout):
            while not self.queue:
                await self.changed.wait()
        return parse_batch(self.queue[:limit])


@attrs.define
class MemoryInbox:
    """The ingest seam: records update ids; scripted DatabaseErrors / ValueErrors per id."""

    stored: list[int] = attrs.Factory(list)
    attempts: list[int] = attrs.Factory(list)
    db_failures: dict[int, int] = attrs.Factory(dict)
    unstorable: set[int] = attrs.Factory(set)
    on_ingest: Any = None

    async def __call__(self, update: Update, payload: Mapping[str, Any]) -> object:
        assert payload["update_id"] == update.update_id
        self.attempts.append(update.update_id)
        if self.on_ingest is not None:
            self.on_ingest(update)
        await trio.lowlevel.checkpoint()
        if self.db_failures.get(update.update_id, 0) > 0:
            self.db_failures[update.update_id] -= 1
            raise DatabaseUnavailable("connection lost")
        if update.update_id in self.unstorable:
            raise ValueError("payload holds a NaN")
        if update.update_id not in self.stored:
            self.stored.append(update.update_id)
        return None


@attrs.define
class MemoryOffsets:
    value: int | None = None
    saved: list[int] = attrs.Factory(list)

    async def load(self) -> int | None:
        return self.value

    async def save(self, offset: int) -> None:
        self.value = offset
        self.saved.append(offset)


@attrs.define
class Rig:
    telegram: MemoryTelegram
    inbox: MemoryInbox
    offsets: MemoryOffsets
    stop: trio.Event
    poller: Poller


def rig(offset: int | None = None, poll_timeout: int = 50) -> Rig:
    telegram, inbox, offsets, stop = (
        MemoryTelegram(),
        MemoryInbox(),
        MemoryOffsets(offset),
        trio.Event(),
    )
    poller = Poller(
        None,
        telegram,
        allowed_chat_ids=frozenset({CHAT}),
        dedupe=DedupeCache(),
        notify=lambda row_id, upd: None,
        stop=stop,
        poll_timeout=poll_timeout,
        offsets=offsets,
        ingest_one=inbox,
    )
    return Rig(telegram, inbox, offsets, stop, poller)


async def wait_for(check: Callable[[], object], timeout: float = 100.0) -> None:  # noqa: ASYNC109
    """Poll ``check`` (sync or async) until it is true; MockClock tests jump through ``timeout``."""
    with trio.fail_after(timeout):
        for _ in itertools.count():
            result = check()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return
            await trio.sleep(0.01)


def api_error(cls: type[Any], code: int, **kwargs: Any) -> Exception:
    error: Exception = cls("getUpdates", code, code, "failure", **kwargs)
    return error


# --- MockClock tests ---------------------------------------------------------------------------


def test_backoff_schedule() -> None:
    assert [backoff_delay(n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]


async def test_429_waits_exactly_retry_after(autojump_clock: trio.testing.MockClock) -> None:
    r = rig()
    r.telegram.failures.append(api_error(RateLimited, 429, retry_after=7))
    r.telegram.push(update(1))
    async with trio.open_nursery() as nursery:
        await nursery.start(r.poller.run)
        await wait_for(lambda: r.inbox.stored == [1])
        r.stop.set()
    first, second = r.telegram.calls[:2]
    assert second.time - first.time == 7
    assert r.offsets.saved == [2]


async def test_5xx_and_network_errors_back_off_1_2_4(
    autojump_clock: trio.testing.MockClock,
) -> None:
    r = rig()
    r.telegram.failures.extend(
        [
            api_error(ServerError, 502),
            PreConnectError("getUpdates", "refused", cause_type="ConnectError"),
            MaybeDeliveredError("getUpdates", "reset", cause_type="ReadError"),
            api_error(ServerError, 500),
        ]
    )
    r.telegram.push(update(1))
    async with trio.open_nursery() as nursery:
        await nursery.start(r.poller.run)
        await wait_for(lambda: r.inbox.stored == [1])
        r.stop.set()
    times = [c.time for c in r.telegram.calls[:5]]
    assert [b - a for a, b in itertools.pairwise(times)] == [1, 2, 4, 8]
    assert r.offsets.saved == [2]


async def test_backoff_resets_after_a_success(autojump_clock: trio.testing.MockClock) -> None:
    r = rig(poll_timeout=5)
    r.telegram.failures.extend([api_error(ServerError, 500), api_error(ServerError, 500)])
    async with trio.open_nursery() as nursery:
        await nursery.start(r.poller.run)
        await wait_for(lambda: len(r.telegram.calls) == 3)  # 2 failures, then a 5 s long poll
        r.telegram.failures.append(api_error(ServerError, 500))
        await wait_for(lambda: len(r.telegram.calls) == 5)
        r.stop.set()
    times = [c.time for c in r.telegram.calls]
    assert [b - a for a, b in itertools.pairwise(times)] == [1, 2, 5, 1]


async def test_db_error_keeps_offset_and_retries_same_batch(
    autojump_clock: trio.testing.MockClock,
) -> None:
    r = rig(offset=10)
    r.inbox.db_failures[11] = 2
    r.telegram.push(update(10), update(11), update(12))
    async with trio.open_nursery() as nursery:
        await nursery.start(r.poller.run)
        await wait_for(lambda: r.inbox.stored == [10, 11, 12])
        r.stop.set()
    calls = r.telegram.calls
    assert [c.offset for c in calls[:4]] == [10, 10, 10, 13]
    assert calls[1].time - calls[0].time == 1
    assert calls[2].time - calls[1].time == 2
    # the batch is re-delivered from its start; the offset moved only once, at the end
    assert r.inbox.attempts == [10, 11, 10, 11, 10, 11, 12]
    assert r.offsets.saved == [13]


async def test_stop_finishes_batch_then_confirms_with_timeout_0(
    autojump_clock: trio.testing.MockClock,
) -> None:
    r = rig(offset=1)
    r.inbox.on_ingest = lambda upd: r.stop.set() if upd.update_id == 2 else None
    r.telegram.push(update(1), update(2), update(3))
    with trio.fail_after(1):
        async with trio.open_nursery() as nursery:
            await nursery.start(r.poller.run)
    assert r.inbox.stored == [1, 2, 3]
    assert r.offsets.saved == [4]
    first, last = r.telegram.calls
    assert (first.offset, first.timeout) == (1, 50)
    assert (last.offset, last.timeout) == (4, 0)
    assert r.telegram.queue == []  # Telegram forgot the confirmed updates


async def test_stop_during_long_poll_returns_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    r = rig(offset=5)
    async with trio.open_nursery() as nursery:
        await nursery.start(r.poller.run)
        await trio.sleep(3)
        start = trio.current_time()
        r.stop.set()
    assert trio.current_time() == start
    # the abandoned long poll may not have reached Telegram: the stored offset is confirmed
    assert [(c.offset, c.timeout) for c in r.telegram.calls] == [(5, 50), (5, 0)]


async def test_no_final_call_when_telegram_already_knows_the_offset(
    autojump_clock: trio.testing.MockClock,
) -> None:
    r = rig(offset=5, poll_timeout=2)
    async with trio.open_nursery() as nursery:
        await nursery.start(r.poller.run)
        await trio.sleep(3)  # one empty long poll answered, the next one in flight
        r.stop.set()
    assert [(c.offset, c.timeout) for c in r.telegram.calls] == [(5, 2), (5, 2)]


async def test_stop_during_backoff_returns_at_once(autojump_clock: trio.testing.MockClock) -> None:
    r = rig()
    r.telegram.failures.append(api_error(ServerError, 503))
    async with trio.open_nursery() as nursery:
        await nursery.start(r.poller.run)
        await trio.sleep(0.5)
        r.stop.set()
    assert trio.current_time() == 0.5
    assert len(r.telegram.calls) == 1


async def test_resumes_from_stored_offset(autojump_clock: trio.testing.MockClock) -> None:
    r = rig(offset=42)
    r.telegram.push(update(40), update(41), update(42))
    async with trio.open_nursery() as nursery:
        await nursery.start(r.poller.run)
        await wait_for(lambda: r.inbox.stored == [42])
        r.stop.set()
    assert r.telegram.calls[0].offset == 42
    assert r.inbox.attempts == [42]


async def test_malformed_and_unstorable_updates_are_skipped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    r = rig()
    r.inbox.unstorable.add(3)
    broken = {"update_id": 2, "message": "not an object"}
    r.telegram.push(update(1), broken, update(3), update(4))
    async with trio.open_nursery() as nursery:
        await nursery.start(r.poller.run)
        await wait_for(lambda: r.offsets.saved == [5])
        r.stop.set()
    assert r.inbox.stored == [1, 4]
    assert r.inbox.attempts == [1, 3, 4]


async def test_batch_of_only_malformed_updates_still_advances(
    autojump_clock: trio.testing.MockClock,
) -> None:
    r = rig()
    r.telegram.push({"update_id": 7, "message": {"chat": "broken"}})
    async with trio.open_nursery() as nursery:
        await nursery.start(r.poller.run)
        await wait_for(lambda: r.offsets.saved == [8])
        r.stop.set()
    assert r.inbox.attempts == []


async def test_conflict_raises_polling_conflict(autojump_clock: trio.testing.MockClock) -> None:
    r = rig()
    r.telegram.failures.append(api_error(Conflict, 409))
    with pytest.raises(PollingConflict, match="engram telegram delete-webhook"):
        await r.poller.run()
    assert len(r.telegram.calls) == 1


def test_poller_without_db_needs_both_seams() -> None:
    with pytest.raises(ValueError, match="database"):
        Poller(
            None,
            MemoryTelegram(),
            allowed_chat_ids=frozenset(),
            dedupe=DedupeCache(),
            notify=lambda row_id, upd: None,
            stop=trio.Event(),
            offsets=MemoryOffsets(),
        )


# --- real HTTP (fake Bot API) + real PostgreSQL ------------------------------------------------


@attrs.define
class Live:
    poller: Poller
    stop: trio.Event
    notified: list[int]


def live_poller(db: dbmod.Database, bot: BotApiClient, **kwargs: Any) -> Live:
    notified: list[int] = []
    stop = trio.Event()
    poller = Poller(
        db,
        bot,
        allowed_chat_ids=frozenset({CHAT}),
        dedupe=DedupeCache(),
        notify=lambda row_id, upd: notified.append(upd.update_id),
        stop=stop,
        poll_timeout=5,
        **kwargs,
    )
    return Live(poller, stop, notified)


async def inbox_update_ids(db: dbmod.Database) -> list[int]:
    rows = await db.fetch("SELECT update_id FROM inbox ORDER BY id")
    return [r["update_id"] for r in rows]


async def has_ids(db: dbmod.Database, expected: list[int]) -> bool:
    return await inbox_update_ids(db) == expected


async def has_offset(db: dbmod.Database, expected: int) -> bool:
    return await BotStateOffsets(db).load() == expected


async def run_until(db: dbmod.Database, live: Live, expected: list[int]) -> None:
    """Run the poller until the inbox holds ``expected`` (in order), then stop it."""
    async with trio.open_nursery() as nursery:
        await nursery.start(live.poller.run)
        await wait_for(lambda: has_ids(db, expected), timeout=10)
        live.stop.set()


async def test_db_updates_end_in_inbox_in_order_offset_persisted(
    db: dbmod.Database, fake: FakeBotApi, bot: BotApiClient
) -> None:
    pushed = [fake.push_message(CHAT, f"message {i}")["update_id"] for i in range(5)]
    live = live_poller(db, bot)
    await run_until(db, live, pushed)
    assert live.notified == pushed
    assert await BotStateOffsets(db).load() == pushed[-1] + 1
    calls = fake.calls_to("getUpdates")
    assert calls[0].params["allowed_updates"] == list(ALLOWED_UPDATES)
    assert (calls[-1].params["offset"], calls[-1].params["timeout"]) == (pushed[-1] + 1, 0)
    assert fake.pending_updates == []
    rows = await db.fetch("SELECT kind, chat_id, payload FROM inbox ORDER BY id")
    assert {(r["kind"], r["chat_id"]) for r in rows} == {("message", CHAT)}
    payload = json.loads(rows[0]["payload"])  # the update exactly as Telegram sent it
    assert payload["message"]["text"] == "message 0"
    assert "x_fake_unknown_field" in payload["message"]


async def test_db_offset_resumed_after_restart_without_duplicates(
    db: dbmod.Database, fake: FakeBotApi, bot: BotApiClient
) -> None:
    first = [fake.push_update(update(i))["update_id"] for i in (1, 2, 3)]
    await run_until(db, live_poller(db, bot), first)
    assert await BotStateOffsets(db).load() == 4
    # Telegram re-offers the old updates (as if the confirmation had been lost), plus a new one
    for i in (1, 2, 3, 4):
        fake.push_update(update(i))
    fake.calls.clear()
    second = live_poller(db, bot)  # a fresh process: empty dedupe cache
    await run_until(db, second, [1, 2, 3, 4])
    assert fake.calls_to("getUpdates")[0].params["offset"] == 4
    assert second.notified == [4]
    assert await inbox_update_ids(db) == [1, 2, 3, 4]
    assert await BotStateOffsets(db).load() == 5


async def test_db_disallowed_chat_dropped_but_confirmed(
    db: dbmod.Database, fake: FakeBotApi, bot: BotApiClient
) -> None:
    fake.push_update(update(1, chat_id=OTHER_CHAT))
    fake.push_update(update(2))
    fake.push_update(update(3, chat_id=OTHER_CHAT))
    live = live_poller(db, bot)
    async with trio.open_nursery() as nursery:
        await nursery.start(live.poller.run)
        await wait_for(lambda: has_offset(db, 4), timeout=10)
        live.stop.set()
    assert await inbox_update_ids(db) == [2]
    assert live.notified == [2]
    assert fake.pending_updates == []


async def test_db_webhook_set_gives_polling_conflict(
    db: dbmod.Database, fake: FakeBotApi, bot: BotApiClient
) -> None:
    await bot.set_webhook("https://bot.example.org/api/telegram", "s3cret")
    fake.push_update(update(1))
    with pytest.raises(PollingConflict) as info:
        await live_poller(db, bot).poller.run()
    message = str(info.value)
    assert "webhook" in message
    assert "engram telegram delete-webhook" in message
    assert "stop the other" in message
    assert await inbox_update_ids(db) == []
    assert await BotStateOffsets(db).load() is None


async def test_db_second_poller_ends_the_first_with_conflict(
    db: dbmod.Database, fake: FakeBotApi, bot: BotApiClient
) -> None:
    first, second = live_poller(db, bot), live_poller(db, bot)
    errors: list[BaseException] = []

    async def run_first(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            await first.poller.run()
        except PollingConflict as exc:
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        await nursery.start(run_first)
        await wait_for(lambda: [c.status for c in fake.calls_to("getUpdates")] == [None])
        await nursery.start(second.poller.run)  # Telegram ends the older long poll with 409
        await wait_for(lambda: bool(errors))
        fake.push_update(update(1))
        await wait_for(lambda: has_ids(db, [1]), timeout=10)
        second.stop.set()
    assert "stop the other engram instance" in str(errors[0])
    assert "only one bot instance" in str(errors[0])


async def test_db_getupdates_errors_are_retried(
    db: dbmod.Database, fake: FakeBotApi, bot: BotApiClient
) -> None:
    fake.fail_next("getUpdates", Failure.server_error(502, "Bad Gateway"))
    fake.push_update(update(1))
    await run_until(db, live_poller(db, bot, backoff_base=0.05), [1])
    statuses = [c.status for c in fake.calls_to("getUpdates")]
    assert statuses[0] == 502


async def test_db_bot_state_offsets_roundtrip(db: dbmod.Database) -> None:
    store = BotStateOffsets(db)
    assert await store.load() is None
    await store.save(10)
    await store.save(12)
    assert await store.load() == 12
    assert await BotStateOffsets(db, key="other").load() is None


@attrs.define
class InstantEmptyTelegram:
    """A Bot API server that answers every getUpdates at once with nothing (it does not hold
    long polls)."""

    calls: list[float] = attrs.Factory(list)

    async def get_updates(
        self,
        offset: int | None,
        timeout: int,  # noqa: ASYNC109
        allowed_updates: Sequence[str],
        limit: int,
    ) -> PollBatch:
        self.calls.append(trio.current_time())
        # a poller that spins never lets the MockClock move: fail rather than hang
        assert len(self.calls) < 1000, "the poller spins against an instant empty answer"
        await trio.lowlevel.checkpoint()
        return parse_batch([])


async def test_a_server_answering_at_once_with_nothing_is_polled_once_a_second(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server, inbox, offsets, stop = (
        InstantEmptyTelegram(),
        MemoryInbox(),
        MemoryOffsets(),
        trio.Event(),
    )
    poller = Poller(
        None,
        server,
        allowed_chat_ids=frozenset({CHAT}),
        dedupe=DedupeCache(),
        notify=lambda row_id, upd: None,
        stop=stop,
        offsets=offsets,
        ingest_one=inbox,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(poller.run)
        await trio.sleep(10.5)
        stop.set()
    gaps = [b - a for a, b in itertools.pairwise(server.calls)]
    assert len(server.calls) == 11  # at 0, 1, ... 10 s: not thousands
    assert all(gap == 1.0 for gap in gaps), gaps


async def test_a_stop_during_the_floor_ends_the_poller_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server, stop = InstantEmptyTelegram(), trio.Event()
    poller = Poller(
        None,
        server,
        allowed_chat_ids=frozenset({CHAT}),
        dedupe=DedupeCache(),
        notify=lambda row_id, upd: None,
        stop=stop,
        offsets=MemoryOffsets(),
        ingest_one=MemoryInbox(),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(poller.run)
        await trio.sleep(0.25)
        stop.set()
        stopped_at = trio.current_time()
    assert trio.current_time() == stopped_at
    assert len(server.calls) == 1


async def test_a_poll_that_brings_updates_is_followed_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    r = rig(poll_timeout=5)
    r.telegram.push(update(1))
    async with trio.open_nursery() as nursery:
        await nursery.start(r.poller.run)
        await wait_for(lambda: len(r.telegram.calls) >= 2)
        r.stop.set()
    first, second = r.telegram.calls[:2]
    assert second.time == first.time  # a batch came: no floor before the next poll
