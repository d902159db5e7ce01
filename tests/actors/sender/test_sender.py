"""SenderActor: timing on a MockClock with in-memory fakes; delivery over real HTTP + PostgreSQL."""

from __future__ import annotations

import itertools
import random
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
import structlog
import trio
import trio.testing
from fakes.bot_api import Failure, FakeBotApi
from queue_rows import outbox_row

from actors.queues import outbox, sending
from actors.queues.outbox import OutboxRow
from actors.sender.actor import OutboxReady, SenderActor
from actors.sender.policy import SenderLedger, SenderSettings, SlidingWindowLimiter
from actors.sender.store import DbOutbox, MessageClient, OutboxStore, plain_fallback, plan_chunks
from actors.settings import load_settings
from actors.telegram.chunking import html_to_text, utf16_len, visible_text
from actors.telegram.client import BotApiClient
from actors.telegram.errors import (
    BadRequest,
    Forbidden,
    MaybeDeliveredError,
    PreConnectError,
    RateLimited,
    ServerError,
)
from runtime import db as dbmod
from runtime.actor import Address
from runtime.backoff import backoff_delay
from runtime.errors import SettingsError

EPS = 1e-6
NO_SWEEP = SenderSettings(sweep_interval=None, jitter=0.0)


def server_error() -> ServerError:
    return ServerError("sendMessage", 502, 502, "Bad Gateway")


def pre_connect() -> PreConnectError:
    return PreConnectError("sendMessage", "connection refused", cause_type="ConnectError")


def maybe_delivered() -> MaybeDeliveredError:
    return MaybeDeliveredError("sendMessage", "read timed out", cause_type="ReadTimeout")


def blocked() -> Forbidden:
    return Forbidden("sendMessage", 403, 403, "Forbidden: bot was blocked by the user")


def parse_error() -> BadRequest:
    return BadRequest("sendMessage", 400, 400, "Bad Request: can't parse entities: Unsupported")


# --- in-memory fakes -----------------------------------------------------------------------------


