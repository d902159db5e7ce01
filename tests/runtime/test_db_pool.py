"""The trio-side connection pool: reuse, bound, dropping, closing (in-memory connections),
and what it does with real asyncpg connections behind :class:`runtime.db.Database`."""

from __future__ import annotations

import attrs
import pytest
import trio

from runtime import db as dbmod
from runtime import errors
from runtime.db_pool import ConnectionPool


@attrs.define(eq=False)
class FakeRaw:
    n: int
    closed: bool = False
    terminated: bool = False

    def is_closed(self) -> bool:
        return self.closed

    def terminate(self) -> None:
        self.terminated = self.closed = True


@attrs.define
class Opener:
    opened: list[FakeRaw] = attrs.field(factory=list)
    closed: list[FakeRaw] = attrs.field(factory=list)
    fail: bool = False

    async def connect(self) -> FakeRaw:
        await trio.lowlevel.checkpoint()
        if self.fail:
            raise errors.DatabaseUnavailable("refused")
        raw = FakeRaw(len(self.opened))
        self.opened.append(raw)
        return raw

    async def close(self, raw: FakeRaw) -> None:
        await trio.lowlevel.checkpoint()
        raw.closed = True
        self.closed.append(raw)


def make_pool(opener: Opener, max_size: int = 2) -> ConnectionPool[FakeRaw]:
    return ConnectionPool(opener.connect, opener.close, max_size=max_size)


async def test_an_idle_connection_is_reused_newest_first() -> None:
    opener = Opener()
    pool = make_pool(opener)
    a, b = await pool.acquire(), await pool.acquire()
    pool.release(a, reusable=True)
    pool.release(b, reusable=True)
    assert await pool.acquire() is b  # the warmest one
    assert len(opener.opened) == 2 and pool.size == 2 and pool.idle == 1


async def test_at_most_max_size_are_out_and_waiters_are_served_in_order() -> None:
    opener = Opener()
    pool = make_pool(opener, max_size=1)
    first = await pool.acquire()
    got: list[str] = []

    async def waiter(name: str) -> None:
        raw = await pool.acquire()
        got.append(name)
        pool.release(raw, reusable=True)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter, "x")
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(waiter, "y")
        await trio.testing.wait_all_tasks_blocked()
        assert got == []  # both wait for the only connection
        pool.release(first, reusable=True)
    assert got == ["x", "y"] and len(opener.opened) == 1


async def test_a_connection_not_reusable_is_terminated_and_replaced() -> None:
    opener = Opener()
    pool = make_pool(opener, max_size=1)
    raw = await pool.acquire()
    pool.release(raw, reusable=False)
    assert raw.terminated and pool.size == 0
    fresh = await pool.acquire()
    assert fresh is not raw and len(opener.opened) == 2


async def test_a_connection_closed_while_idle_is_skipped() -> None:
    opener = Opener()
    pool = make_pool(opener)
    await pool.fill(2)
    assert pool.idle == 2
    opener.opened[1].closed = True  # e.g. the server restarted
    assert await pool.acquire() is opener.opened[0]
    assert pool.size == 1


async def test_a_failed_connect_gives_the_slot_back() -> None:
    opener = Opener(fail=True)
    pool = make_pool(opener, max_size=1)
    for _ in range(3):
        with pytest.raises(errors.DatabaseUnavailable):
            await pool.acquire()
    opener.fail = False
    assert (await pool.acquire()).n == 0


async def test_close_closes_idle_terminates_busy_and_refuses_more() -> None:
    opener = Opener()
    pool = make_pool(opener)
    busy, idle = await pool.acquire(), await pool.acquire()
    pool.release(idle, reusable=True)
    await pool.close()
    assert opener.closed == [idle] and busy.terminated and not idle.terminated
    with pytest.raises(errors.DatabaseUnavailable, match="closed"):
        await pool.acquire()
    pool.release(busy, reusable=True)  # a late release neither raises nor keeps it
    assert pool.idle == 0


def test_max_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_size"):
        make_pool(Opener(), max_size=0)


# --- behind Database, with real asyncpg connections -----------------------------------------


async def _backends(db: dbmod.Database, text: str) -> int:
    count: int = await db.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE query LIKE $1 AND pid <> pg_backend_pid()",
        f"%{text}%",
    )
    return count


async def test_a_refused_statement_keeps_its_connection(database_url: str) -> None:
    async with dbmod.asyncio_loop(), dbmod.open_database(database_url, max_size=1) as db:
        pid = await db.fetchval("SELECT pg_backend_pid()")
        with pytest.raises(errors.QueryError):
            await db.execute("SELEC 1")
        assert await db.fetchval("SELECT pg_backend_pid()") == pid


async def test_a_cancelled_statement_is_stopped_on_the_server(database_url: str) -> None:
    async with dbmod.asyncio_loop(), dbmod.open_database(database_url, max_size=2) as db:
        with trio.move_on_after(0.3):
            await db.execute("SELECT pg_sleep(30) /* cancelled-one-shot */")
        # asyncpg's cancel request ended it (the connection was reset and kept, not cut off
        # with the statement still running on the server)
        assert await _backends(db, "pg_sleep(30) /* cancelled-one-shot */") == 0
        assert await db.fetchval("SELECT 6 * 7") == 42


async def test_a_connection_the_server_closed_is_replaced(database_url: str) -> None:
    async with dbmod.asyncio_loop(), dbmod.open_database(database_url, max_size=1) as db:
        pid = await db.fetchval("SELECT pg_backend_pid()")
        async with dbmod.open_database(database_url, max_size=1) as other:
            assert await other.fetchval("SELECT pg_terminate_backend($1)", pid)
        with trio.fail_after(5):
            while True:  # the first query may still meet the dead connection
                try:
                    new_pid = await db.fetchval("SELECT pg_backend_pid()")
                    break
                except errors.DatabaseUnavailable:
                    await trio.sleep(0.01)
        assert new_pid != pid
