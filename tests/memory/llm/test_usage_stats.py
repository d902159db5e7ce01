"""Usage over time for the dashboard's plots: per day and purpose/model, latency percentiles."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from memory.llm.usage_stats import latency_by_purpose, series, usage_by_day
from runtime.db import Database

NOW = datetime(2026, 11, 26, 12, tzinfo=UTC)


async def add(
    db: Database, chat: int | None, purpose: str, cost: float, ms: int, days: int
) -> None:
    await db.execute(
        "INSERT INTO api_usage (chat_id, provider, model, purpose, input_tokens, output_tokens,"
        " cache_read_tokens, cost_usd, latency_ms, created_at)"
        " VALUES ($1, 'anthropic', 'm', $2, 100, 10, 40, $3, $4, $5)",
        chat,
        purpose,
        cost,
        ms,
        NOW - timedelta(days=days),
    )


async def test_per_day_per_purpose_for_one_chat(db: Database) -> None:
    await add(db, 1, "agent", 0.01, 100, 0)
    await add(db, 1, "agent", 0.02, 300, 0)
    await add(db, 1, "compaction", 0.005, 900, 1)
    await add(db, 2, "agent", 5.0, 100, 0)  # another chat
    rows = await usage_by_day(
        db, since=NOW - timedelta(days=7), until=NOW + timedelta(hours=1), key="purpose", chat_id=1
    )
    got = {
        (r.day, r.key): (round(r.cost_usd, 3), r.input_tokens, r.cache_read_tokens) for r in rows
    }
    assert got == {
        (date(2026, 11, 26), "agent"): (0.03, 200, 80),
        (date(2026, 11, 25), "compaction"): (0.005, 100, 40),
    }
    days = [date(2026, 11, 24), date(2026, 11, 25), date(2026, 11, 26)]
    assert series(rows, days) == {
        "agent": [0.0, 0.0, pytest.approx(0.03)],
        "compaction": [0.0, pytest.approx(0.005), 0.0],
    }
    everyone = await usage_by_day(
        db, since=NOW - timedelta(days=7), until=NOW + timedelta(hours=1), key="model"
    )
    assert round(sum(r.cost_usd for r in everyone), 3) == 5.035


async def test_latency_percentiles_by_purpose(db: Database) -> None:
    for ms in (100, 200, 300, 400, 1000):
        await add(db, 1, "agent", 0.0, ms, 0)
    (agent,) = await latency_by_purpose(
        db, since=NOW - timedelta(days=1), until=NOW + timedelta(hours=1), chat_id=1
    )
    assert agent.calls == 5 and agent.p50_ms == 300 and agent.p95_ms == pytest.approx(880)
