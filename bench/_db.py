"""Database helpers shared by the benchmarks."""

from __future__ import annotations

import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import trio

from memory.embeddings.store import ensure_vector_index
from runtime import db as dbmod
from runtime.embedded_pg import DEFAULT_SHARED_BUFFERS, tune
from runtime.errors import DatabaseError


class OnConnection:
    """A held connection as a :class:`runtime.db.Queries` for ``ensure_vector_index`` (whose
    cache of built indexes is keyed by the database URL)."""

    def __init__(self, conn: dbmod.Connection, url: str) -> None:
        self.url = url
        self.execute, self.executemany = conn.execute, conn.executemany
        self.fetch, self.fetchrow, self.fetchval = conn.fetch, conn.fetchrow, conn.fetchval


async def drop_secondary_indexes(db: dbmod.Database, tables: Sequence[str]) -> list[str]:
    """Drop the indexes of ``tables`` that back no constraint (a bulk COPY runs faster
    without them); returns their definitions, for :func:`build_indexes` after the load."""
    rows = await db.fetch(
        "SELECT i.indexname, i.indexdef FROM pg_indexes i WHERE i.schemaname = current_schema()"
        " AND i.tablename = ANY($1::text[]) AND NOT EXISTS (SELECT 1 FROM pg_constraint c"
        " WHERE c.conname = i.indexname AND c.conrelid = i.tablename::regclass)",
        list(tables),
    )
    for row in rows:
        await db.execute(f'DROP INDEX "{row["indexname"]}"')
    return [row["indexdef"] for row in rows]


async def build_indexes(
    conn: dbmod.Connection,
    url: str,
    indexdefs: Sequence[str],
    *,
    work_mem: str,
    vectors: str,
    model: str,
    dims: int,
) -> tuple[float, float]:
    """Run ``indexdefs`` (from :func:`drop_secondary_indexes`) on ``conn`` with
    ``maintenance_work_mem`` at ``work_mem``, then build the HNSW index of ``model`` on the
    ``vectors`` table; returns the seconds of each step."""
    await conn.execute(f"SET maintenance_work_mem = '{work_mem}'")
    await conn.execute("SET max_parallel_maintenance_workers = 2")
    start = time.perf_counter()
    for indexdef in indexdefs:
        await conn.execute(indexdef)
    secondary = time.perf_counter() - start
    start = time.perf_counter()
    await ensure_vector_index(OnConnection(conn, url), vectors, model, dims)
    return secondary, time.perf_counter() - start


async def checkpoint(db: dbmod.Database, when: str = "") -> None:
    """Flush the load's dirty pages now, not in a checkpoint during the measurement (a --url
    database may not grant it: then measure anyway)."""
    try:
        await db.execute("CHECKPOINT")
    except DatabaseError as exc:
        print(f"  (no CHECKPOINT{when}: {exc})")


def run_on_database(url: str, prefix: str, run: Callable[[str], Awaitable[None]]) -> None:
    """``trio.run`` ``run(url)`` under the asyncio loop every database user needs: on ``url``,
    or (empty) on a throwaway embedded server tuned as ``engram serve`` tunes its own."""

    async def go(database_url: str) -> None:
        async with dbmod.asyncio_loop():
            await run(database_url)

    if url:
        trio.run(go, url)
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pgserver

            server = pgserver.get_server(Path(tmp) / "pg", cleanup_mode="delete")  # type: ignore[attr-defined]
            tune(server, DEFAULT_SHARED_BUFFERS)  # as engram serve runs its embedded server
        try:
            trio.run(go, server.get_uri())
        finally:
            server.cleanup()