@attrs.define
class MemoryOutbox:
    """An OutboxStore in memory, with the same transitions as actors.queues.outbox."""

    rows: dict[int, OutboxRow] = attrs.field(factory=dict)
    record_delay: float = 0.0
    query_delay: float = 0.0  # next_pending answers from a snapshot taken before the delay
    _ids: Iterable[int] = attrs.field(factory=lambda: itertools.count(1))
    _changed: trio.Event = attrs.field(factory=trio.Event)

    def add(self, chat_id: int, text: str, parse_mode: str | None = None, **fields: object) -> int:
        row_id = next(iter(self._ids))
        base = dict(
            id=row_id,
            chat_id=chat_id,
            text=text,
            parse_mode=parse_mode,
            reply_to_message_id=None,
            inbox_ids=(),
            status="pending",
            attempts=0,
            last_error=None,
            chunks_sent=0,
            telegram_message_ids=(),
            created_at=datetime.now(UTC),
            sent_at=None,
        )
        self.rows[row_id] = OutboxRow(**{**base, **fields})  # type: ignore[arg-type]
        self._touch()
        return row_id

    def _touch(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def _update(self, row_id: int, **changes: object) -> bool:
        row = self.rows.get(row_id)
        if row is None or row.status not in ("pending", "sending"):
            return False
        self.rows[row_id] = attrs.evolve(row, **changes)  # type: ignore[arg-type]
        self._touch()
        return True

    async def wait_final(self, *row_ids: int) -> None:
        ids = row_ids or tuple(self.rows)
        while any(self.rows[i].status in ("pending", "sending") for i in ids):
            await self._changed.wait()

    async def chats_with_pending(self) -> list[int]:
        await trio.lowlevel.checkpoint()
        open_rows = sorted(r.id for r in self.rows.values() if r.status in ("pending", "sending"))
        return list(dict.fromkeys(self.rows[i].chat_id for i in open_rows))

    async def next_pending(self, chat_id: int, limit: int) -> list[OutboxRow]:
        await trio.lowlevel.checkpoint()
        rows = [r for _, r in sorted(self.rows.items()) if r.chat_id == chat_id]
        snapshot = [r for r in rows if r.status in ("pending", "sending")][:limit]
        await trio.sleep(self.query_delay)
        return snapshot

    async def mark_in_flight(self, ref: OutboxRow, chunk: int) -> int | None:
        await trio.lowlevel.checkpoint()
        row_id = ref.id
        row = self.rows[row_id]
        changed = self._update(
            row_id, status="sending", attempts=row.attempts + 1, chunk_in_flight=chunk
        )
        return row.attempts + 1 if changed else None

    async def record_chunk_sent(
        self, ref: OutboxRow, chunk: int, telegram_message_id: int, *, last: bool
    ) -> bool:
        await trio.sleep(self.record_delay)
        row_id = ref.id
        row = self.rows[row_id]
        if row.chunks_sent > chunk:
            return True
        ids = (*row.telegram_message_ids, telegram_message_id)
        done = {"status": "sent", "last_error": None} if last else {}
        return row.chunks_sent == chunk and self._update(
            row_id, chunks_sent=chunk + 1, telegram_message_ids=ids, chunk_in_flight=None, **done
        )

    async def release_in_flight(self, ref: OutboxRow, chunk: int, error: str) -> bool:
        await trio.lowlevel.checkpoint()
        if self.rows[ref.id].chunk_in_flight != chunk:
            return False
        return self._update(ref.id, chunk_in_flight=None, last_error=error)

    async def recover_in_flight(self, row_ids: Sequence[int] | None) -> list[OutboxRow]:
        await trio.lowlevel.checkpoint()
        found = [
            r.id
            for r in self.rows.values()
            if r.status in ("pending", "sending") and r.chunk_in_flight is not None
            if row_ids is None or r.id in row_ids
        ]
        for row_id in found:
            self._update(row_id, status="uncertain", last_error="in flight at a restart")
        return [self.rows[i] for i in sorted(found)]

    async def mark_failed(self, ref: OutboxRow, error: str) -> bool:
        await trio.lowlevel.checkpoint()
        return self._update(ref.id, status="failed", last_error=error, chunk_in_flight=None)

    async def mark_uncertain(self, ref: OutboxRow, error: str) -> bool:
        await trio.lowlevel.checkpoint()
        return self._update(ref.id, status="uncertain", last_error=error)


@attrs.frozen
class Attempt:
    time: float
    chat_id: int
    text: str
    parse_mode: str | None
    reply_to: int | None
    message_id: int | None  # None when the attempt failed


@attrs.define
class FakeClient:
    """In-memory MessageClient: scripted failures per chat (None = succeed), attempts recorded."""

    attempts: list[Attempt] = attrs.field(factory=list)
    script: dict[int, deque[Exception | None]] = attrs.field(factory=dict)
    #: every request before this trio time gets a 502 (an outage)
    down_until: float = float("-inf")
    #: called at each request, before it is answered (e.g. to look at the store)
    observe: Callable[[int, str], None] | None = None
    _next_id: int = 100

    def fail(self, chat_id: int, *errors: Exception | None) -> None:
        self.script.setdefault(chat_id, deque()).extend(errors)

    def times(self, chat_id: int | None = None) -> list[float]:
        return [a.time for a in self.attempts if chat_id is None or a.chat_id == chat_id]

    def delivered(self, chat_id: int) -> list[str]:
        return [a.text for a in self.attempts if a.chat_id == chat_id and a.message_id]

    async def send_message(
        self,
        chat_id: int | str,
        text: str,
        parse_mode: str | None = None,
        *,
        reply_to_message_id: int | None = None,
        reply_markup: Mapping[str, Any] | None = None,
    ) -> int:
        assert isinstance(chat_id, int)
        now = trio.current_time()
        await trio.lowlevel.checkpoint()
        if self.observe is not None:
            self.observe(chat_id, text)
        queue = self.script.get(chat_id)
        error = queue.popleft() if queue else None
        if error is None and now < self.down_until:
            error = server_error()
        message_id = None if error is not None else self._next_id
        self.attempts.append(
            Attempt(now, chat_id, text, parse_mode, reply_to_message_id, message_id)
        )
        if error is not None:
            raise error
        self._next_id += 1
        assert utf16_len(visible_text(text) if parse_mode == "HTML" else text) <= 4096
        return self._next_id - 1

    async def edit_message_text(
        self,
        chat_id: int | str,
        message_id: int,
        text: str,
        parse_mode: str | None = None,
        *,
        reply_markup: Mapping[str, Any] | None = None,
    ) -> None:
        raise AssertionError("these tests send no edits")

    async def edit_message_reply_markup(
        self, chat_id: int | str, message_id: int, reply_markup: Mapping[str, Any] | None = None
    ) -> None:
        raise AssertionError("these tests send no edits")


def _protocols(store: MemoryOutbox, client: FakeClient) -> tuple[OutboxStore, MessageClient]:
    return store, client  # type-checks the fakes against the Protocols


@asynccontextmanager
async def running(sender: SenderActor) -> AsyncIterator[Address[OutboxReady]]:
    async with trio.open_nursery() as nursery:
        address = await nursery.start(sender.run)
        yield address
        nursery.cancel_scope.cancel()


def rel(times: list[float], t0: float) -> list[float]:
    return [round(t - t0, 6) for t in times]


# --- pure helpers --------------------------------------------------------------------------------


def test_plan_chunks_modes_and_plain_fallback() -> None:
    assert plan_chunks("<b>x</b>", "HTML").parse_mode == "HTML"
    assert plan_chunks("<b>x", "HTML").chunks == ("x",)  # malformed: plain text up front
    assert plan_chunks("<b>x", "HTML").parse_mode is None
    assert plan_chunks("a *b*", "MarkdownV2").parse_mode == "MarkdownV2"
    assert plan_chunks(" \n ", None).chunks == ()
    assert plain_fallback("<b>bold</b> &amp; <i>it</i>", "HTML") == "bold & it"
    assert plain_fallback(r"1\. *a\_b*", "MarkdownV2") == "1. *a_b*"
    url = "https://example.com/" + "p" * 100
    chunk = f'<a href="{url}">{"w" * 40}</a>'
    assert plain_fallback(chunk, "HTML", limit=50) == "w" * 40  # the link no longer fits
    assert url in plain_fallback(chunk, "HTML", limit=4096)


async def test_settings_validation() -> None:
    with pytest.raises(ValueError):
        SenderSettings(global_rate=0)
    with pytest.raises(ValueError):
        SenderSettings(retry_base=-1.0)
    with pytest.raises(ValueError):
        SenderSettings(jitter=1.5)


def test_retry_cap_and_deadline_are_settings() -> None:
    settings = load_settings({}, dotenv=None)
    assert (settings.send_retry_cap, settings.send_deadline) == (300.0, 86_400.0)
    env = {"SEND_RETRY_CAP": "60", "SEND_DEADLINE": "3600"}
    assert load_settings(env, dotenv=None).send_retry_cap == 60.0
    with pytest.raises(SettingsError) as info:
        load_settings({"SEND_DEADLINE": "soon"}, dotenv=None)
    assert info.value.name == "SEND_DEADLINE"


def test_backoff_doubles_up_to_its_cap_and_jitter_only_shortens() -> None:
    delays = [backoff_delay(n, base=1.0, cap=300.0) for n in range(12)]
    assert delays == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]
    assert backoff_delay(10_000, base=1.0, cap=300.0) == 300.0  # no overflow
    assert backoff_delay(3, base=1.0, cap=300.0, jitter=0.2, draw=0.0) == 8.0
    assert backoff_delay(3, base=1.0, cap=300.0, jitter=0.2, draw=0.5) == pytest.approx(7.2)
    with pytest.raises(ValueError):
        backoff_delay(1, base=1.0, cap=300.0, draw=1.0)


