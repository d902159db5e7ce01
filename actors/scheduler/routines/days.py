"""What every routine's rule shares: the local day of a run in the chat's zone, its bounds as
instants (DST-safe: a local day may last 23 or 25 hours), and whether the routine already sent
something since an instant (its ``proactive_runs`` rows: a rule says a thing once)."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from actors.scheduler.routine import RoutineContext
from runtime.db import Queries


def local_now(ctx: RoutineContext) -> datetime:
    """The moment of the run in the chat's zone."""
    return ctx.now.astimezone(ZoneInfo(ctx.timezone))


def day_bounds(day: date, timezone: str) -> tuple[datetime, datetime]:
    """The instants a local day starts and ends (end exclusive), in ``timezone``."""
    tz = ZoneInfo(timezone)
    return datetime.combine(day, time(), tz), datetime.combine(day + timedelta(days=1), time(), tz)


_SENT_SINCE = """
SELECT EXISTS (SELECT 1 FROM proactive_runs
               WHERE chat_id = $1 AND at >= $3 AND name = $2 AND outcome = 'sent')
"""


async def sent_since(db: Queries, chat_id: int, name: str, since: datetime) -> bool:
    """Whether the routine ``name`` sent something to the chat at or after ``since``."""
    return bool(await db.fetchval(_SENT_SINCE, chat_id, name, since))


async def sent_today(ctx: RoutineContext, name: str) -> bool:
    """Whether the routine ``name`` already sent something this local day (a repeated or
    deferred run of a daily routine says nothing twice)."""
    start, _ = day_bounds(local_now(ctx).date(), ctx.timezone)
    return await sent_since(ctx.db, ctx.chat_id, name, start)
