"""The recent window as the model reads it, rendered as seed 004 does it: a day separator line
when the local date changes, and every message stamped with its local time and how long ago it
was sent::

    ─── Monday, 18 February 2026 ───
    [09:15, 2 hours ago] User: Can you add the API design task to my goals?
    [09:17, 2 hours ago] Assistant: Added.

Tool activity is shown as ``called <tool> {...}`` lines and results inside ``<untrusted>``
tags. A message a routine sent (seed 004, "Phase 2.5") shows its summary under the routine's
name, ``Assistant [weekly-recap @ 07:02, 8 hours ago]: <summary>``; its full text stays for
``recall_conversation``. :func:`split_window` cuts the window into cacheable older blocks
and the latest rows (:mod:`actors.agent.context` says why); :func:`window_parts` renders
both. Pure: the caller passes ``now`` and the time zone.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from datetime import date, datetime
from zoneinfo import ZoneInfo

from memory.conversation.messages import ChatMessage, render_tool_call, render_tool_result
from runtime.clock import local_time
from runtime.words import count

SEPARATOR = "───"
HISTORY_HEADER = "═══ CONVERSATION HISTORY ═══"
LATEST_HEADER = "═══ LATEST MESSAGES (the conversation history continued) ═══"
NO_HISTORY = "(no earlier messages)"
#: the newest window rows always shown with their age, at least (see :func:`split_window`);
#: chosen with bench/cost.py (README, Performance)
RECENT_ROWS = 2
#: the window's older rows are cached in blocks of this many rows
BLOCK_ROWS = 4


def relative_time(then: datetime, now: datetime) -> str:
    """How long ago ``then`` was: "just now", "5 minutes ago", "2 hours ago", "yesterday"
    (24 to 48 hours), "3 days ago"."""
    seconds = (now - then).total_seconds()
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        minutes = int(seconds // 60)
        return f"{count(minutes, 'minute')} ago"
    hours = seconds / 3600
    if hours < 24:
        n = max(1, min(23, round(hours)))
        return f"{count(n, 'hour')} ago"
    if hours < 48:
        return "yesterday"
    return f"{max(2, round(hours / 24))} days ago"


def local(at: datetime, tz: ZoneInfo) -> datetime:
    """``at`` in ``tz`` (naive datetimes are taken as UTC)."""
    if at.tzinfo is None:
        at = at.replace(tzinfo=ZoneInfo("UTC"))
    return at.astimezone(tz)


def clock_time(at: datetime, tz: ZoneInfo) -> str:
    """Local time of day, "07:02" ("7:02 AM" with TIME_FORMAT=12h): :func:`runtime.clock.local_time`
    (cached there: the window shows mostly the same rows each turn)."""
    return local_time(at, tz)


@functools.lru_cache(maxsize=4096)
def local_day(at: datetime, tz: ZoneInfo) -> date:
    """The local date of ``at`` (cached like :func:`clock_time`)."""
    return local(at, tz).date()


def day_label(at: datetime, tz: ZoneInfo) -> str:
    """Local date, "Monday, 18 February 2026"."""
    d = local(at, tz)
    return f"{d:%A}, {d.day} {d:%B %Y}"


def day_separator(at: datetime, tz: ZoneInfo) -> str:
    """The line opening a new local day in the window."""
    return f"{SEPARATOR} {day_label(at, tz)} {SEPARATOR}"


def format_message(row: ChatMessage, tz: ZoneInfo, now: datetime | None) -> list[str]:
    """The window lines of one row (an assistant row with calls gives a line per call); its
    stamp carries the relative age unless ``now`` is None."""
    age = "" if now is None else f", {relative_time(row.created_at, now)}"
    stamp = f"[{clock_time(row.created_at, tz)}{age}]"
    if row.is_routine:
        return [routine_line(row, tz, age)]
    if row.role == "user":
        return [f"{stamp} User: {row.content}"]
    if row.role == "tool_result":
        return [f"{stamp} Result of {row.tool_name or 'tool'}:\n{render_tool_result(row)}"]
    lines = [f"{stamp} Assistant: {row.content}"] if row.content.strip() else []
    lines += [f"{stamp} Assistant called {render_tool_call(c)}" for c in row.tool_calls]
    return lines


def routine_line(row: ChatMessage, tz: ZoneInfo, age: str = "") -> str:
    """A routine's message as the window shows it: its name, local time (and ``age``) and
    summary, not its full text."""
    summary = " ".join((row.summary or row.content).split())
    return f"Assistant [{row.routine_name} @ {clock_time(row.created_at, tz)}{age}]: {summary}"


def format_window(rows: Iterable[ChatMessage], timezone: str, now: datetime) -> str:
    """The recent window as text: day separators, local times, relative ages."""
    tz = ZoneInfo(timezone)
    lines: list[str] = []
    current = None
    for row in rows:
        day = local_day(row.created_at, tz)
        if day != current:
            if lines:
                lines.append("")
            lines.append(day_separator(row.created_at, tz))
            current = day
        lines += format_message(row, tz, now)
    return "\n".join(lines)


def split_window(
    rows: Sequence[ChatMessage], recent_rows: int = RECENT_ROWS, block_rows: int = BLOCK_ROWS
) -> tuple[list[Sequence[ChatMessage]], Sequence[ChatMessage]]:
    """The window's older rows in whole blocks of ``block_rows`` counted from its first row,
    and the rest (at least ``recent_rows`` newest rows, fewer than ``recent_rows +
    block_rows``): the boundary moves only in steps of a block."""
    stable = max(0, len(rows) - recent_rows) // block_rows * block_rows
    blocks = [rows[i : i + block_rows] for i in range(0, stable, block_rows)]
    return blocks, rows[stable:]


def window_parts(
    rows: Sequence[ChatMessage],
    timezone: str,
    now: datetime,
    *,
    recent_rows: int = RECENT_ROWS,
    block_rows: int = BLOCK_ROWS,
) -> tuple[tuple[str, ...], str]:
    """The window as sent: the older blocks' texts (local times; the first opens the history)
    and the latest rows' text (relative ages too; opened by its day's separator)."""
    tz = ZoneInfo(timezone)
    blocks, recent = split_window(rows, recent_rows, block_rows)
    older: list[str] = []
    current = None
    for block in blocks:
        lines = [HISTORY_HEADER] if not older else []
        for row in block:
            day = local_day(row.created_at, tz)
            if day != current:
                if current is not None:
                    lines.append("")
                lines.append(day_separator(row.created_at, tz))
                current = day
            lines += format_message(row, tz, None)
        older.append("\n".join(lines))
    if not recent:
        return tuple(older), "" if older else f"{HISTORY_HEADER}\n{NO_HISTORY}"
    header = LATEST_HEADER if older else HISTORY_HEADER
    return tuple(older), f"{header}\n{format_window(recent, timezone, now)}"