async def test_limiter_sliding_window(autojump_clock: trio.testing.MockClock) -> None:
    limiter = SlidingWindowLimiter(3, 1.0)
    t0 = trio.current_time()
    stamps = []
    for _ in range(7):
        await limiter.acquire()
        stamps.append(trio.current_time() - t0)
    assert stamps == [0, 0, 0, 1, 1, 1, 2]


# --- timing (MockClock, in-memory fakes) ---------------------------------------------------------


async def test_per_chat_spacing_is_one_second(autojump_clock: trio.testing.MockClock) -> None:
    store, client = MemoryOutbox(), FakeClient()
    ids = [store.add(1, f"reply {i}") for i in range(4)]
    t0 = trio.current_time()
    async with running(SenderActor(*_protocols(store, client), settings=NO_SWEEP)):
        await store.wait_final()
    assert rel(client.times(1), t0) == [0, 1, 2, 3]
    assert client.delivered(1) == [f"reply {i}" for i in range(4)]
    assert [store.rows[i].status for i in ids] == ["sent"] * 4
    assert [store.rows[i].telegram_message_ids for i in ids] == [(100,), (101,), (102,), (103,)]


async def test_global_cap_of_30_per_second(autojump_clock: trio.testing.MockClock) -> None:
    store, client = MemoryOutbox(), FakeClient()
    chats = range(1, 91)
    for round_ in range(2):
        for chat in chats:
            store.add(chat, f"{chat}-{round_}")
    t0 = trio.current_time()
    async with running(SenderActor(store, client, settings=NO_SWEEP)):
        await store.wait_final()
    times = sorted(client.times())
    assert len(times) == 180
    assert all(later - first >= 1.0 - EPS for first, later in zip(times, times[30:], strict=False))
    assert times[-1] - t0 <= 5.0 + EPS  # 180 requests at 30/s: not slower than needed
    for chat in chats:
        own = client.times(chat)
        assert own[1] - own[0] >= 1.0 - EPS
        assert client.delivered(chat) == [f"{chat}-0", f"{chat}-1"]


