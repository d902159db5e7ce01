"""When a job runs next: a cron expression evaluated in the job's time zone (``cronsim`` with
aware datetimes, so DST is right: 02:30 on a spring-forward day runs at 03:00, and a fall-back
hour runs once), and a natural date ("tomorrow 9:00", "in 2 hours", "Sunday") resolved with
``dateparser`` in the chat's zone. Pure."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

#: the local hour of a date given without a time ("Sunday")
DEFAULT_HOUR = 9


def _has_time(text: str) -> bool:
    lowered = text.lower()
    return any(c.isdigit() for c in lowered) or "midnight" in lowered


def valid_cron(expr: str) -> bool:
    """Whether ``expr`` is a cron expression cronsim accepts."""
    try:
        CronSim(expr, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError:
        return False
    return True


def next_run(expr: str, timezone: str, after: datetime) -> datetime:
    """The first run of ``expr`` (local to ``timezone``) strictly after ``after``, in UTC."""
    local = after.astimezone(ZoneInfo(timezone))
    nxt: datetime = next(CronSim(expr, local))
    return nxt.astimezone(UTC)


def parse_when(text: str, timezone: str, now: datetime) -> datetime | None:
    """``text`` as a moment after ``now`` (dates in ``timezone``, future preferred), in UTC;
    None when it is not a date or not in the future."""
    import dateparser  # imported on first use: its language data is large

    zone = ZoneInfo(timezone)
    local_now = now.astimezone(zone).replace(tzinfo=None)
    when = dateparser.parse(
        text,
        settings={
            "TIMEZONE": timezone,
            # naive local wall time, given its zone below: the offset of *that* day (DST)
            "RETURN_AS_TIMEZONE_AWARE": False,
            "PREFER_DATES_FROM": "future",
            "RELATIVE_BASE": local_now,
        },
    )
    if when is None:
        return None
    if (when.hour, when.minute, when.second) == (0, 0, 0) and not _has_time(text):
        when = when.replace(hour=DEFAULT_HOUR)  # "Sunday": in the morning, not at midnight
    when = when.replace(tzinfo=zone).astimezone(UTC)
    return when if when > now else None
