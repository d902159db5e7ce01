"""The group-committing inbox writer against a real PostgreSQL (with a gate to shape batches)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from actors.queues import inbox
from actors.queues.inbox_writer import InboxWriter
from runtime import db as dbmod
from runtime.errors import DatabaseError, DatabaseUnavailable, QueryError


def payload(update_id: int, chat_id: int = 1) -> dict[str, Any]:
    return {
        "update_id": update_id,
        "message": {"message_id": update_id, "chat": {"id": chat_id}, "text": f"m{update_id}"},
    }


@attrs.define
class GatedDb:
    """The real database; the N-th ``fetch`` (one per batch) may wait on a gate or fail."""

    real: dbmod.Database
    gates: dict[int, trio.Event] = attrs.field(factory=dict)
    failures: dict[int, Exception] = attrs.field(factory=dict)
    fail_keys: set[str] = attrs.field(factory=set)
    batches: list[list[str]] = attrs.field(factory=list)
    entered: trio.Event = attrs.field(factory=trio.Event)

    async def fetch(self, query: str, *args: Any) -> list[Any]:
        n = len(self.batches)
        self.batches.append(list(args[0]))
        self.entered.set()
        if n in self.gates:
            await self.gates[n].wait()
        if n in self.failures:
            raise self.failures[n]
        if self.fail_keys & set(args[0]):
            raise QueryError("DataError: injected bad row", sqlstate="22000")
        return await self.real.fetch(query, *args)

    async def execute(self, query: str, *args: Any) -> str:
        return await self.real.execute(query, *args)

    async def fetchrow(self, query: str, *args: Any) -> Any:
        return await self.real.fetchrow(query, *args)

    async def fetchval(self, query: str, *args: Any) -> Any:
        return await self.real.fetchval(query, *args)

    async def executemany(self, query: str, args: Sequence[Sequence[Any]]) -> None:
        await self.real.executemany(query, args)


@asynccontextmanager
async def running(db: Any, **kwargs: Any) -> AsyncIterator[InboxWriter]:
    async with trio.open_nursery() as nursery:
        writer: InboxWriter = await nursery.start(InboxWriter(db, **kwargs).run)
        yield writer
        await writer.aclose()


async def insert(writer: InboxWriter, update_id: int, out: dict[int, Any], key: Any = None) -> None:
    """Insert one update; record its row id or the exception in ``out[update_id]``."""
    try:
        out[update_id] = await writer.insert_update(
            key or f"update:{update_id}", update_id, 1, "message", payload(update_id)
        )
    except (DatabaseError, ValueError) as exc:
        out[update_id] = exc


async def stored_keys(db: dbmod.Database) -> list[str]:
    return [r["update_key"] for r in await db.fetch("SELECT update_key FROM inbox ORDER BY id")]


async def test_concurrent_inserts_share_statements_and_each_gets_its_row(
    db: dbmod.Database,
) -> None:
    gated = GatedDb(db, gates={0: trio.Event()})
    out: dict[int, Any] = {}
    async with running(gated) as writer, trio.open_nursery() as nursery:
        nursery.start_soon(insert, writer, 0, out)
        await gated.entered.wait()  # batch 0 (one update) is in flight and held
        for i in range(1, 51):
            nursery.start_soon(insert, writer, i, out)
        await trio.testing.wait_all_tasks_blocked()
        gated.gates[0].set()
    assert [len(b) for b in gated.batches] == [1, 50]
    assert sorted(out) == list(range(51))
    ids = [out[i] for i in range(51)]
    assert all(isinstance(i, int) for i in ids) and len(set(ids)) == 51
    rows = await db.fetch("SELECT id, update_key, status, chat_id FROM inbox ORDER BY id")
    assert [r["id"] for r in rows] == sorted(ids)
    assert {r["status"] for r in rows} == {"pending"}
    # within a batch, ids follow the queue order
    in_queue_order = [out[int(key.split(":")[1])] for key in gated.batches[1]]
    assert in_queue_order == sorted(in_queue_order)
    row = await inbox.get(db, 1, out[7])
    assert row is not None and row.update_key == "update:7" and row.payload == payload(7)


async def test_batches_are_capped(db: dbmod.Database) -> None:
    gated = GatedDb(db, gates={0: trio.Event()})
    out: dict[int, Any] = {}
    async with running(gated, max_batch=4) as writer, trio.open_nursery() as nursery:
        nursery.start_soon(insert, writer, 0, out)
        await gated.entered.wait()
        for i in range(1, 11):
            nursery.start_soon(insert, writer, i, out)
        await trio.testing.wait_all_tasks_blocked()
        gated.gates[0].set()
    assert [len(b) for b in gated.batches] == [1, 4, 4, 2]
    assert len(await stored_keys(db)) == 11


async def test_duplicates_within_one_batch_and_across_batches(db: dbmod.Database) -> None:
    gated = GatedDb(db, gates={0: trio.Event()})
    out: dict[int, Any] = {}
    async with running(gated) as writer:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(insert, writer, 1, out, "update:1")
            await gated.entered.wait()
            # the same key three times in the next batch, plus a fresh one
            nursery.start_soon(insert, writer, 2, out, "update:2")
            nursery.start_soon(insert, writer, 3, out, "update:2")
            nursery.start_soon(insert, writer, 4, out, "update:1")
            nursery.start_soon(insert, writer, 5, out, "update:2")
            await trio.testing.wait_all_tasks_blocked()
            gated.gates[0].set()
        # one statement for the four of them, each key sent once
        assert len(gated.batches) == 2 and sorted(gated.batches[1]) == ["update:1", "update:2"]
        assert isinstance(out[1], int)
        assert out[4] is None  # update:1 was stored by the batch before
        # update:2 three times in one batch: whichever was queued first stores it
        same_batch = [out[2], out[3], out[5]]
        assert sum(isinstance(x, int) for x in same_batch) == 1
        assert same_batch.count(None) == 2
        # and a later batch
        assert await writer.insert_update("update:2", 2, 1, "message", payload(2)) is None
    assert await stored_keys(db) == ["update:1", "update:2"]


async def test_database_error_fails_only_its_batch(db: dbmod.Database) -> None:
    gated = GatedDb(
        db, gates={0: trio.Event()}, failures={1: DatabaseUnavailable("connection lost")}
    )
    out: dict[int, Any] = {}
    async with running(gated) as writer:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(insert, writer, 0, out)
            await gated.entered.wait()
            for i in (1, 2, 3):
                nursery.start_soon(insert, writer, i, out)
            await trio.testing.wait_all_tasks_blocked()
            gated.gates[0].set()
        assert isinstance(out[0], int)
        for i in (1, 2, 3):
            assert isinstance(out[i], DatabaseUnavailable)
            assert "connection lost" in str(out[i])
        assert out[1] is not out[2]  # each request raises its own exception object
        # the writer carries on: a retry gets through
        await insert(writer, 2, out)
        assert isinstance(out[2], int)
    assert await stored_keys(db) == ["update:0", "update:2"]


async def test_a_bad_row_does_not_take_its_batch_down(db: dbmod.Database) -> None:
    gated = GatedDb(db, gates={0: trio.Event()}, fail_keys={"update:2"})
    out: dict[int, Any] = {}
    async with running(gated) as writer, trio.open_nursery() as nursery:
        nursery.start_soon(insert, writer, 0, out)
        await gated.entered.wait()
        for i in (1, 2, 3):
            nursery.start_soon(insert, writer, i, out)
        await trio.testing.wait_all_tasks_blocked()
        gated.gates[0].set()
    assert isinstance(out[2], QueryError)
    assert all(isinstance(out[i], int) for i in (0, 1, 3))
    assert sorted(await stored_keys(db)) == ["update:0", "update:1", "update:3"]


async def test_real_database_error_reaches_every_waiter(db: dbmod.Database) -> None:
    await db.execute("ALTER TABLE inbox RENAME TO inbox_gone")
    out: dict[int, Any] = {}
    async with running(db) as writer, trio.open_nursery() as nursery:
        for i in range(5):
            nursery.start_soon(insert, writer, i, out)
    assert all(isinstance(out[i], DatabaseError) for i in range(5))
    await db.execute("ALTER TABLE inbox_gone RENAME TO inbox")


async def test_cancelled_waiters_do_not_lose_the_others(db: dbmod.Database) -> None:
    gated = GatedDb(db, gates={0: trio.Event(), 1: trio.Event()})
    out: dict[int, Any] = {}
    async with running(gated) as writer:
        async with trio.open_nursery() as nursery:
            in_flight = trio.CancelScope()
            queued = trio.CancelScope()

            async def cancellable(scope: trio.CancelScope, update_id: int) -> None:
                with scope:
                    await insert(writer, update_id, out)

            nursery.start_soon(cancellable, in_flight, 0)
            nursery.start_soon(insert, writer, 1, out)
            await gated.entered.wait()  # batch 0 = updates 0 and 1, held
            nursery.start_soon(cancellable, queued, 2)
            nursery.start_soon(insert, writer, 3, out)
            await trio.testing.wait_all_tasks_blocked()
            in_flight.cancel()  # its batch is in flight: the batch goes on
            queued.cancel()  # still queued: dropped before it is written
            await trio.testing.wait_all_tasks_blocked()
            gated.gates[0].set()
            gated.gates[1].set()
        assert [sorted(b) for b in gated.batches] == [["update:0", "update:1"], ["update:3"]]
        assert 0 not in out and 2 not in out
        assert isinstance(out[1], int) and isinstance(out[3], int)
    # the cancelled request's row is stored (unacknowledged: Telegram's retry is a duplicate)
    assert sorted(await stored_keys(db)) == ["update:0", "update:1", "update:3"]


async def test_stopping_fails_waiters_and_later_calls(db: dbmod.Database) -> None:
    gated = GatedDb(db, gates={0: trio.Event()})
    out: dict[int, Any] = {}
    async with trio.open_nursery() as outer:
        writer_scope = trio.CancelScope()

        async def run_writer(*, task_status: trio.TaskStatus[InboxWriter]) -> None:
            with writer_scope:
                await InboxWriter(gated).run(task_status=task_status)

        writer: InboxWriter = await outer.start(run_writer)
        outer.start_soon(insert, writer, 0, out)
        await gated.entered.wait()
        outer.start_soon(insert, writer, 1, out)
        await trio.testing.wait_all_tasks_blocked()
        writer_scope.cancel()  # shutdown: in flight and queued both get an answer
    assert isinstance(out[0], DatabaseUnavailable) and isinstance(out[1], DatabaseUnavailable)
    with pytest.raises(DatabaseUnavailable):
        await writer.insert_update("update:9", 9, 1, "message", payload(9))


async def test_aclose_writes_what_is_queued_first(db: dbmod.Database) -> None:
    out: dict[int, Any] = {}
    async with trio.open_nursery() as nursery:
        writer: InboxWriter = await nursery.start(InboxWriter(db).run)
        for i in range(3):
            nursery.start_soon(insert, writer, i, out)
        await trio.testing.wait_all_tasks_blocked()
        await writer.aclose()
    assert all(isinstance(out[i], int) for i in range(3))
    with pytest.raises(DatabaseUnavailable):
        await writer.insert_update("update:9", 9, 1, "message", payload(9))


async def test_unstorable_updates_fail_before_any_io(db: dbmod.Database) -> None:
    gated = GatedDb(db)
    async with running(gated) as writer:
        with pytest.raises(ValueError):
            await writer.insert_update("update:1", 2**63, 1, "message", payload(1))
        with pytest.raises(ValueError):
            await writer.insert_update("update:1", 1, 1, "message", {"x": float("nan")})
    assert gated.batches == []


async def test_insert_updates_direct(db: dbmod.Database) -> None:
    news = [
        inbox.new_update("update:1", 1, 5, "message", payload(1)),
        inbox.new_update("update:2", 2, 5, "message", payload(2)),
        inbox.new_update("update:1", 1, 5, "message", payload(1)),
    ]
    ids = await inbox.insert_updates(db, news)
    assert isinstance(ids[0], int) and isinstance(ids[1], int) and ids[0] < ids[1]
    assert ids[2] is None
    assert await inbox.insert_updates(db, news[:1]) == [None]
    assert await inbox.insert_updates(db, []) == []
    # the same object twice: only its first occurrence is the insert
    again = inbox.new_update("update:3", 3, 5, "message", payload(3))
    first, second = await inbox.insert_updates(db, [again, again])
    assert isinstance(first, int) and second is None