@pytest.mark.parametrize("error", [server_error, pre_connect])
async def test_retryable_errors_back_off_until_the_deadline_then_fail_and_count(
    autojump_clock: trio.testing.MockClock, error: Callable[[], Exception]
) -> None:
    store, client = MemoryOutbox(), FakeClient()
    first, second = store.add(1, "doomed"), store.add(1, "next")
    client.fail(1, *(error() for _ in range(6)))
    settings = attrs.evolve(NO_SWEEP, deadline=60.0)
    sender = SenderActor(store, client, settings=settings)
    t0 = trio.current_time()
    with structlog.testing.capture_logs() as logs:
        async with running(sender):
            await store.wait_final()
    # 1, 2, 4, 8, 16 s apart; the next wait (32 s) would end past the 60 s deadline
    assert rel(client.times(1), t0) == [0, 1, 3, 7, 15, 31, 32]
    assert store.rows[first].status == "failed"
    assert "gave up after 6 attempts at the deadline" in (store.rows[first].last_error or "")
    assert store.rows[first].attempts == 6 and store.rows[first].chunk_in_flight is None
    assert store.rows[second].status == "sent"
    assert client.delivered(1) == ["next"]
    assert sender.gave_up == 1
    [event] = [e for e in logs if e["event"] == "sender.gave_up"]
    assert (event["outbox_id"], event["log_level"]) == (first, "error")


async def test_a_row_older_than_the_deadline_fails_at_its_first_retryable_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store, client = MemoryOutbox(), FakeClient()
    old = store.add(1, "from yesterday", created_at=datetime.now(UTC) - timedelta(hours=25))
    client.fail(1, server_error())
    sender = SenderActor(store, client, settings=NO_SWEEP)
    async with running(sender):
        await store.wait_final()
    assert len(client.attempts) == 1 and store.rows[old].status == "failed"
    assert sender.gave_up == 1


async def test_a_30_s_outage_is_waited_out_and_the_reply_sent_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store, client = MemoryOutbox(), FakeClient()
    t0 = trio.current_time()
    client.down_until = t0 + 30
    row = store.add(1, "patience")
    sender = SenderActor(store, client, settings=NO_SWEEP)
    async with running(sender):
        await store.wait_final()
    assert rel(client.times(1), t0) == [0, 1, 3, 7, 15, 31]
    assert client.delivered(1) == ["patience"]
    assert store.rows[row].status == "sent" and store.rows[row].telegram_message_ids == (100,)
    assert sender.gave_up == 0


async def test_jittered_waits_are_shorter_never_longer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store, client = MemoryOutbox(), FakeClient()
    t0 = trio.current_time()
    client.down_until = t0 + 30
    store.add(1, "patience")
    settings = attrs.evolve(NO_SWEEP, jitter=0.5)
    async with running(SenderActor(store, client, settings=settings, rng=random.Random(7))):
        await store.wait_final()
    times = client.times(1)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(2**n * 0.5 - EPS <= gap <= 2**n + EPS for n, gap in enumerate(gaps))
    assert any(gap < 2**n - EPS for n, gap in enumerate(gaps))  # the draw did shorten some


async def test_429_then_5xx(autojump_clock: trio.testing.MockClock) -> None:
    store, client = MemoryOutbox(), FakeClient()
    row = store.add(1, "flood, then a broken gateway")
    limited = RateLimited("sendMessage", 429, 429, "Too Many Requests", retry_after=7.5)
    client.fail(1, limited, limited, server_error(), server_error())
    t0 = trio.current_time()
    async with running(SenderActor(store, client, settings=NO_SWEEP)):
        await store.wait_final()
    assert rel(client.times(1), t0) == [0, 7.5, 15, 16, 18]  # 429s wait exactly retry_after
    assert store.rows[row].status == "sent" and client.delivered(1) == [store.rows[row].text]


async def test_transient_errors_then_success(autojump_clock: trio.testing.MockClock) -> None:
    store, client = MemoryOutbox(), FakeClient()
    row = store.add(1, "eventually")
    client.fail(1, pre_connect(), server_error(), pre_connect())
    t0 = trio.current_time()
    async with running(SenderActor(store, client, settings=NO_SWEEP)):
        await store.wait_final()
    assert rel(client.times(1), t0) == [0, 1, 3, 7]
    assert store.rows[row].status == "sent"
    assert store.rows[row].telegram_message_ids == (100,)


async def test_429_waits_exactly_retry_after(autojump_clock: trio.testing.MockClock) -> None:
    store, client = MemoryOutbox(), FakeClient()
    row = store.add(1, "flood")
    client.fail(1, RateLimited("sendMessage", 429, 429, "Too Many Requests", retry_after=7.5))
    t0 = trio.current_time()
    async with running(SenderActor(store, client, settings=NO_SWEEP)):
        await store.wait_final()
    assert rel(client.times(1), t0) == [0, 7.5]
    assert store.rows[row].status == "sent"


