"""Write-behind of api_usage rows (memory.llm.usage_writer) against the real PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import structlog
import trio

from memory.llm.usage import log_api_usage
from memory.llm.usage_writer import UsageWriter, open_usage_writer
from runtime.db import Database


async def purposes(db: Database) -> list[str]:
    return [r["purpose"] for r in await db.fetch("SELECT purpose FROM api_usage ORDER BY id")]


async def log(db: Any, purpose: str, chat_id: int | None = 7) -> float:
    return await log_api_usage(
        db,
        provider="anthropic",
        model="claude-sonnet-4-5",
        purpose=purpose,
        chat_id=chat_id,
        input_tokens=1_000,
        output_tokens=100,
    )


class CountingDb:
    """The pool, counting the statements that reach it."""

    def __init__(self, db: Database) -> None:
        self.db, self.calls = db, 0
        self.gate = trio.Event()
        self.gate.set()

    async def execute(self, query: str, *args: Any) -> str:
        self.calls += 1
        return await self.db.execute(query, *args)

    async def executemany(self, query: str, args: Sequence[Sequence[Any]]) -> None:
        await self.gate.wait()
        self.calls += 1
        await self.db.executemany(query, args)

    async def fetch(self, query: str, *args: Any) -> Sequence[Any]:
        return await self.db.fetch(query, *args)

    async def fetchrow(self, query: str, *args: Any) -> Any:
        return await self.db.fetchrow(query, *args)

    async def fetchval(self, query: str, *args: Any) -> Any:
        return await self.db.fetchval(query, *args)


async def test_rows_are_queued_then_written_together_in_order(db: Database) -> None:
    counting = CountingDb(db)
    counting.gate = trio.Event()  # hold the writer until all rows are queued
    async with open_usage_writer(counting) as writer:
        for i in range(5):
            assert await log(writer, f"p{i}") > 0  # the cost comes back at once
        assert await purposes(db) == []  # nothing written on the callers' path
        counting.gate.set()
    assert writer.written == 5
    assert await purposes(db) == [f"p{i}" for i in range(5)]
    assert counting.calls <= 2  # one batch (at most the first row alone, then the rest)
    [row] = await db.fetch("SELECT * FROM api_usage WHERE purpose = 'p3'")
    assert row["chat_id"] == 7 and row["input_tokens"] == 1_000 and row["ok"] is True


async def test_queued_rows_are_written_when_the_writer_stops(db: Database) -> None:
    counting = CountingDb(db)
    counting.gate = trio.Event()
    async with open_usage_writer(counting) as writer:
        for i in range(3):
            await log(writer, f"q{i}")
        trio.lowlevel.current_trio_token().run_sync_soon(counting.gate.set)
    assert await purposes(db) == ["q0", "q1", "q2"]


async def test_a_full_queue_or_a_stopped_writer_writes_directly(db: Database) -> None:
    counting = CountingDb(db)
    counting.gate = trio.Event()
    async with open_usage_writer(counting, capacity=2) as writer:
        for i in range(4):  # the writer holds at most one batch and two queued rows
            await log(writer, f"r{i}")
        direct = counting.calls
        counting.gate.set()
    assert direct >= 1  # back-pressure: written on the caller's path, not dropped
    assert sorted(await purposes(db)) == ["r0", "r1", "r2", "r3"]
    idle = UsageWriter(db)  # never started
    await log(idle, "after")
    assert (await purposes(db))[-1] == "after"


async def test_a_bad_row_does_not_take_its_batch_down(db: Database) -> None:
    counting = CountingDb(db)
    counting.gate = trio.Event()
    with structlog.testing.capture_logs() as logs:
        async with open_usage_writer(counting) as writer:
            await log(writer, "good1")
            await log(writer, "bad", chat_id=None)  # unusual but valid
            await writer.execute(
                "INSERT INTO api_usage (provider, model, purpose, cost_usd, ok) "
                "VALUES ($1, $2, $3, $4, $5)",
                "x",
                "y",
                None,
                0.0,
                True,
            )  # a NULL purpose: rejected by the schema
            await log(writer, "good2")
            counting.gate.set()
    assert await purposes(db) == ["good1", "bad", "good2"]
    assert writer.failed == 1
    assert [e for e in logs if e["event"] == "usage.write_failed"]
