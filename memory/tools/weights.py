"""A chat's weight readings (``daily_metrics``) and their trend: the pure least-squares rule the
``weight_history`` tool reports and the weight-trend routine alerts on (one home for both)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

import attrs

from runtime.db import Queries

#: a reading: the local day and the weight in kg
Reading = tuple[date, float]


@attrs.frozen
class WeightTrend:
    """The least-squares line through the readings: its change from the first reading's day to
    the last's (kg), per week, and what it was fitted on."""

    change_kg: float
    per_week_kg: float
    first: date
    last: date
    readings: int


def weight_trend(readings: Sequence[Reading]) -> WeightTrend | None:
    """The least-squares trend of ``readings`` (any order; one a day); None for fewer than two
    days. An outlier at either end moves it less than a first-vs-last difference."""
    if len({d for d, _ in readings}) < 2:
        return None
    first = min(d for d, _ in readings)
    last = max(d for d, _ in readings)
    xs = [float((d - first).days) for d, _ in readings]
    ys = [w for _, w in readings]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return WeightTrend(
        change_kg=slope * (last - first).days,
        per_week_kg=slope * 7,
        first=first,
        last=last,
        readings=n,
    )


_READINGS = """
SELECT date, weight_kg FROM daily_metrics
WHERE chat_id = $1 AND date >= $2 AND date <= $3 AND weight_kg IS NOT NULL
ORDER BY date
"""


async def weight_readings(db: Queries, chat_id: int, start: date, end: date) -> list[Reading]:
    """The chat's readings from ``start`` to ``end`` (inclusive), oldest first."""
    rows = await db.fetch(_READINGS, chat_id, start, end)
    return [(r["date"], float(r["weight_kg"])) for r in rows]
