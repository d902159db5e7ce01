"""The one clock: every date and time a person or the model sees, in ``TIMEZONE``, one format.

Dates are ISO (``2026-02-18``); times of day are 24-hour (``09:15``) unless ``TIME_FORMAT=12h``
(``9:15 AM``); a moment is the two joined (``2026-02-18 09:15``). Every formatter takes the
instant (an aware ``datetime``; a naive one is read as UTC) and the zone (an IANA name or a
``tzinfo``) and converts first, so nothing shows a UTC date beside a local time.

The time format is a presentation choice of the whole process: the CLI sets it once from the
settings (:func:`set_time_format`) before any command runs, and a caller may still pass
``time_format`` explicitly (tests do).
"""

from __future__ import annotations

import functools
from datetime import UTC, date, datetime, time, tzinfo
from zoneinfo import ZoneInfo

TIME_FORMATS = ("24h", "12h")
_state = {"time_format": "24h"}


def set_time_format(time_format: str) -> None:
    """Make ``time_format`` (``24h`` or ``12h``) the process's default."""
    if time_format not in TIME_FORMATS:
        raise ValueError(f"time format must be one of {', '.join(TIME_FORMATS)}")
    _state["time_format"] = time_format


def time_format() -> str:
    """The process's time format (``24h`` unless :func:`set_time_format` said otherwise)."""
    return _state["time_format"]


@functools.lru_cache(maxsize=64)
def zone(tz: str | tzinfo) -> tzinfo:
    """``tz`` as a ``tzinfo`` (an IANA name is looked up once)."""
    return ZoneInfo(tz) if isinstance(tz, str) else tz


def local(at: datetime, tz: str | tzinfo) -> datetime:
    """``at`` in ``tz`` (a naive ``at`` is taken as UTC)."""
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return at.astimezone(zone(tz))


def clock_text(t: time, time_format: str | None = None) -> str:
    """A time of day: ``09:15``, or ``9:15 AM`` in the 12-hour format."""
    if (time_format or _state["time_format"]) == "12h":
        hour = t.hour % 12 or 12
        return f"{hour}:{t.minute:02d} {'AM' if t.hour < 12 else 'PM'}"
    return f"{t.hour:02d}:{t.minute:02d}"


@functools.lru_cache(maxsize=4096)
def _local_time(at: datetime, tz: str | tzinfo, time_format: str) -> str:
    return clock_text(local(at, tz).time(), time_format)


def local_time(at: datetime, tz: str | tzinfo, time_format: str | None = None) -> str:
    """The local time of day of ``at`` (cached: prompts show mostly the same rows each turn)."""
    return _local_time(at, tz, time_format or _state["time_format"])


def local_date(at: datetime | date, tz: str | tzinfo) -> str:
    """The local date of ``at``, ``2026-02-18`` (a ``date`` is shown as it is)."""
    if not isinstance(at, datetime):
        return at.isoformat()
    return local(at, tz).date().isoformat()


def local_datetime(at: datetime, tz: str | tzinfo, time_format: str | None = None) -> str:
    """The local date and time of ``at``, ``2026-02-18 09:15``."""
    return f"{local_date(at, tz)} {local_time(at, tz, time_format)}"


def timestamp_text(seconds: float, tz: str | tzinfo, time_format: str | None = None) -> str:
    """A Unix timestamp as :func:`local_datetime`."""
    return local_datetime(datetime.fromtimestamp(seconds, UTC), tz, time_format)
