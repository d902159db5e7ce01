"""Migration runner against a real PostgreSQL."""

from __future__ import annotations

import pytest
import trio

from runtime import db as dbmod
from runtime import errors
from runtime.migrate import Migration, apply_migrations, load_migrations, migrations_current


def test_packaged_migrations_found() -> None:
    migs = load_migrations()
    assert migs[0].filename == "001_initial_schema.sql"
    assert [m.version for m in migs] == sorted(m.version for m in migs)


async def test_apply_is_idempotent(raw_db: dbmod.Database) -> None:
    assert not await migrations_current(raw_db)
    first = await apply_migrations(raw_db)
    assert first == [m.filename for m in load_migrations()]
    assert await apply_migrations(raw_db) == []
    assert await migrations_current(raw_db)
    count = await raw_db.fetchval("SELECT count(*) FROM schema_migrations")
    assert count == len(first)


async def test_schema_has_chat_scoped_tables(db: dbmod.Database) -> None:
    tables = {
        r["table_name"]
        for r in await db.fetch(
            "SELECT table_name FROM information_schema.columns WHERE column_name = 'chat_id'"
        )
    }
    for table in (
        "inbox",
        "outbox",
        "chat_messages",
        "patterns",
        "pattern_embeddings",
        "pattern_observations",
        "pattern_relations",
        "pattern_aliases",
        "pattern_entries",
        "episodes",
        "daily_metrics",
        "api_usage",
    ):
        assert table in tables, table


async def test_two_concurrent_runners_apply_once(database_url: str) -> None:
    counter = {"runs": 0}
    extra = [
        *load_migrations(),
        Migration(900, "count_me", "CREATE TABLE counted (n int); INSERT INTO counted VALUES (1);"),
    ]
    results: list[list[str]] = []

    async def runner() -> None:
        async with dbmod.open_database(database_url, max_size=2) as database:
            results.append(await apply_migrations(database, extra))
            counter["runs"] += 1

    async with dbmod.asyncio_loop():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(runner)
            nursery.start_soon(runner)
        async with dbmod.open_database(database_url, max_size=1) as database:
            assert await database.fetchval("SELECT count(*) FROM counted") == 1
            assert await database.fetchval("SELECT count(*) FROM schema_migrations") == len(extra)
    assert counter["runs"] == 2
    assert sorted(len(r) for r in results) == [0, len(extra)]


async def test_changed_applied_file_is_refused(raw_db: dbmod.Database) -> None:
    migs = load_migrations()
    await apply_migrations(raw_db, migs)
    changed = [Migration(migs[0].version, migs[0].name, migs[0].sql + "\n-- edited\n"), *migs[1:]]
    with pytest.raises(errors.MigrationError, match="was changed after it was applied"):
        await apply_migrations(raw_db, changed)
    assert not await migrations_current(raw_db, changed)


async def test_unknown_applied_migration_is_refused(raw_db: dbmod.Database) -> None:
    migs = load_migrations()
    await apply_migrations(raw_db, [*migs, Migration(901, "future", "SELECT 1;")])
    with pytest.raises(errors.MigrationError, match="does not know"):
        await apply_migrations(raw_db, migs)


async def test_failed_migration_rolls_back(raw_db: dbmod.Database) -> None:
    bad = [*load_migrations(), Migration(902, "broken", "CREATE TABLE half (n int); SELEC 1;")]
    with pytest.raises(errors.MigrationError, match=r"902_broken\.sql failed"):
        await apply_migrations(raw_db, bad)
    assert await raw_db.fetchval("SELECT to_regclass('half')") is None
    latest = max(m.version for m in load_migrations())
    assert await raw_db.fetchval("SELECT max(version) FROM schema_migrations") == latest
