"""weight-trend (09:00): the least-squares trend of the last 14 days' weights
(:func:`memory.tools.weights.weight_trend`) moved by at least WEIGHT_TREND_THRESHOLD_KG ->
the model is asked to mention it kindly; too few readings, a trend within the threshold, or an
alert already sent this week: nothing to say."""

from __future__ import annotations

from datetime import timedelta

import attrs

from actors.scheduler.routine import Brief, RoutineContext
from actors.scheduler.routines.days import local_now, sent_since
from memory.tools.weights import WeightTrend, weight_readings, weight_trend

WINDOW_DAYS = 14
#: once an alert is sent, the same trend is not raised again for this long
QUIET_DAYS = 7


def significant(trend: WeightTrend | None, threshold_kg: float, min_readings: int) -> bool:
    """Whether a trend is worth an alert: enough readings and a change of at least the
    threshold, either way."""
    return (
        trend is not None
        and trend.readings >= min_readings
        and abs(trend.change_kg) >= threshold_kg
    )


def trend_prompt(trend: WeightTrend) -> str:
    way = "up" if trend.change_kg > 0 else "down"
    return (
        f"The person's logged weight has trended {way} by about {abs(trend.change_kg):.1f} kg "
        f"from {trend.first:%d %b} to {trend.last:%d %b} ({trend.readings} readings, "
        f"{trend.per_week_kg:+.1f} kg a week on a least-squares line). Mention it briefly and "
        "kindly, in light of what you know of their goals; no judgement, no medical advice. "
        "If it would not be welcome (for instance a change they are working towards and have "
        "just discussed), decline."
    )


@attrs.frozen
class WeightTrendRoutine:
    threshold_kg: float = 1.0
    min_readings: int = 4
    name: str = "weight-trend"
    title: str = "Weight trend alert"
    default_schedule: str = "0 9 * * *"

    async def decide(self, ctx: RoutineContext) -> Brief | None:
        today = local_now(ctx).date()
        readings = await weight_readings(
            ctx.db, ctx.chat_id, today - timedelta(days=WINDOW_DAYS - 1), today
        )
        trend = weight_trend(readings)
        if trend is None or not significant(trend, self.threshold_kg, self.min_readings):
            return None
        if await sent_since(ctx.db, ctx.chat_id, self.name, ctx.now - timedelta(days=QUIET_DAYS)):
            return None
        return Brief(prompt=trend_prompt(trend))
