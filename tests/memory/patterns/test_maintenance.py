"""The per-chat index maintenance job: builds what retrieval's planner wants, once, and
survives a failing pass."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
import trio
import trio.testing

from memory.embeddings.store import ensure_vector_index
from memory.patterns.maintenance import ChatIndexJob
from runtime.db import Database

DIMS, MODEL = 16, "test-maintenance-16"
BIG, SMALL = 301, 302
NOW = datetime(2025, 1, 1, tzinfo=UTC)
LIMITS = {"candidates": 20, "exact_max": 100, "ef_max": 50}


async def _patterns(db: Database, chat_id: int, vectors: np.ndarray) -> None:
    rows = await db.fetch(
        "INSERT INTO patterns (chat_id, content, canonical_hash, first_seen, last_seen)"
        " SELECT $1::bigint, 'p ' || i, $1::bigint || '-' || i, $2, $2"
        " FROM generate_series(1, $3::int) i"
        " RETURNING id",
        chat_id,
        NOW,
        len(vectors),
    )
    await db.copy_records(
        "pattern_embeddings",
        [(r["id"], MODEL, chat_id, DIMS, v) for r, v in zip(rows, vectors, strict=True)],
        ["pattern_id", "model", "chat_id", "dims", "embedding"],
    )


async def test_job_indexes_the_small_share_chat_once(db: Database) -> None:
    rng = np.random.default_rng(7)
    vecs = rng.normal(size=(800, DIMS)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    await _patterns(db, BIG, vecs[:600])  # 75 % of the model's index: the shared walk is fine
    await _patterns(db, SMALL, vecs[600:])  # 25 %: needs its own partial index
    await ensure_vector_index(db, "pattern_embeddings", MODEL, DIMS)
    await db.execute("ANALYZE pattern_embeddings")
    job = ChatIndexJob(db, model=MODEL, dims=DIMS, interval=3600, **LIMITS)
    assert await job.run_once() == [SMALL]
    assert await job.run_once() == []
    names = [
        r["indexname"]
        for r in await db.fetch(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'pattern_embeddings'"
            " AND indexdef LIKE '%chat_id = ' || $1 || '%'",
            str(SMALL),
        )
    ]
    assert len(names) == 1


class FailingDb:
    def __init__(self) -> None:
        self.calls = 0

    async def fetch(self, query: str, *args: Any) -> list[Any]:
        self.calls += 1
        raise ConnectionError("database went away")

    async def fetchval(self, query: str, *args: Any) -> Any:
        raise ConnectionError("database went away")

    async def execute(self, query: str, *args: Any) -> str:
        raise ConnectionError("database went away")

    async def executemany(self, query: str, args: Any) -> None:
        raise ConnectionError("database went away")

    async def fetchrow(self, query: str, *args: Any) -> Any:
        raise ConnectionError("database went away")


async def test_a_failing_pass_is_retried_at_the_next_interval() -> None:
    db = FailingDb()
    job = ChatIndexJob(db, model=MODEL, dims=DIMS, interval=60)
    clock = trio.testing.MockClock(autojump_threshold=0)

    async def scenario() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(job.run)
            await trio.sleep(150)  # passes at 0, 60 and 120 s
            nursery.cancel_scope.cancel()

    # the job under test needs its own trio run to use the mock clock
    await trio.to_thread.run_sync(lambda: trio.run(scenario, clock=clock))
    assert (job.failures, job.passes) == (3, 0)
    assert db.calls == 3
