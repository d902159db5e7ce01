"""The trio-asyncio database bridge against a real PostgreSQL."""

from __future__ import annotations

import socket

import numpy as np
import pytest
import trio

from runtime import db as dbmod
from runtime import errors
from runtime.db_url import redact_url


async def test_queries_roundtrip_and_vector_codec(db: dbmod.Database) -> None:
    assert await db.fetchval("SELECT 1") == 1
    await db.execute(
        "INSERT INTO patterns (chat_id, content, canonical_hash, first_seen, last_seen) "
        "VALUES (7, 'likes tea', 'h', now(), now())"
    )
    pid = await db.fetchval("SELECT id FROM patterns WHERE chat_id = 7")
    await db.execute(
        "INSERT INTO pattern_embeddings (pattern_id, model, chat_id, dims, embedding) "
        "VALUES ($1, 'm', 7, 3, $2)",
        pid,
        np.array([0.5, 0.25, 1.0], dtype=np.float32),
    )
    row = await db.fetchrow("SELECT embedding FROM pattern_embeddings WHERE pattern_id = $1", pid)
    assert row is not None
    assert np.allclose(np.asarray(row["embedding"].to_list()), [0.5, 0.25, 1.0])


async def test_transaction_commits_and_rolls_back(db: dbmod.Database) -> None:
    async with db.transaction() as conn:
        await conn.execute("INSERT INTO bot_state (key, value) VALUES ('a', '1')")
    with pytest.raises(RuntimeError):
        async with db.transaction() as conn:
            await conn.execute("INSERT INTO bot_state (key, value) VALUES ('b', '2')")
            raise RuntimeError("boom")
    keys = [r["key"] for r in await db.fetch("SELECT key FROM bot_state ORDER BY key")]
    assert keys == ["a"]


async def test_unique_violation_is_mapped(db: dbmod.Database) -> None:
    await db.execute("INSERT INTO bot_state (key, value) VALUES ('k', '1')")
    with pytest.raises(errors.UniqueViolation) as info:
        await db.execute("INSERT INTO bot_state (key, value) VALUES ('k', '2')")
    assert info.value.sqlstate == "23505"
    assert isinstance(info.value, errors.IntegrityViolation)


async def test_check_and_syntax_errors_are_mapped(db: dbmod.Database) -> None:
    with pytest.raises(errors.IntegrityViolation):
        await db.execute(
            "INSERT INTO daily_metrics (chat_id, date, weight_kg) VALUES (1, now(), -3)"
        )
    with pytest.raises(errors.QueryError):
        await db.fetch("SELEC nonsense")
    with pytest.raises(errors.QueryError):
        await db.fetch("SELECT no_such_column FROM inbox")


async def test_statement_timeout_is_mapped(db: dbmod.Database) -> None:
    with pytest.raises(errors.DatabaseError):
        async with db.transaction() as conn:
            await conn.execute("SET LOCAL statement_timeout = '50ms'")
            await conn.execute("SELECT pg_sleep(2)")


async def test_cancellation_leaves_pool_usable(db: dbmod.Database) -> None:
    with trio.move_on_after(0.2):
        await db.execute("SELECT pg_sleep(5)")
    assert await db.fetchval("SELECT 41 + 1") == 42


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
async def test_unreachable_server_fails_fast_with_redacted_url() -> None:
    url = f"postgresql://user:hunter2secret@127.0.0.1:{_free_port()}/x"
    start = trio.current_time()
    async with dbmod.asyncio_loop():
        with pytest.raises(errors.DatabaseUnavailable) as info:
            async with dbmod.open_database(url, connect_timeout=1.0):
                pass
    assert trio.current_time() - start < 5
    assert "hunter2secret" not in str(info.value)
    assert "127.0.0.1" in str(info.value)


def test_redact_url() -> None:
    assert redact_url("postgresql://u:pw@h:5/d") == "postgresql://u:***@h:5/d"
    assert redact_url("postgresql://u@h/d") == "postgresql://u@h/d"


@pytest.mark.slow
async def test_server_without_pgvector_says_how_to_install(pg_server: object) -> None:
    from pg_without_vector import postgres_without_pgvector

    with postgres_without_pgvector() as url:
        async with dbmod.asyncio_loop():
            with pytest.raises(errors.ExtensionMissing) as info:
                async with dbmod.open_database(url, connect_timeout=5):
                    pass
    message = str(info.value)
    assert "pgvector" in message
    assert "install" in message


async def test_a_connection_terminated_under_a_statement_is_unavailable(
    db: dbmod.Database,
) -> None:
    """A pool closing at shutdown terminates the connections still in use; a statement that
    was past asyncpg's "is it open" check then meets its protocol gone (an AttributeError
    inside asyncpg), which is the database being unavailable, not a crash of its caller. An
    AttributeError of anyone else's is not hidden."""
    import asyncpg

    class Terminated:  # what asyncpg's terminate() leaves: not aborted yet, no protocol
        _aborted = False
        _protocol = None

    async def past_the_check() -> object:
        return asyncpg.connection.Connection.is_closed(Terminated())  # type: ignore[arg-type]

    with pytest.raises(errors.DatabaseUnavailable, match="closed under the statement"):
        await dbmod._bridge(past_the_check)

    async def ours() -> object:
        return None.missing  # type: ignore[attr-defined]

    with pytest.raises(AttributeError):
        await dbmod._bridge(ours)
    async with db.connection() as conn:  # and a connection really terminated: unavailable
        conn._raw.terminate()
        with pytest.raises(errors.DatabaseUnavailable):
            await conn.fetchval("SELECT 1")
    assert await db.fetchval("SELECT 2") == 2  # the pool goes on with a fresh connection


async def test_a_connection_given_back_inside_a_transaction_is_dropped(db: dbmod.Database) -> None:
    """A transaction left open (its start or end cut off by a cancellation) is not handed to
    asyncpg's reset, which would report it as an error of the event loop (and fail this test
    at the loop's close): the connection is dropped, the server rolls the transaction back."""
    async with db.connection() as conn:
        await conn.execute("BEGIN")
        await conn.execute("CREATE TEMP TABLE left_open (x int)")
        pid = await conn.fetchval("SELECT pg_backend_pid()")
    with trio.fail_after(10):
        while await db.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid):  # noqa: ASYNC110 - the server's doing
            await trio.sleep(0.05)  # the server ends the dropped session
    assert await db.fetchval("SELECT 1") == 1
