"""event-reminders (08:00 and 19:00): the chat's stored ``event`` memories (migration 004) —
the morning run names today's events, the evening run tomorrow's — sent as they are (no model
call); no such event, or this run's slot already sent (a deferred or repeated run): nothing.
Each event is so reminded at most once the evening before and once the morning of."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime, time, timedelta
from typing import Any, Literal

import attrs

from actors.scheduler.routine import Brief, RoutineContext
from actors.scheduler.routines.days import local_now, sent_since
from runtime.clock import clock_text

#: runs before this local hour are the morning run (today's events), later ones the evening's
EVENING_FROM = 14
MAX_EVENTS = 10

_EVENTS = """
SELECT content, occurs_at FROM patterns
WHERE chat_id = $1 AND occurs_on = $2 AND kind = 'event' AND status = 'active'
ORDER BY occurs_at NULLS FIRST, id LIMIT $3
"""


@attrs.frozen
class Slot:
    """Which events a run reminds of: the day, how it is named, and when the slot began."""

    day: date
    label: Literal["Today", "Tomorrow"]
    since: datetime


def slot(now_local: datetime) -> Slot:
    """The morning run's slot (from local midnight: today's events) or the evening's (from
    EVENING_FROM: tomorrow's)."""
    today = now_local.date()
    if now_local.hour < EVENING_FROM:
        return Slot(today, "Today", datetime.combine(today, time(), now_local.tzinfo))
    since = datetime.combine(today, time(EVENING_FROM), now_local.tzinfo)
    return Slot(today + timedelta(days=1), "Tomorrow", since)


def reminder_text(label: str, events: Sequence[Any]) -> str:
    """``📅 Today: …`` — one line per event, its local time first when it has one."""
    lines = [
        f"• {clock_text(e['occurs_at'])} {e['content']}" if e["occurs_at"] else f"• {e['content']}"
        for e in events
    ]
    return f"📅 {label}:\n" + "\n".join(lines)


@attrs.frozen
class EventReminders:
    name: str = "event-reminders"
    title: str = "Reminders of your events (evening before, morning of)"
    default_schedule: str = "0 8,19 * * *"

    async def decide(self, ctx: RoutineContext) -> Brief | None:
        s = slot(local_now(ctx))
        events = await ctx.db.fetch(_EVENTS, ctx.chat_id, s.day, MAX_EVENTS)
        if not events or await sent_since(ctx.db, ctx.chat_id, self.name, s.since):
            return None
        return Brief(text=reminder_text(s.label, events))
