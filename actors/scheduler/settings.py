"""The proactive settings section: the scheduler's tick, the gates' defaults (each chat may
override quiet hours, cap and cooldown), the weight-trend threshold and the heartbeat's."""

from __future__ import annotations

from typing import ClassVar

import attrs

from runtime.parsers import float_range, int_range
from runtime.settings import Field, SettingsSection

#: quiet hours as (start hour, end hour), local; None: no quiet hours
QuietHours = tuple[int, int] | None


def quiet_hours(raw: str) -> QuietHours:
    """``22-8`` -> (22, 8): from 22:00 to 08:00 local; ``off`` or empty: none."""
    value = raw.strip().lower()
    if value in ("", "off"):
        return None
    start, sep, end = value.partition("-")
    try:
        hours = (int(start), int(end))
    except ValueError:
        raise ValueError(f"expected hours like 22-8 (or off), got {raw.strip()!r}") from None
    if not sep or not all(0 <= h <= 23 for h in hours) or hours[0] == hours[1]:
        raise ValueError(f"expected two different hours 0-23 like 22-8, got {raw.strip()!r}")
    return hours


@attrs.frozen(kw_only=True, slots=False)
class ProactiveSettings(SettingsSection):
    """When engram may speak first."""

    fields: ClassVar[tuple[Field, ...]] = (
        Field(
            "PROACTIVE_TICK",
            "proactive_tick",
            "30",
            float_range(0.05, 3600.0),
            "Seconds between the scheduler's looks for due jobs (a new reminder wakes it at once).",
        ),
        Field(
            "PROACTIVE_QUIET_HOURS",
            "proactive_quiet_hours",
            "22-8",
            quiet_hours,
            "Local hours when no check-in is sent (`22-8`: 22:00-08:00; `off`: none); "
            "per chat: /quiet.",
        ),
        Field(
            "PROACTIVE_MAX_PER_DAY",
            "proactive_max_per_day",
            "2",
            int_range(0, 100),
            "Most check-ins a chat gets per local day (reminders the person asked for do "
            "not count against it).",
        ),
        Field(
            "PROACTIVE_COOLDOWN",
            "proactive_cooldown",
            "14400",
            int_range(0, 7 * 86400),
            "Seconds after any check-in before the next one may be sent.",
        ),
        Field(
            "PROACTIVE_ACTIVE_GUARD",
            "proactive_active_guard",
            "600",
            int_range(0, 86400),
            "A check-in waits while the person wrote in the last this many seconds.",
        ),
        Field(
            "PROACTIVE_GRACE",
            "proactive_grace",
            "3600",
            int_range(0, 7 * 86400),
            "A run missed (process down, a gate closed) by more than this many seconds is "
            "skipped and logged instead of sent late.",
        ),
    )

    proactive_tick: float
    proactive_quiet_hours: QuietHours
    proactive_max_per_day: int
    proactive_cooldown: int
    proactive_active_guard: int
    proactive_grace: int