async def test_maybe_delivered_is_uncertain_and_not_resent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store, client = MemoryOutbox(), FakeClient()
    settings = SenderSettings(sweep_interval=None, chunk_limit=12)
    row = store.add(7, "first part\n\nsecond part\n\nthird part")
    after = store.add(7, "after")
    client.fail(7, None, maybe_delivered())
    with structlog.testing.capture_logs() as logs:
        async with running(SenderActor(store, client, settings=settings)):
            await store.wait_final()
    assert [a.text for a in client.attempts] == ["first part", "second part", "after"]
    final = store.rows[row]
    assert final.status == "uncertain"
    assert "MaybeDeliveredError" in (final.last_error or "")
    assert (final.chunks_sent, final.telegram_message_ids) == (1, (100,))
    assert store.rows[after].status == "sent"
    [event] = [e for e in logs if e["event"] == "sender.uncertain"]
    assert (event["chat_id"], event["outbox_id"], event["log_level"]) == (7, row, "warning")


def chat_not_found() -> BadRequest:
    return BadRequest("sendMessage", 400, 400, "Bad Request: chat not found")


@pytest.mark.parametrize(("error", "text"), [(blocked, "blocked"), (chat_not_found, "not found")])
async def test_permanent_errors_fail_at_once(
    autojump_clock: trio.testing.MockClock, error: Callable[[], Exception], text: str
) -> None:
    store, client = MemoryOutbox(), FakeClient()
    row = store.add(3, "hello?")
    client.fail(3, error())
    sender = SenderActor(store, client, settings=NO_SWEEP)
    async with running(sender):
        await store.wait_final()
    assert len(client.attempts) == 1 and trio.current_time() < 1
    assert store.rows[row].status == "failed"
    assert text in (store.rows[row].last_error or "")
    assert sender.gave_up == 0  # not an outage given up: refused


