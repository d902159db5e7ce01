"""weekly-recap (Sunday 18:00; daily with ``/digest daily``, the job's payload ``days``: 1):
the patterns created or reinforced over the period and their top themes, for the model to recap;
nothing created or reinforced (or a recap already sent today): nothing to say."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import attrs

from actors.scheduler.routine import Brief, RoutineContext
from actors.scheduler.routines.days import sent_today
from memory.untrusted import wrap_untrusted

DEFAULT_DAYS = 7
MAX_DAYS = 31
MAX_PATTERNS = 12

# created in the period, or reinforced in it (a reinforcement raises times_seen and moves
# last_seen to the observation's time, memory/patterns/writes.py); by (chat_id, status)
_PERIOD = """
SELECT content, kind, created_at >= $2 AS created, times_seen
FROM patterns
WHERE chat_id = $1 AND status = 'active'
  AND (created_at >= $2 AND created_at < $3
       OR times_seen > 1 AND last_seen >= $2 AND last_seen < $3)
ORDER BY (created_at >= $2) DESC, times_seen DESC, strength DESC, id
"""

_THEMES = {
    "behavior": "habits",
    "emotion": "feelings",
    "belief": "beliefs",
    "goal": "goals",
    "preference": "preferences",
    "temporal": "rhythms",
    "causal": "causes and effects",
    "fact": "facts about their life",
    "event": "plans and events",
}


def recap_prompt(rows: Sequence[Any], days: int) -> str:
    """The routine turn's prompt: counts, top themes, and the patterns (the person's own
    memory: untrusted text)."""
    created = sum(1 for r in rows if r["created"])
    themes = Counter(_THEMES.get(r["kind"], r["kind"]) for r in rows).most_common(3)
    period = "this week" if days == 7 else "today" if days == 1 else f"the last {days} days"
    lines = [
        f"{'+' if r['created'] else '↻'} {r['content']}"
        + ("" if r["created"] else f" (seen {r['times_seen']}×)")
        for r in rows[:MAX_PATTERNS]
    ]
    return (
        f"Write a short, warm recap of what you learned about the person {period}: "
        f"{created} new things noticed, {len(rows) - created} confirmed again; top themes: "
        f"{', '.join(f'{t} ({n})' for t, n in themes)}. Mention two or three of them, in "
        "your own words, and what they might mean for the person; no list of everything. "
        "If nothing here is worth a message, decline.\n"
        + wrap_untrusted("memory", "\n".join(lines))
    )


def period_days(payload: Mapping[str, Any]) -> int:
    """The recap's period from the job's payload (``days``: 1 for ``/digest daily``), else a
    week; anything but a whole number of days from 1 to 31 is a week."""
    days = payload.get("days", DEFAULT_DAYS)
    ok = isinstance(days, int) and not isinstance(days, bool) and 1 <= days <= MAX_DAYS
    return days if ok else DEFAULT_DAYS


@attrs.frozen
class WeeklyRecap:
    name: str = "weekly-recap"
    title: str = "Weekly recap of what I learned"
    default_schedule: str = "0 18 * * 0"

    async def decide(self, ctx: RoutineContext) -> Brief | None:
        days = period_days(ctx.payload)
        rows = await ctx.db.fetch(_PERIOD, ctx.chat_id, ctx.now - timedelta(days=days), ctx.now)
        if not rows or await sent_today(ctx, self.name):
            return None
        return Brief(prompt=recap_prompt(rows, days))
