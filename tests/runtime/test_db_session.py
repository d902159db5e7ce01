"""Pool hygiene: held connections are reset before reuse; one-shot queries skip the reset."""

from __future__ import annotations

import trio

from runtime import db as dbmod


async def _advisory_locks(db: dbmod.Database) -> int:
    count: int = await db.fetchval("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
    return count


async def test_held_connection_state_does_not_leak_to_the_next_user(database_url: str) -> None:
    async with dbmod.asyncio_loop(), dbmod.open_database(database_url, max_size=1) as db:
        pid = await db.fetchval("SELECT pg_backend_pid()")
        async with db.connection() as conn:
            await conn.execute("SET application_name = 'leaky'")
            await conn.execute("SELECT pg_advisory_lock(4242)")
        # one pooled connection: the same backend, with its session state undone
        assert await db.fetchval("SELECT pg_backend_pid()") == pid
        assert await db.fetchval("SHOW application_name") != "leaky"
        assert await _advisory_locks(db) == 0
        async with db.transaction() as conn:
            await conn.execute("SET statement_timeout = '1234ms'")
        assert await db.fetchval("SHOW statement_timeout") != "1234ms"


async def test_cancelled_holder_still_returns_a_clean_connection(database_url: str) -> None:
    async with dbmod.asyncio_loop(), dbmod.open_database(database_url, max_size=1) as db:
        with trio.move_on_after(0.2):
            async with db.connection() as conn:
                await conn.execute("SELECT pg_advisory_lock(7)")
                await conn.execute("SELECT pg_sleep(5)")
        assert await db.fetchval("SELECT 41 + 1") == 42
        assert await _advisory_locks(db) == 0


async def test_one_shot_queries_are_released_without_the_reset_round_trip(
    database_url: str,
) -> None:
    async with dbmod.asyncio_loop(), dbmod.open_database(database_url, max_size=1) as db:
        # (one-shot queries must not change session state; this one does, to make the missing
        # RESET ALL visible)
        await db.execute("SET application_name = 'one-shot'")
        assert await db.fetchval("SHOW application_name") == "one-shot"
        # a held connection is reset on release
        async with db.connection() as conn:
            assert await conn.fetchval("SHOW application_name") == "one-shot"
        assert await db.fetchval("SHOW application_name") != "one-shot"
