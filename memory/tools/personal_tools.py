"""The agent's tools over the person's own records: ``log_weight`` (seed 000, "Weight logging
as a tool"; ``daily_metrics`` per chat), ``weight_history`` (the readings and their trend) and
``get_usage`` ("how much have you cost me?", from
``api_usage``). Offered with the journal tools (:data:`memory.journal.tools.JOURNAL_TOOLS`).
"""

from __future__ import annotations

from datetime import datetime, time, timedelta
from typing import Any

import attrs

from memory.errors import ToolError
from memory.llm.usage import usage_summary
from memory.tools.registry import Tool, ToolContext, tool
from memory.tools.results import usage_report
from memory.tools.schema import date_range, date_spec, optional_date, parse_day, spec
from memory.tools.weights import weight_readings, weight_trend

_TOOLS: list[Tool[Any]] = []


@attrs.frozen
class LogWeightInput:
    weight_kg: float = attrs.field(
        metadata=spec(exclusive_minimum=0, exclusive_maximum=500, description="Weight in kilograms")
    )
    date: str | None = attrs.field(
        default=None,
        metadata=date_spec("Date in YYYY-MM-DD format. Defaults to today (timezone-aware)."),
    )


_UPSERT_WEIGHT = """
WITH old AS (SELECT weight_kg FROM daily_metrics WHERE chat_id = $1 AND date = $2),
up AS (
    INSERT INTO daily_metrics (chat_id, date, weight_kg) VALUES ($1, $2, $3)
    ON CONFLICT (chat_id, date) DO UPDATE SET weight_kg = EXCLUDED.weight_kg, updated_at = now()
    RETURNING date, weight_kg
)
SELECT up.date, up.weight_kg, (SELECT weight_kg FROM old) AS replaced FROM up
"""


@tool(_TOOLS, "log_weight", LogWeightInput)
async def log_weight(ctx: ToolContext, inp: LogWeightInput) -> dict[str, Any]:
    """Log a daily weight measurement. Use when the user mentions their weight. Returns
    the stored reading and the previous one."""
    today = ctx.today
    day = parse_day(inp.date) or today
    if day > today + timedelta(days=1):
        raise ToolError(f"date {day} is in the future (today is {today})", "date")
    row = await ctx.db.fetchrow(_UPSERT_WEIGHT, ctx.chat_id, day, inp.weight_kg)
    prev = await ctx.db.fetchrow(
        "SELECT date, weight_kg FROM daily_metrics WHERE chat_id = $1 AND date < $2 "
        "AND weight_kg IS NOT NULL ORDER BY date DESC LIMIT 1",
        ctx.chat_id,
        day,
    )
    out: dict[str, Any] = {
        "logged": {"date": row["date"].isoformat(), "weight_kg": row["weight_kg"]},
        "previous": None,
    }
    if prev is not None:
        out["previous"] = {
            "date": prev["date"].isoformat(),
            "weight_kg": prev["weight_kg"],
            "change_kg": round(row["weight_kg"] - prev["weight_kg"], 2),
        }
    if row["replaced"] is not None:
        out["replaced_kg"] = row["replaced"]
    return out


@attrs.frozen
class WeightHistoryInput:
    date_from: str | None = optional_date("First day; defaults to 29 days before date_to")
    date_to: str | None = optional_date("Last day, inclusive; defaults to today")


MAX_HISTORY_DAYS = 800


@tool(_TOOLS, "weight_history", WeightHistoryInput)
async def weight_history(ctx: ToolContext, inp: WeightHistoryInput) -> dict[str, Any]:
    """The logged weights between two days (default the last 30 days), oldest first, with
    the first and last reading and the least-squares trend (change over the period and per
    week). Use for "how has my weight moved?"."""
    start, end = date_range(inp.date_from, inp.date_to)
    end = end or ctx.today
    start = start or end - timedelta(days=29)
    if start > end:
        raise ToolError("date_from must not be after date_to", "date_from")
    if (end - start).days >= MAX_HISTORY_DAYS:
        raise ToolError(f"at most {MAX_HISTORY_DAYS} days at a time", "date_from")
    readings = await weight_readings(ctx.db, ctx.chat_id, start, end)
    out: dict[str, Any] = {
        "date_from": start.isoformat(),
        "date_to": end.isoformat(),
        "count": len(readings),
        "readings": [{"date": d.isoformat(), "weight_kg": w} for d, w in readings],
    }
    if readings:
        (d0, w0), (d1, w1) = readings[0], readings[-1]
        out["first"] = {"date": d0.isoformat(), "weight_kg": w0}
        out["last"] = {"date": d1.isoformat(), "weight_kg": w1}
        out["change_kg"] = round(w1 - w0, 2)
    trend = weight_trend(readings)
    if trend is not None:
        out["trend"] = {
            "change_kg": round(trend.change_kg, 2),
            "per_week_kg": round(trend.per_week_kg, 2),
        }
    return out


@attrs.frozen
class GetUsageInput:
    date_from: str | None = optional_date("First day; defaults to 29 days before date_to")
    date_to: str | None = optional_date("Last day, inclusive; defaults to today")


@tool(_TOOLS, "get_usage", GetUsageInput)
async def get_usage(ctx: ToolContext, inp: GetUsageInput) -> dict[str, Any]:
    """What the assistant has cost in API fees (USD: this chat's calls, its journal imports
    included, plus shared ones such as embedding backfill) by purpose, model and day; by
    default over the last 30 days."""
    start, end = date_range(inp.date_from, inp.date_to)
    end = end or ctx.today
    start = start or end - timedelta(days=29)
    if start > end:
        raise ToolError("date_from must not be after date_to", "date_from")
    since = datetime.combine(start, time(), ctx.tz)
    until = datetime.combine(end + timedelta(days=1), time(), ctx.tz)
    s = await usage_summary(
        ctx.db,
        since=since,
        until=until,
        tz=ctx.timezone,
        chat_id=ctx.chat_id,
        include_shared=True,
    )
    return usage_report(s, start, end)


#: ``log_weight``, ``weight_history`` and ``get_usage``, in the order they are offered
PERSONAL_TOOLS: tuple[Tool[Any], ...] = tuple(_TOOLS)
