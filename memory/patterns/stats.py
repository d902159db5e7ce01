"""One chat's success metrics (seed 000 "Success metrics dashboard"; ``/stats``), and the turn
counters they need.

:func:`chat_stats` reads, for one chat, with days and months in ``TIMEZONE``:

* cost today and this month, and this month's by purpose (:func:`memory.llm.usage.usage_summary`
  over ``api_usage``: this chat's calls only);
* turns answered by the model today and this month, and the share of them whose memory
  retrieval degraded to keywords (``chat_turn_stats``, written with each turn's commit by
  :func:`record_turn`);
* reply latency over the last :data:`LATENCY_DAYS` days, average and p95: from the update's
  arrival (``inbox.received_at``, the webhook's acknowledgement) to the reply's delivery
  (``outbox.sent_at``), every reply (commands included);
* patterns created, reinforced and merged in the last 7 days (new patterns; observations added
  to patterns that already had one; merges in the audit trail).
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any, Protocol

import attrs

from memory.llm.usage import Spend, usage_summary
from runtime.clock import zone
from runtime.db import Queries

LATENCY_DAYS = 30
WEEK_DAYS = 7

_RECORD = """
INSERT INTO chat_turn_stats (chat_id, day, turns, retrieval_degraded)
VALUES ($1, $2, 1, $3::int)
ON CONFLICT (chat_id, day) DO UPDATE SET
    turns = chat_turn_stats.turns + 1,
    retrieval_degraded = chat_turn_stats.retrieval_degraded + EXCLUDED.retrieval_degraded
"""


class TurnRecorder(Protocol):
    """What the agent calls in each turn's commit (:func:`record_turn`)."""

    async def __call__(self, conn: Queries, chat_id: int, day: date, *, degraded: bool) -> None: ...


async def record_turn(conn: Queries, chat_id: int, day: date, *, degraded: bool) -> None:
    """Count one model turn of the chat on its local ``day`` (one INSERT: collectable into the
    turn's commit statement)."""
    await conn.execute(_RECORD, chat_id, day, int(degraded))


@attrs.frozen
class ChatStats:
    today: Spend
    month: Spend
    month_by_purpose: dict[str, Spend]
    turns_today: int
    turns_month: int
    degraded_month: int
    replies: int  # replies measured for latency (last LATENCY_DAYS days)
    latency_avg: float | None  # seconds
    latency_p95: float | None
    created_week: int
    reinforced_week: int
    merged_week: int

    @property
    def degraded_rate(self) -> float | None:
        return None if not self.turns_month else self.degraded_month / self.turns_month


_TURNS = """
SELECT coalesce(sum(turns) FILTER (WHERE day = $2), 0) AS today,
       coalesce(sum(turns), 0) AS month,
       coalesce(sum(retrieval_degraded), 0) AS degraded
FROM chat_turn_stats WHERE chat_id = $1 AND day >= $3
"""
_LATENCY = """
SELECT count(*) AS n, avg(s) AS avg, percentile_cont(0.95) WITHIN GROUP (ORDER BY s) AS p95
FROM (
    SELECT extract(epoch FROM o.sent_at - min(i.received_at)) AS s
    FROM outbox o JOIN inbox i ON i.id = ANY(o.inbox_ids) AND i.chat_id = o.chat_id
    WHERE o.chat_id = $1 AND o.status = 'sent' AND o.sent_at >= $2
    GROUP BY o.id, o.sent_at
) t
"""
_PATTERNS = """
SELECT
  (SELECT count(*) FROM patterns WHERE chat_id = $1 AND created_at >= $2) AS created,
  (SELECT count(*) FROM pattern_observations o WHERE o.chat_id = $1 AND o.observed_at >= $2
     AND EXISTS (SELECT 1 FROM pattern_observations f
                 WHERE f.pattern_id = o.pattern_id AND f.id < o.id)) AS reinforced,
  (SELECT count(*) FROM pattern_audit WHERE chat_id = $1 AND at >= $2 AND action = 'merge')
     AS merged
"""


def _start_of_day(now: datetime, timezone: str, *, month: bool = False) -> datetime:
    local = now.astimezone(zone(timezone))
    day = local.replace(hour=0, minute=0, second=0, microsecond=0)
    return day.replace(day=1) if month else day


def next_day_start(now: datetime, timezone: str) -> datetime:
    """The start of the day after ``now``'s, in ``timezone`` (when a daily limit renews)."""
    today = _start_of_day(now, timezone)
    return (today + timedelta(days=1, hours=3)).replace(hour=0)  # DST-safe: 21-27 h days


async def cost_today(db: Queries, chat_id: int, *, now: datetime, timezone: str) -> float:
    """What the chat's model calls cost since the start of ``now``'s day in ``timezone``."""
    since = _start_of_day(now, timezone)
    usage = await usage_summary(
        db, since=since, until=now + timedelta(seconds=1), chat_id=chat_id, tz=timezone
    )
    return usage.total.cost_usd


async def chat_stats(db: Queries, chat_id: int, *, now: datetime, timezone: str) -> ChatStats:
    """The chat's metrics at ``now`` (module docstring)."""
    today, month = _start_of_day(now, timezone), _start_of_day(now, timezone, month=True)
    day_usage = await usage_summary(
        db, since=today, until=now + timedelta(seconds=1), chat_id=chat_id, tz=timezone
    )
    month_usage = await usage_summary(
        db, since=month, until=now + timedelta(seconds=1), chat_id=chat_id, tz=timezone
    )
    turns = await db.fetchrow(_TURNS, chat_id, today.date(), month.date())
    latency = await db.fetchrow(_LATENCY, chat_id, now - timedelta(days=LATENCY_DAYS))
    patterns = await db.fetchrow(_PATTERNS, chat_id, now - timedelta(days=WEEK_DAYS))
    assert turns is not None and latency is not None and patterns is not None
    return ChatStats(
        today=day_usage.total,
        month=month_usage.total,
        month_by_purpose=month_usage.by_purpose,
        turns_today=int(turns["today"]),
        turns_month=int(turns["month"]),
        degraded_month=int(turns["degraded"]),
        replies=int(latency["n"]),
        latency_avg=_float(latency["avg"]),
        latency_p95=_float(latency["p95"]),
        created_week=int(patterns["created"]),
        reinforced_week=int(patterns["reinforced"]),
        merged_week=int(patterns["merged"]),
    )


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