async def test_parse_error_resends_same_chunk_as_plain_text(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store, client = MemoryOutbox(), FakeClient()
    text = "<b>Bold</b> &amp; <i>plain</i>"
    row = store.add(1, text, "HTML", reply_to_message_id=55)
    client.fail(1, parse_error())
    async with running(SenderActor(store, client, settings=NO_SWEEP)):
        await store.wait_final()
    first, second = client.attempts
    assert (first.text, first.parse_mode) == (text, "HTML")
    assert (second.text, second.parse_mode) == ("Bold & plain", None)
    assert first.reply_to == second.reply_to == 55
    assert store.rows[row].status == "sent"
    assert store.rows[row].telegram_message_ids == (100,)


async def test_resume_after_last_delivered_chunk(autojump_clock: trio.testing.MockClock) -> None:
    store, client = MemoryOutbox(), FakeClient()
    settings = SenderSettings(sweep_interval=None, chunk_limit=6)
    row = store.add(
        1,
        "one\n\ntwo\n\nthree",
        status="sending",
        chunks_sent=1,
        telegram_message_ids=(42,),
        attempts=1,
        reply_to_message_id=9,
    )
    async with running(SenderActor(store, client, settings=settings)):
        await store.wait_final()
    assert [(a.text, a.reply_to) for a in client.attempts] == [("two", None), ("three", None)]
    assert store.rows[row].telegram_message_ids == (42, 100, 101)
    assert store.rows[row].status == "sent"


async def test_rows_of_a_chat_in_order_other_chats_concurrently(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store, client = MemoryOutbox(), FakeClient()
    store.add(1, "A")
    store.add(2, "C")
    store.add(1, "B")
    client.fail(1, server_error(), server_error())
    t0 = trio.current_time()
    async with running(SenderActor(store, client, settings=NO_SWEEP)):
        await store.wait_final()
    assert [(a.text, round(a.time - t0, 6)) for a in client.attempts if a.message_id] == [
        ("C", 0),
        ("A", 3),
        ("B", 4),
    ]


async def test_notifications_start_and_extend_workers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store, client = MemoryOutbox(), FakeClient()
    sender = SenderActor(store, client, settings=NO_SWEEP)
    t0 = trio.current_time()
    async with running(sender) as address:
        await trio.sleep(10)
        assert client.attempts == []
        first = store.add(5, "one")
        await address.send(OutboxReady(5))
        await trio.sleep(0.5)
        assert not sender.working(5)  # "one" went out at once, the worker left
        second = store.add(5, "two")
        await address.send(OutboxReady(5))
        await store.wait_final(first, second)
    assert client.delivered(5) == ["one", "two"]
    assert rel(client.times(5), t0) == [10, 11]  # pacing survives the worker's restart


async def test_notification_during_the_workers_last_query_is_not_lost(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store, client = MemoryOutbox(query_delay=1.0), FakeClient()
    first = store.add(4, "one")
    async with running(SenderActor(store, client, settings=NO_SWEEP)) as address:
        await store.wait_final(first)  # t=1: the worker now runs a query that will be empty
        await trio.sleep(0.5)
        second = store.add(4, "two")
        await address.send(OutboxReady(4))
        with trio.fail_after(60):
            await store.wait_final(second)
    assert client.delivered(4) == ["one", "two"]


@attrs.define
class LoggedOutbox(MemoryOutbox):
    """Notes the reads and in-flight marks the sender makes."""

    calls: list[str] = attrs.field(factory=list)

    async def next_pending(self, chat_id: int, limit: int) -> list[OutboxRow]:
        self.calls.append(f"read {chat_id}")
        return await super().next_pending(chat_id, limit)

    async def mark_in_flight(self, row: OutboxRow, chunk: int) -> int | None:
        self.calls.append(f"mark {row.id}")
        return await super().mark_in_flight(row, chunk)


async def test_a_row_claimed_by_the_commit_is_sent_without_reading_it_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store, client = LoggedOutbox(), FakeClient()
    async with running(SenderActor(store, client, settings=NO_SWEEP)) as address:
        store.calls.clear()  # the start-up scan
        # as commit_turn(claim=True): sending, its first chunk in flight
        row = store.add(6, "hello", status="sending", attempts=1, chunk_in_flight=0)
        await address.send(OutboxReady(6, store.rows[row]))
        await store.wait_final(row)
        await trio.sleep(1)  # the worker looks for more after the send, and leaves
    assert client.delivered(6) == ["hello"]
    # no read and no mark before the send (else: read 6, mark 1, send, read 6)
    assert store.calls == ["read 6"]
    assert store.rows[row].status == "sent" and store.rows[row].attempts == 1
    assert store.rows[row].chunk_in_flight is None


async def test_a_claimed_row_of_a_busy_chat_waits_its_turn(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store, client = LoggedOutbox(query_delay=1.0), FakeClient()
    first = store.add(6, "first")
    async with running(SenderActor(store, client, settings=NO_SWEEP)) as address:
        await store.wait_final(first)  # t=1: the worker now runs a query that will be empty
        await trio.sleep(0.5)
        second = store.add(6, "second", status="sending", attempts=1, chunk_in_flight=0)
        await address.send(OutboxReady(6, store.rows[second]))  # the worker is still there
        with trio.fail_after(60):
            await store.wait_final(second)
    assert client.delivered(6) == ["first", "second"]  # once each, in order
    assert store.calls.count(f"read {6}") >= 2  # taken by the running worker, from the store
    assert store.calls.count(f"mark {second}") == 0  # already marked in flight by its commit


async def test_sweep_finds_rows_without_notification(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store, client = MemoryOutbox(), FakeClient()
    async with running(SenderActor(store, client, settings=SenderSettings(sweep_interval=30))):
        t0 = trio.current_time()
        row = store.add(8, "lost notification")
        await store.wait_final(row)
        assert 0 < trio.current_time() - t0 <= 30 + EPS


async def test_empty_reply_is_failed(autojump_clock: trio.testing.MockClock) -> None:
    store, client = MemoryOutbox(), FakeClient()
    row = store.add(1, "  \n ")
    async with running(SenderActor(store, client, settings=NO_SWEEP)):
        await store.wait_final()
    assert store.rows[row].status == "failed"
    assert client.attempts == []


async def test_close_stops_a_backoff_and_a_restart_resumes_the_open_row(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store, client = MemoryOutbox(), FakeClient()
    first, second = store.add(1, "in hand"), store.add(1, "later")
    client.fail(1, server_error())
    async with trio.open_nursery() as nursery:
        address = await nursery.start(SenderActor(store, client, settings=NO_SWEEP).run)
        await trio.sleep(0.5)
        address.close()
    assert trio.current_time() == pytest.approx(0.5)  # did not wait out the 1 s backoff
    assert [store.rows[i].status for i in (first, second)] == ["sending", "pending"]
    assert store.rows[first].chunk_in_flight is None  # known not delivered: no uncertainty
    async with running(SenderActor(store, client, settings=NO_SWEEP)):
        await store.wait_final()
    assert [store.rows[i].status for i in (first, second)] == ["sent", "sent"]
    assert client.delivered(1) == ["in hand", "later"]


async def test_delivered_chunk_is_recorded_despite_cancellation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store, client = MemoryOutbox(record_delay=2.0), FakeClient()
    row = store.add(1, "recorded")
    with trio.move_on_after(1.0):
        async with running(SenderActor(store, client, settings=NO_SWEEP)):
            await trio.sleep_forever()
    assert store.rows[row].telegram_message_ids == (100,)
    assert store.rows[row].status == "sent" and store.rows[row].chunk_in_flight is None


async def test_each_chunk_is_in_flight_during_its_request_and_cleared_by_its_record(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store, client = MemoryOutbox(), FakeClient()
    settings = attrs.evolve(NO_SWEEP, chunk_limit=6)
    row = store.add(1, "one\n\ntwo\n\nthree")
    seen: list[tuple[str, int | None, int]] = []
    client.observe = lambda chat, text: seen.append(
        (text, store.rows[row].chunk_in_flight, store.rows[row].chunks_sent)
    )
    client.fail(1, None, server_error())
    async with running(SenderActor(store, client, settings=settings)):
        await store.wait_final()
    assert seen == [("one", 0, 0), ("two", 1, 1), ("two", 1, 1), ("three", 2, 2)]
    final = store.rows[row]
    assert (final.status, final.chunk_in_flight, final.telegram_message_ids) == (
        "sent",
        None,
        (100, 101, 102),
    )


async def test_rows_left_in_flight_by_an_earlier_process_are_uncertain_and_never_resent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store, client = MemoryOutbox(), FakeClient()
    settings = attrs.evolve(NO_SWEEP, chunk_limit=6)
    cut = store.add(
        1,
        "one\n\ntwo",
        status="sending",
        attempts=2,
        chunks_sent=1,
        telegram_message_ids=(41,),
        chunk_in_flight=1,
    )
    waiting = store.add(2, "not yet tried")
    sender = SenderActor(store, client, settings=settings)
    with structlog.testing.capture_logs() as logs:
        async with running(sender):
            await store.wait_final()
    assert store.rows[cut].status == "uncertain" and client.delivered(1) == []
    assert store.rows[waiting].status == "sent"
    assert sender.ledger.uncertain == 1 and sender.ledger.recovered
    [event] = [e for e in logs if e["event"] == "sender.uncertain"]
    assert (event["outbox_id"], event["chunk"], event["recovered"]) == (cut, 2, True)


async def test_a_restarted_sender_marks_only_what_its_predecessor_had_in_flight(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store, client = MemoryOutbox(), FakeClient()
    ledger = SenderLedger(recovered=True)  # this process's first sender ran, then crashed
    handed = store.add(1, "was being sent", status="sending", attempts=1, chunk_in_flight=0)
    ledger.in_flight.add(handed)
    # committed (claimed by its turn) while the sender was down: never handed to anyone
    claimed = store.add(2, "claimed meanwhile", status="sending", attempts=1, chunk_in_flight=0)
    async with running(SenderActor(store, client, settings=NO_SWEEP, ledger=ledger)):
        await store.wait_final()
    assert store.rows[handed].status == "uncertain" and client.delivered(1) == []
    assert store.rows[claimed].status == "sent" and client.delivered(2) == ["claimed meanwhile"]
    assert ledger.in_flight == set() and ledger.uncertain == 1


# --- real HTTP (strict fake Bot API) + real PostgreSQL -------------------------------------------

FAST = SenderSettings(
    chat_interval=0.0,
    global_rate=1000,
    retry_base=0.01,
    jitter=0.0,
    default_retry_after=0.01,
    sweep_interval=None,
)


async def wait_rows_final(db: dbmod.Database, *row_ids: int) -> list[OutboxRow]:
    with trio.fail_after(15):
        while True:
            rows = [await outbox_row(db, i) for i in row_ids]
            if all(r is not None and r.status not in outbox.OPEN_STATUSES for r in rows):
                return [r for r in rows if r is not None]
            await trio.sleep(0.02)


def long_html() -> str:
    paragraphs = [
        f"<b>Part {i}</b> " + " ".join(f"w{i}_{j} &amp;" for j in range(300)) for i in range(6)
    ]
    return "\n\n".join(paragraphs)


async def test_db_long_reply_chunked_in_order_with_ids(
    db: dbmod.Database, fake: FakeBotApi, bot: BotApiClient
) -> None:
    text = long_html()
    chunks = plan_chunks(text, "HTML").chunks
    assert len(chunks) >= 3
    fake.push_message(42, "question")
    row_id = await outbox.enqueue_reply(db, 42, text, "HTML", reply_to_message_id=1)
    async with running(SenderActor(db, bot, settings=FAST)):
        [row] = await wait_rows_final(db, row_id)
    assert fake.sent_texts(42) == list(chunks)
    sent = fake.sent[42]
    assert [m.parse_mode for m in sent] == ["HTML"] * len(chunks)
    assert [m.reply_to_message_id for m in sent] == [1] + [None] * (len(chunks) - 1)
    assert row.status == "sent" and row.sent_at is not None
    assert row.telegram_message_ids == tuple(m.message_id for m in sent)
    assert row.chunks_sent == len(chunks)
    assert " ".join(m.visible_text for m in sent) == html_to_text(text).replace("\n\n", " ")


async def test_db_unsent_rows_at_start_up_are_sent(
    db: dbmod.Database, fake: FakeBotApi, bot: BotApiClient
) -> None:
    a = await outbox.enqueue_reply(db, 1, "a1")
    b = await outbox.enqueue_reply(db, 2, "b1")
    c = await outbox.enqueue_reply(db, 1, "a2")
    await sending.mark_sending(db, 1, a)  # left in `sending` by a crash before any chunk
    async with running(SenderActor(db, bot, settings=FAST)):
        rows = await wait_rows_final(db, a, b, c)
    assert [r.status for r in rows] == ["sent"] * 3
    assert fake.sent_texts(1) == ["a1", "a2"]
    assert fake.sent_texts(2) == ["b1"]


async def test_db_sending_row_resumes_at_chunk_two(
    db: dbmod.Database, fake: FakeBotApi, bot: BotApiClient
) -> None:
    settings = attrs.evolve(FAST, chunk_limit=20)
    text = "first chunk here\n\nsecond chunk here\n\nthird chunk here"
    chunks = plan_chunks(text, None, 20).chunks
    assert len(chunks) == 3
    row_id = await outbox.enqueue_reply(db, 5, text)
    await sending.mark_sending(db, 5, row_id)
    await sending.mark_in_flight(db, 5, row_id, 0)
    assert await sending.record_chunk_sent(db, 5, row_id, 0, 777)
    async with running(SenderActor(db, bot, settings=settings)):
        [row] = await wait_rows_final(db, row_id)
    assert fake.sent_texts(5) == list(chunks[1:])
    assert row.telegram_message_ids == (777, *(m.message_id for m in fake.sent[5]))
    assert (row.status, row.chunks_sent) == ("sent", 3)


async def test_db_html_rejected_by_telegram_falls_back_to_plain(
    db: dbmod.Database, fake: FakeBotApi, bot: BotApiClient
) -> None:
    text = 'See <a href="https://example.com/?q=a>b">this link</a> now'
    assert plan_chunks(text, "HTML").parse_mode == "HTML"  # valid for us, not for Telegram
    row_id = await outbox.enqueue_reply(db, 6, text, "HTML")
    async with running(SenderActor(db, bot, settings=FAST)):
        [row] = await wait_rows_final(db, row_id)
    first, second = fake.calls_to("sendMessage")
    assert (first.params["parse_mode"], first.status) == ("HTML", 400)
    assert "parse_mode" not in second.params and second.status == 200
    assert fake.sent_texts(6) == ["See this link (https://example.com/?q=a>b) now"]
    assert row.status == "sent" and row.telegram_message_ids == (fake.sent[6][0].message_id,)


async def test_db_notification_retries_blocked_and_uncertain(
    db: dbmod.Database, fake: FakeBotApi, bot: BotApiClient
) -> None:
    async with running(SenderActor(db, bot, settings=FAST)) as address:
        fake.fail_next("sendMessage", Failure.server_error(502), times=2)
        retried = await outbox.enqueue_reply(db, 1, "after two 502s")
        await address.send(OutboxReady(1))
        [row] = await wait_rows_final(db, retried)
        assert row.status == "sent" and row.attempts == 3
        fake.block_chat(2)
        blocked_row = await outbox.enqueue_reply(db, 2, "blocked")
        await address.send(OutboxReady(2))
        [row] = await wait_rows_final(db, blocked_row)
        assert row.status == "failed" and "blocked" in (row.last_error or "")
        fake.fail_next("sendMessage", Failure.reset(deliver=True))
        unsure = await outbox.enqueue_reply(db, 3, "maybe twice")
        await address.send(OutboxReady(3))
        [row] = await wait_rows_final(db, unsure)
        assert row.status == "uncertain" and row.telegram_message_ids == ()
    assert fake.sent_texts(3) == ["maybe twice"]  # delivered once, not resent
    assert [c.params["chat_id"] for c in fake.calls_to("sendMessage")] == [1, 1, 1, 2, 3]


async def test_db_outbox_adapter_is_a_store(db: dbmod.Database) -> None:
    store = DbOutbox(db)
    assert isinstance(store, OutboxStore)
    row_id = await outbox.enqueue_reply(db, 9, "x")
    assert await store.chats_with_pending() == [9]
    assert [r.id for r in await store.next_pending(9, 10)] == [row_id]
