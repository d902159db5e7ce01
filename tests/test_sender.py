"""SenderActor: timing on a MockClock with in-memory fakes; delivery over real HTTP + PostgreSQL."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import attrs
import pytest
import structlog
import trio
import trio.testing
from fakes.bot_api import Failure, FakeBotApi, run_fake_bot_api

from actors.queues import outbox
from actors.queues.outbox import OutboxRow
from actors.sender import (
    DbOutbox,
    MessageClient,
    OutboxReady,
    OutboxStore,
    SenderActor,
    SenderSettings,
    SlidingWindowLimiter,
    plain_fallback,
    plan_chunks,
)
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

EPS = 1e-6
NO_SWEEP = SenderSettings(sweep_interval=None)


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
        base = dict(id=row_id, chat_id=chat_id, text=text, parse_mode=parse_mode,
                    reply_to_message_id=None, inbox_ids=(), status="pending", attempts=0,
                    last_error=None, chunks_sent=0, telegram_message_ids=(),
                    created_at=datetime.now(UTC), sent_at=None)  # fmt: skip
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

    async def next_pending_claimed(
        self, chat_id: int, limit: int
    ) -> tuple[list[OutboxRow], int | None]:
        rows = await self.next_pending(chat_id, limit)
        if not rows:
            return rows, None
        claimed = rows[0].id if await self.mark_sending(rows[0].id) is not None else None
        return rows, claimed

    async def mark_sending(self, row_id: int) -> int | None:
        await trio.lowlevel.checkpoint()
        row = self.rows[row_id]
        return row.attempts + 1 if self._update(row_id, status="sending",
                                                attempts=row.attempts + 1) else None  # fmt: skip

    async def record_chunk_sent(self, row_id: int, telegram_message_id: int) -> int | None:
        await trio.sleep(self.record_delay)
        row = self.rows[row_id]
        ids = (*row.telegram_message_ids, telegram_message_id)
        ok = self._update(row_id, chunks_sent=row.chunks_sent + 1, telegram_message_ids=ids)
        return self.rows[row_id].chunks_sent if ok else None

    async def mark_sent(self, row_id: int) -> bool:
        await trio.lowlevel.checkpoint()
        return self._update(row_id, status="sent", last_error=None)

    async def mark_failed(self, row_id: int, error: str) -> bool:
        await trio.lowlevel.checkpoint()
        return self._update(row_id, status="failed", last_error=error)

    async def mark_uncertain(self, row_id: int, error: str) -> bool:
        await trio.lowlevel.checkpoint()
        return self._update(row_id, status="uncertain", last_error=error)


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
    ) -> int:
        assert isinstance(chat_id, int)
        now = trio.current_time()
        await trio.lowlevel.checkpoint()
        queue = self.script.get(chat_id)
        error = queue.popleft() if queue else None
        message_id = None if error is not None else self._next_id
        self.attempts.append(Attempt(now, chat_id, text, parse_mode, reply_to_message_id,
                                     message_id))  # fmt: skip
        if error is not None:
            raise error
        self._next_id += 1
        assert utf16_len(visible_text(text) if parse_mode == "HTML" else text) <= 4096
        return self._next_id - 1


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
        SenderSettings(retry_delays=(1.0, -1.0))


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
async def test_backoff_1_2_4_then_row_failed(
    autojump_clock: trio.testing.MockClock, error: Callable[[], Exception]
) -> None:
    store, client = MemoryOutbox(), FakeClient()
    first, second = store.add(1, "doomed"), store.add(1, "next")
    client.fail(1, *(error() for _ in range(4)))
    t0 = trio.current_time()
    async with running(SenderActor(store, client, settings=NO_SWEEP)):
        await store.wait_final()
    assert rel(client.times(1), t0) == [0, 1, 3, 7, 8]
    assert store.rows[first].status == "failed"
    assert "gave up after 4 attempts" in (store.rows[first].last_error or "")
    assert store.rows[first].attempts == 4
    assert store.rows[second].status == "sent"
    assert client.delivered(1) == ["next"]


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


async def test_forbidden_fails_without_retry(autojump_clock: trio.testing.MockClock) -> None:
    store, client = MemoryOutbox(), FakeClient()
    row = store.add(3, "hello?")
    client.fail(3, blocked())
    async with running(SenderActor(store, client, settings=NO_SWEEP)):
        await store.wait_final()
    assert len(client.attempts) == 1
    assert store.rows[row].status == "failed"
    assert "blocked" in (store.rows[row].last_error or "")


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
    row = store.add(1, "one\n\ntwo\n\nthree", status="sending", chunks_sent=1,
                    telegram_message_ids=(42,), attempts=1, reply_to_message_id=9)  # fmt: skip
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
        assert sender.active_chats == frozenset()  # "one" went out at once, the worker left
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
    """Notes the reads and claims the sender makes."""

    calls: list[str] = attrs.field(factory=list)

    async def next_pending(self, chat_id: int, limit: int) -> list[OutboxRow]:
        self.calls.append(f"read {chat_id}")
        return await super().next_pending(chat_id, limit)

    async def mark_sending(self, row_id: int) -> int | None:
        self.calls.append(f"claim {row_id}")
        return await super().mark_sending(row_id)


async def test_a_row_claimed_by_the_commit_is_sent_without_reading_it_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store, client = LoggedOutbox(), FakeClient()
    async with running(SenderActor(store, client, settings=NO_SWEEP)) as address:
        store.calls.clear()  # the start-up scan
        row = store.add(6, "hello", status="sending", attempts=1)  # as commit_turn(claim=True)
        await address.send(OutboxReady(6, store.rows[row]))
        await store.wait_final(row)
        await trio.sleep(1)  # the worker looks for more after the send, and leaves
    assert client.delivered(6) == ["hello"]
    # no read and no claim before the send (else: read 6, claim 1, send, read 6)
    assert store.calls == ["read 6"]
    assert store.rows[row].status == "sent" and store.rows[row].attempts == 1


async def test_a_claimed_row_of_a_busy_chat_waits_its_turn(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store, client = LoggedOutbox(query_delay=1.0), FakeClient()
    first = store.add(6, "first")
    async with running(SenderActor(store, client, settings=NO_SWEEP)) as address:
        await store.wait_final(first)  # t=1: the worker now runs a query that will be empty
        await trio.sleep(0.5)
        second = store.add(6, "second", status="sending", attempts=1)
        await address.send(OutboxReady(6, store.rows[second]))  # the worker is still there
        with trio.fail_after(60):
            await store.wait_final(second)
    assert client.delivered(6) == ["first", "second"]  # once each, in order
    assert store.calls.count(f"claim {second}") == 1  # taken by the running worker


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


async def test_close_finishes_row_in_hand_and_returns(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store, client = MemoryOutbox(), FakeClient()
    first, second = store.add(1, "in hand"), store.add(1, "later")
    client.fail(1, server_error())
    async with trio.open_nursery() as nursery:
        address = await nursery.start(SenderActor(store, client, settings=NO_SWEEP).run)
        await trio.sleep(0.5)
        address.close()
    assert trio.current_time() == pytest.approx(1.0)  # run returned after the retry at 1 s
    assert (store.rows[first].status, store.rows[second].status) == ("sent", "pending")


async def test_delivered_chunk_is_recorded_despite_cancellation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store, client = MemoryOutbox(record_delay=2.0), FakeClient()
    row = store.add(1, "recorded")
    with trio.move_on_after(1.0):
        async with running(SenderActor(store, client, settings=NO_SWEEP)):
            await trio.sleep_forever()
    assert store.rows[row].telegram_message_ids == (100,)
    assert store.rows[row].status == "sending"  # resumes after the chunk: never resent


# --- real HTTP (strict fake Bot API) + real PostgreSQL -------------------------------------------

FAST = SenderSettings(
    chat_interval=0.0,
    global_rate=1000,
    retry_delays=(0.01, 0.02, 0.04),
    default_retry_after=0.01,
    sweep_interval=None,
)


@pytest.fixture
async def fake() -> AsyncIterator[FakeBotApi]:
    async with run_fake_bot_api() as server:
        yield server


@pytest.fixture
async def bot(fake: FakeBotApi) -> AsyncIterator[BotApiClient]:
    async with BotApiClient(fake.token, base_url=fake.base_url, timeout=5.0) as client:
        yield client


async def wait_rows_final(db: dbmod.Database, *row_ids: int) -> list[OutboxRow]:
    with trio.fail_after(15):
        while True:
            rows = [await outbox.get(db, i) for i in row_ids]
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
    await outbox.mark_sending(db, a)  # left in `sending` by a crash before any chunk
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
    await outbox.mark_sending(db, row_id)
    await outbox.record_chunk_sent(db, row_id, 777)
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
