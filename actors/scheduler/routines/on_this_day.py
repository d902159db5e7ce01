"""on-this-day (10:00): the chat's journal entries written on today's month-day in earlier years
(the ``on_this_day`` query of :mod:`memory.journal.tools`) -> the model may bring one up; none
(or already sent today): nothing to say."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from actors.scheduler.routine import Brief, RoutineContext
from actors.scheduler.routines.days import local_now, sent_today
from memory.journal.tools import entries_on_month_day
from memory.tools.results import excerpt
from memory.untrusted import wrap_untrusted

MAX_ENTRIES = 3
EXCERPT_CHARS = 600


def memories_prompt(rows: Sequence[Any], year: int) -> str:
    """The routine turn's prompt: the entries (journal text: untrusted), years ago each."""
    parts = [
        wrap_untrusted(
            f"journal {r['local_ts']:%Y-%m-%d} ({year - r['local_ts'].year} years ago)",
            excerpt(r["text"], EXCERPT_CHARS),
        )
        for r in rows
    ]
    return (
        "On this day in earlier years the person wrote the journal entries below. If one of "
        "them is worth a gentle 'on this day' note (a memory, a change since, a question), "
        "write a short one about it; if none is (painful, trivial), decline.\n" + "\n".join(parts)
    )


@attrs.frozen
class OnThisDay:
    name: str = "on-this-day"
    title: str = "On this day in your journal"
    default_schedule: str = "0 10 * * *"

    async def decide(self, ctx: RoutineContext) -> Brief | None:
        today = local_now(ctx).date()
        rows = await entries_on_month_day(
            ctx.db,
            ctx.timezone,
            ctx.chat_id,
            f"{today:%m-%d}",
            MAX_ENTRIES,
            before_year=today.year,
        )
        rows = [r for r in rows if r["text"].strip()]
        if not rows or await sent_today(ctx, self.name):
            return None
        return Brief(prompt=memories_prompt(rows, today.year))
