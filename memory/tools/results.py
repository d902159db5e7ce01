"""Pure shaping of tool results: excerpts, writing statistics, the usage report, truncation for
storage (seed 000, "Tool result truncation for storage").

The model sees a tool's full result during its turn; ``chat_messages`` keeps only what the
compaction extractor needs (:func:`truncate_for_storage`); text put into a later prompt goes
inside ``<untrusted>`` tags (:mod:`memory.untrusted`).
"""

from __future__ import annotations

import calendar
import json
import re
from collections.abc import Mapping
from datetime import date, timedelta
from typing import Any

from memory.llm.usage import Spend, UsageSummary

STORAGE_CAP = 500
ITEM_TEXT_CHARS = 100
ELLIPSIS = "…"

#: tools whose result is a list of entries, and the key holding it
LIST_TOOLS: Mapping[str, str] = {
    "search_entries": "results",
    "find_similar": "results",
    "get_entries_by_date": "entries",
    "on_this_day": "entries",
    "list_tags": "tags",
}
_HEADER_KEYS = ("query", "uuid", "month_day", "date_from", "date_to", "total", "degraded")
_TEXT_KEYS = ("snippet", "text", "excerpt")
_STORED_IN_FULL = frozenset({"log_weight"})


def excerpt(text: str, chars: int) -> str:
    """Whitespace-collapsed start of ``text`` in at most ``chars`` characters, cut at a word
    boundary when one is near, ending in "…" when cut."""
    flat = re.sub(r"\s+", " ", text).strip()
    if len(flat) <= chars:
        return flat
    if chars <= 1:
        return ELLIPSIS[:chars]
    cut = flat[: chars - 1]
    space = cut.rfind(" ")
    if flat[chars - 1] != " " and space > (chars - 1) // 2:
        cut = cut[:space]  # do not end inside a word
    return cut.rstrip(" ,.;:") + ELLIPSIS


# --- writing statistics --------------------------------------------------------------------------


def streaks(days: set[date], today: date) -> tuple[tuple[int, date | None, date | None], int]:
    """``((longest, start, end), current)`` over runs of consecutive days with an entry.

    The current streak ends today, or yesterday when there is no entry yet today; else it is 0.
    Of equally long streaks the most recent is reported as the longest.
    """
    one = timedelta(days=1)
    best: tuple[int, date | None, date | None] = (0, None, None)
    run, run_start, prev = 0, None, None
    for day in sorted(days):
        run, run_start = (run + 1, run_start) if prev and day == prev + one else (1, day)
        if run >= best[0]:
            best = (run, run_start, day)
        prev = day
    cursor = today if today in days else today - one
    current = 0
    while cursor in days:
        current, cursor = current + 1, cursor - one
    return best, current


def writing_stats(
    per_day: Mapping[date, int],
    words: int,
    today: date,
    date_from: date | None = None,
    date_to: date | None = None,
) -> dict[str, Any]:
    """Totals, weekday/month counts, entries per week and streaks from entries per local day.

    Entries per week spans ``date_from``..``date_to`` when given, else the first..last entry
    day (at least one week).
    """
    total = sum(per_day.values())
    by_weekday = dict.fromkeys(calendar.day_name, 0)
    by_month = dict.fromkeys(calendar.month_name[1:], 0)
    for day, n in per_day.items():
        by_weekday[calendar.day_name[day.weekday()]] += n
        by_month[calendar.month_name[day.month]] += n
    (longest, l_start, l_end), current = streaks({d for d, n in per_day.items() if n}, today)
    first, last = (min(per_day), max(per_day)) if per_day else (None, None)
    span_start, span_end = date_from or first, date_to or last
    span = (span_end - span_start).days + 1 if span_start and span_end else 0
    return {
        "total_entries": total,
        "first_date": first,
        "last_date": last,
        "days_with_entries": len(per_day),
        "total_words": words,
        "average_words": round(words / total, 1) if total else 0,
        "entries_per_week": round(total * 7 / max(span, 7), 2) if total else 0,
        "by_weekday": by_weekday,
        "by_month": by_month,
        "longest_streak": {"days": longest, "start": l_start, "end": l_end},
        "current_streak": {"days": current},
    }


