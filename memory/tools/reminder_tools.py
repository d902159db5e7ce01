"""``schedule_reminder``: a promise to remind is kept by a job, never only said (issue 22).

The tool asks the turn's :class:`~memory.tools.registry.Reminders` (the scheduler's, the same
code as ``/remind``) to create the one-shot job; its result carries the confirmed local time the
reply tells the person. Without reminders (no scheduler) it refuses.
"""

from __future__ import annotations

from typing import Any

import attrs

from memory.errors import ToolError
from memory.tools.registry import Tool, ToolContext, tool
from memory.tools.schema import spec

_TOOLS: list[Tool[Any]] = []


@attrs.frozen
class ScheduleReminderInput:
    when: str = attrs.field(
        metadata=spec(
            min_length=1,
            max_length=100,
            description="When, in the person's words or a clear date and time in their time "
            "zone: 'tomorrow 9:00', 'in 2 hours', 'Sunday', '2026-05-03 18:30'",
        )
    )
    what: str = attrs.field(
        metadata=spec(
            min_length=1,
            max_length=500,
            description="What to remind them of, as the reminder's text ('call mum')",
        )
    )


@tool(_TOOLS, "schedule_reminder", ScheduleReminderInput)
async def schedule_reminder(ctx: ToolContext, inp: ScheduleReminderInput) -> dict[str, Any]:
    """Set a reminder that will be sent to the person at a given time. Call it every time you
    promise to remind them of something, in the same reply (a promise without this call is not
    kept). The result has the confirmed local date and time: tell them that."""
    if ctx.reminders is None:
        raise ToolError("reminders are not available in this chat", "when")
    return dict(await ctx.reminders.schedule(inp.when, inp.what, ctx.now))


REMINDER_TOOLS: tuple[Tool[Any], ...] = tuple(_TOOLS)
