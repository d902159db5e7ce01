"""Usage over time for plots (the dashboard's cost page): per day and key (purpose or model)
the cost and tokens, and the latency percentiles of each purpose. ``chat_id`` None: every
chat (and calls of none)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime
from typing import Literal

import attrs

from runtime.db import Queries

Key = Literal["purpose", "model"]


@attrs.frozen
class DayKey:
    day: date
    key: str
    cost_usd: float
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int


@attrs.frozen
class Latency:
    purpose: str
    calls: int
    p50_ms: float
    p95_ms: float


_DAYS = """
/* all chats: one chat's usage, or every chat's (operator report) */
SELECT (created_at AT TIME ZONE $4)::date AS day, {key} AS key,
       coalesce(sum(cost_usd), 0) AS cost_usd,
       coalesce(sum(input_tokens), 0)::bigint AS input_tokens,
       coalesce(sum(output_tokens), 0)::bigint AS output_tokens,
       coalesce(sum(cache_read_tokens), 0)::bigint AS cache_read_tokens,
       coalesce(sum(cache_write_tokens), 0)::bigint AS cache_write_tokens
FROM api_usage
WHERE created_at >= $1 AND created_at < $2 AND ($3::bigint IS NULL OR chat_id = $3)
GROUP BY 1, 2 ORDER BY 1, 2
"""
_LATENCY = """
/* all chats: one chat's usage, or every chat's (operator report) */
SELECT purpose, count(*) AS calls,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY latency_ms) AS p50,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY latency_ms) AS p95
FROM api_usage
WHERE created_at >= $1 AND created_at < $2 AND ($3::bigint IS NULL OR chat_id = $3)
  AND ok AND latency_ms IS NOT NULL
GROUP BY 1 ORDER BY 1
"""


async def usage_by_day(
    db: Queries,
    *,
    since: datetime,
    until: datetime,
    key: Key,
    chat_id: int | None = None,
    tz: str = "UTC",
) -> list[DayKey]:
    """Cost and tokens per calendar day (in ``tz``) and ``key``, oldest first."""
    column = {"purpose": "purpose", "model": "model"}[key]
    rows = await db.fetch(_DAYS.format(key=column), since, until, chat_id, tz)
    return [
        DayKey(
            r["day"],
            str(r["key"]),
            float(r["cost_usd"]),
            int(r["input_tokens"]),
            int(r["output_tokens"]),
            int(r["cache_read_tokens"]),
            int(r["cache_write_tokens"]),
        )
        for r in rows
    ]


async def latency_by_purpose(
    db: Queries, *, since: datetime, until: datetime, chat_id: int | None = None
) -> list[Latency]:
    """p50/p95 latency of the successful calls of each purpose."""
    rows = await db.fetch(_LATENCY, since, until, chat_id)
    return [
        Latency(str(r["purpose"]), int(r["calls"]), float(r["p50"]), float(r["p95"])) for r in rows
    ]


def series(
    rows: Sequence[DayKey], days: Sequence[date], value: str = "cost_usd"
) -> dict[str, list[float]]:
    """``rows`` as one list per key with a value for each of ``days`` (0 where none)."""
    index = {d: i for i, d in enumerate(days)}
    out: dict[str, list[float]] = {}
    for row in rows:
        if row.day in index:
            out.setdefault(row.key, [0.0] * len(days))[index[row.day]] += float(getattr(row, value))
    return out