def _spend(groups: Mapping[str, Spend]) -> dict[str, Any]:
    return {k: {"calls": v.calls, "cost_usd": round(v.cost_usd, 4)} for k, v in groups.items()}


#: what ``get_usage`` counts (``memory.llm.usage.usage_summary`` with ``include_shared``)
USAGE_SCOPE = (
    "this chat (its journal imports too), plus calls that belong to no chat (embedding backfill)"
)


def usage_report(summary: UsageSummary, date_from: date, date_to: date) -> dict[str, Any]:
    """The ``get_usage`` result: spend in USD by purpose, model and day."""
    return {
        "date_from": date_from,
        "date_to": date_to,
        "scope": USAGE_SCOPE,
        "total_usd": round(summary.total.cost_usd, 4),
        "calls": summary.total.calls,
        "failed_calls": summary.total.failed,
        "tokens": {
            "input": summary.total.input_tokens,
            "output": summary.total.output_tokens,
            "of_input_read_from_cache": summary.total.cache_read_tokens,
            "of_input_written_to_cache": summary.total.cache_write_tokens,
        },
        "by_purpose": _spend(summary.by_purpose),
        "by_model": _spend(summary.by_model),
        "by_day": [
            {"date": d.day, "calls": d.calls, "cost_usd": round(d.cost_usd, 4)}
            for d in summary.by_day
        ],
    }


# --- truncation for storage ----------------------------------------------------------------------


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _cut(text: str, cap: int) -> str:
    return text if len(text) <= cap else text[: cap - 1] + ELLIPSIS


def _brief(item: Mapping[str, Any]) -> dict[str, Any]:
    """uuid, date and the first ~100 characters of one listed entry (or a tag count)."""
    if "uuid" not in item:
        return dict(item)
    out = {k: item[k] for k in ("uuid", "date") if k in item}
    text = next((item[k] for k in _TEXT_KEYS if isinstance(item.get(k), str)), None)
    if text is not None:
        out["text"] = excerpt(text, ITEM_TEXT_CHARS)
    return out


def _fit_list(data: Mapping[str, Any], key: str, cap: int) -> str:
    """The header fields and as many brief items as fit, with ``omitted`` counting the rest."""
    header = {k: data[k] for k in _HEADER_KEYS if k in data}
    items = [_brief(i) for i in data[key] if isinstance(i, Mapping)]
    kept = len(items)
    while True:
        body = {**header, key: items[:kept]}
        if kept < len(items):
            body["omitted"] = len(items) - kept
        text = _dumps(body)
        if len(text) <= cap or kept == 0:
            return _cut(text, cap)
        kept -= 1


def _fit_entry(data: Mapping[str, Any], cap: int) -> str:
    """uuid, date, tags and as much of the body as fits."""
    body = {k: data[k] for k in ("uuid", "date", "tags") if k in data}
    text = data.get("text") if isinstance(data.get("text"), str) else ""
    room = cap - len(_dumps({**body, "text": ""}))
    while room > 0:
        out = _dumps({**body, "text": excerpt(str(text), room)})
        if len(out) <= cap:
            return out
        room -= len(out) - cap
    return _cut(_dumps(body), cap)


def truncate_for_storage(tool_name: str, content: str, cap: int = STORAGE_CAP) -> str:
    """What to keep of a tool result (JSON text) in ``chat_messages``: at most ``cap`` chars.

    List tools keep uuids, dates and ~100 characters per entry; ``get_entry`` keeps uuid, date,
    tags and a truncated body; ``log_weight`` is kept in full; anything else is cut at ``cap``.
    """
    if tool_name in _STORED_IN_FULL or len(content) <= cap:
        return content
    try:
        data = json.loads(content)
    except ValueError:
        return _cut(content, cap)
    if not isinstance(data, dict) or "error" in data:
        return _cut(content, cap)
    key = LIST_TOOLS.get(tool_name)
    if key is not None and isinstance(data.get(key), list):
        return _fit_list(data, key, cap)
    if tool_name == "get_entry":
        return _fit_entry(data, cap)
    return _cut(content, cap)
