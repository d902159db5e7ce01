"""The sender under faults, through the real database and the strict fake Bot API: a process
killed between a send and its record, database errors on the record, the in-flight mark
committed before the request, outages and deadlines (scaled-down delays; the MockClock versions
with in-memory fakes are in test_sender.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import structlog
import trio
from fakes.bot_api import Failure, FakeBotApi
from queue_rows import outbox_row

from actors.queues import outbox
from actors.queues.outbox import OutboxRow
from actors.sender.actor import OutboxReady, SenderActor
from actors.sender.policy import SenderSettings
from actors.sender.store import DbOutbox
from actors.telegram.client import BotApiClient
from runtime import db as dbmod
from runtime.actor import Address
from runtime.errors import DatabaseUnavailable, leaf_exceptions

FAST = SenderSettings(
    chat_interval=0.0,
    global_rate=1000,
    retry_base=0.01,
    jitter=0.0,
    default_retry_after=0.01,
    sweep_interval=None,
    db_retry_base=0.01,
    record_timeout=0.5,
)


class Killed(BaseException):
    """Stands for the process dying: nothing in engram catches it."""


@asynccontextmanager
async def running(sender: SenderActor) -> AsyncIterator[Address[OutboxReady]]:
    async with trio.open_nursery() as nursery:
        address = await nursery.start(sender.run)
        yield address
        nursery.cancel_scope.cancel()


async def wait_final(db: dbmod.Database, row_id: int) -> OutboxRow:
    with trio.fail_after(15):
        while True:
            row = await outbox_row(db, row_id)
            if row is not None and row.status not in outbox.OPEN_STATUSES:
                return row
            await trio.sleep(0.02)


@attrs.frozen
class DyingOnRecord(DbOutbox):
    """The process dies right after Telegram answered, before the chunk is recorded."""

    async def record_chunk_sent(
        self, row: OutboxRow, chunk: int, telegram_message_id: int, *, last: bool
    ) -> bool:
        raise Killed


@attrs.define
class FlakyRecord:
    """An OutboxStore whose record step fails ``failures`` times, before or after its write."""

    inner: DbOutbox
    failures: int
    after_write: bool = False
    calls: int = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def record_chunk_sent(
        self, row: OutboxRow, chunk: int, telegram_message_id: int, *, last: bool
    ) -> bool:
        self.calls += 1
        if self.calls <= self.failures:
            if self.after_write:  # committed, but the answer was lost with the connection
                await self.inner.record_chunk_sent(row, chunk, telegram_message_id, last=last)
            raise DatabaseUnavailable("connection lost")
        return await self.inner.record_chunk_sent(row, chunk, telegram_message_id, last=last)

    # the Protocol's other methods, spelled out for isinstance(OutboxStore)
    async def chats_with_pending(self) -> list[int]:
        return await self.inner.chats_with_pending()

    async def next_pending(self, chat_id: int, limit: int) -> list[OutboxRow]:
        return await self.inner.next_pending(chat_id, limit)

    async def mark_in_flight(self, row: OutboxRow, chunk: int) -> int | None:
        return await self.inner.mark_in_flight(row, chunk)

    async def release_in_flight(self, row: OutboxRow, chunk: int, error: str) -> bool:
        return await self.inner.release_in_flight(row, chunk, error)

    async def recover_in_flight(self, row_ids: Sequence[int] | None) -> list[OutboxRow]:
        return await self.inner.recover_in_flight(row_ids)

    async def mark_failed(self, row: OutboxRow, error: str) -> bool:
        return await self.inner.mark_failed(row, error)

    async def mark_uncertain(self, row: OutboxRow, error: str) -> bool:
        return await self.inner.mark_uncertain(row, error)


async def test_kill_between_send_and_record_leaves_the_chunk_uncertain_never_resent(
    db: dbmod.Database, fake: FakeBotApi, bot: BotApiClient
) -> None:
    settings = attrs.evolve(FAST, chunk_limit=20)
    text = "first chunk here\n\nsecond chunk here"
    row_id = await outbox.enqueue_reply(db, 7, text)
    with pytest.raises(BaseExceptionGroup) as killed:
        async with running(SenderActor(DyingOnRecord(db), bot, settings=settings)):
            await trio.sleep_forever()
    assert [type(e) for e in leaf_exceptions(killed.value)] == [Killed]
    assert fake.sent_texts(7) == ["first chunk here"]  # Telegram has it; we never recorded it
    row = await outbox_row(db, row_id)
    assert row is not None and (row.status, row.chunk_in_flight, row.chunks_sent) == (
        "sending",
        0,
        0,
    )
    # the next process: its sender finds the chunk in flight
    restarted = SenderActor(db, bot, settings=settings)
    with structlog.testing.capture_logs() as logs:
        async with running(restarted):
            row = await wait_final(db, row_id)
    assert row.status == "uncertain" and "in flight" in (row.last_error or "")
    assert fake.sent_texts(7) == ["first chunk here"]  # not resent, and not continued
    assert restarted.ledger.uncertain == 1
    assert [e["outbox_id"] for e in logs if e["event"] == "sender.uncertain"] == [row_id]


@pytest.mark.parametrize("after_write", [False, True], ids=["before-commit", "after-commit"])
async def test_a_database_error_on_record_is_retried_without_crash_or_resend(
    db: dbmod.Database, fake: FakeBotApi, bot: BotApiClient, after_write: bool
) -> None:
    store = FlakyRecord(DbOutbox(db), failures=2, after_write=after_write)
    row_id = await outbox.enqueue_reply(db, 8, "recorded once")
    with structlog.testing.capture_logs() as logs:
        sender = SenderActor(store, bot, settings=FAST)
        async with running(sender):
            row = await wait_final(db, row_id)
            while sender.working(8):  # noqa: ASYNC110 - the worker may still be retrying
                await trio.sleep(0.01)
    assert fake.sent_texts(8) == ["recorded once"]
    assert (row.status, row.chunks_sent, row.chunk_in_flight) == ("sent", 1, None)
    assert row.telegram_message_ids == (fake.sent[8][0].message_id,)  # one id, not three
    assert store.calls == 3
    retries = [e for e in logs if e["event"] == "sender.db_retrying"]
    assert [(e["step"], e["attempt"]) for e in retries] == [("record", 1), ("record", 2)]


@attrs.define
class Watching:
    """A MessageClient that reads the row from another connection as each request starts."""

    client: BotApiClient
    db: dbmod.Database
    row_id: int
    seen: list[tuple[int | None, str]] = attrs.field(factory=list)

    async def send_message(
        self,
        chat_id: int | str,
        text: str,
        parse_mode: str | None = None,
        *,
        reply_to_message_id: int | None = None,
        reply_markup: Mapping[str, Any] | None = None,
    ) -> int:
        row = await outbox_row(self.db, self.row_id)  # a pool connection: committed data only
        assert row is not None
        self.seen.append((row.chunk_in_flight, row.status))
        return await self.client.send_message(
            chat_id,
            text,
            parse_mode,
            reply_to_message_id=reply_to_message_id,
            reply_markup=reply_markup,
        )

    async def edit_message_text(
        self,
        chat_id: int | str,
        message_id: int,
        text: str,
        parse_mode: str | None = None,
        *,
        reply_markup: Mapping[str, Any] | None = None,
    ) -> None:
        await self.client.edit_message_text(
            chat_id, message_id, text, parse_mode, reply_markup=reply_markup
        )

    async def edit_message_reply_markup(
        self, chat_id: int | str, message_id: int, reply_markup: Mapping[str, Any] | None = None
    ) -> None:
        await self.client.edit_message_reply_markup(chat_id, message_id, reply_markup)


async def test_the_in_flight_mark_is_committed_before_each_request(
    db: dbmod.Database, fake: FakeBotApi, bot: BotApiClient
) -> None:
    settings = attrs.evolve(FAST, chunk_limit=20)
    watching = Watching(bot, db, 1)
    async with running(SenderActor(db, watching, settings=settings)) as address:
        # as a turn's commit claims it: sending, first chunk in flight, committed with the turn
        row = await outbox.commit_turn(
            db, chat_id=9, text="first chunk here\n\nsecond chunk here", inbox_ids=[], claim=True
        )
        assert (row.id, row.status, row.attempts, row.chunk_in_flight) == (1, "sending", 1, 0)
        await address.send(OutboxReady(9, row))
        final = await wait_final(db, row.id)
    assert watching.seen == [(0, "sending"), (1, "sending")]
    assert (final.status, final.chunk_in_flight, final.attempts) == ("sent", None, 2)
    assert fake.sent_texts(9) == ["first chunk here", "second chunk here"]


@pytest.mark.slow
async def test_an_outage_of_5xx_and_429_is_waited_out_then_sent_once(
    db: dbmod.Database, fake: FakeBotApi, bot: BotApiClient
) -> None:
    fake.fail_next("sendMessage", Failure.rate_limited(1), times=2)
    fake.fail_next("sendMessage", Failure.server_error(503), times=6)
    row_id = await outbox.enqueue_reply(db, 10, "after the storm")
    sender = SenderActor(db, bot, settings=FAST)
    async with running(sender):  # the start-up sweep finds the row
        row = await wait_final(db, row_id)
    statuses = [c.status for c in fake.calls_to("sendMessage")]
    assert statuses == [429, 429] + [503] * 6 + [200]
    assert fake.sent_texts(10) == ["after the storm"]
    assert (row.status, row.attempts, row.chunk_in_flight) == ("sent", 9, None)
    assert sender.gave_up == 0


async def test_past_the_deadline_a_retryable_failure_fails_the_row_and_is_counted(
    db: dbmod.Database, fake: FakeBotApi, bot: BotApiClient
) -> None:
    old = await outbox.enqueue_reply(db, 11, "sent too late")
    yesterday = "UPDATE outbox SET created_at = created_at - interval '25 hours' WHERE id = $1"
    await db.execute(yesterday, old)
    fresh = await outbox.enqueue_reply(db, 11, "in time")
    fake.fail_next("sendMessage", Failure.server_error(502), times=2)
    sender = SenderActor(db, bot, settings=attrs.evolve(FAST, deadline=86_400.0))
    with structlog.testing.capture_logs() as logs:
        async with running(sender):
            failed = await wait_final(db, old)
            sent = await wait_final(db, fresh)
    assert failed.status == "failed" and "at the deadline" in (failed.last_error or "")
    assert sent.status == "sent" and fake.sent_texts(11) == ["in time"]  # waited out its 502
    assert sender.gave_up == 1
    assert [e["outbox_id"] for e in logs if e["event"] == "sender.gave_up"] == [old]
