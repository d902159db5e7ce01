"""The agent's journal tools (seed 000: "the existing 7 tool handlers"); with the personal
tools (``log_weight``, ``weight_history``, ``get_usage``: :mod:`memory.tools.personal_tools`)
they make :data:`JOURNAL_TOOLS`.

Entry dates are local: in the entry's own time zone when it has a valid one, else the context
time zone. Date filters compare against that local date. Every tool reads the turn's chat's
own entries only (``entries.chat_id``, migration 012; :data:`memory.journal.search.LOCAL`), and
weights are per chat too (``daily_metrics.chat_id``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import date, datetime
from typing import Any

import attrs

from memory.errors import ToolError
from memory.journal.search import LOCAL, Sql, embed_query, find_candidates
from memory.retrieval.ranking import rrf
from memory.tools.personal_tools import PERSONAL_TOOLS
from memory.tools.registry import Tool, ToolContext, ToolRegistry, tool
from memory.tools.results import excerpt, writing_stats
from memory.tools.schema import date_range, date_spec, optional_date, spec
from runtime.clock import clock_text
from runtime.db import Queries

SNIPPET_CHARS = 300
LIST_TEXT_CHARS = 2000
MAX_ENTRY_CHARS = 20_000
_TOOLS: list[Tool[Any]] = []
_SUMMARY_COLS = "le.id, le.uuid, le.local_ts, le.tags, le.city, le.text, le.word_count"


def _limit(default: int, maximum: int, what: str = "results") -> Any:
    return attrs.field(
        default=default, metadata=spec(minimum=1, maximum=maximum, description=f"Maximum {what}")
    )


def _summary(row: Any, **extra: Any) -> dict[str, Any]:
    local: datetime = row["local_ts"]
    item: dict[str, Any] = {
        "uuid": row["uuid"],
        "date": local.date().isoformat(),
        "time": clock_text(local.time()),  # the entry's own local time, in TIME_FORMAT
        "tags": list(row["tags"]),
    }
    if row["city"]:
        item["city"] = row["city"]
    item.update({k: v for k, v in extra.items() if v is not None})
    return item


def _json_value(raw: Any) -> Any:
    """A JSONB column value (asyncpg returns text without a codec)."""
    return json.loads(raw) if isinstance(raw, str) else raw


# --- search_entries (the search itself: memory.journal.search) ---------------------------------


@attrs.frozen
class SearchEntriesInput:
    query: str = attrs.field(
        metadata=spec(min_length=1, max_length=500, description="What to look for, in words")
    )
    date_from: str | None = optional_date("Earliest date")
    date_to: str | None = optional_date("Latest date")
    tags: list[str] | None = attrs.field(
        default=None,
        metadata=spec(
            max_items=20, items={"minLength": 1}, description="Only entries with any of these tags"
        ),
    )
    city: str | None = attrs.field(
        default=None, metadata=spec(max_length=100, description="Only entries written in this city")
    )
    limit: int = _limit(10, 50)


@tool(_TOOLS, "search_entries", SearchEntriesInput)
async def search_entries(ctx: ToolContext, inp: SearchEntriesInput) -> dict[str, Any]:
    """Search the journal by words and by meaning, optionally filtered by dates, tags
    (any of) and city. Returns entries with a snippet; use get_entry for the full text."""
    start, end = date_range(inp.date_from, inp.date_to)
    fts_ids, vec_ids, problem = await find_candidates(
        ctx, inp.query, start, end, inp.tags, inp.city
    )
    ids = [i for i, _ in rrf([fts_ids, vec_ids])[: inp.limit]]
    rows = await ctx.db.fetch(
        f"{LOCAL} SELECT {_SUMMARY_COLS}, CASE WHEN le.text_search @@ q THEN "
        'ts_headline(\'english\', le.text, q, \'StartSel="", StopSel="", MaxWords=45, '
        'MinWords=20, MaxFragments=2, FragmentDelimiter=" … "\') END AS headline '
        "FROM le, websearch_to_tsquery('english', $3) q WHERE le.id = ANY($4::bigint[])",
        ctx.timezone,
        ctx.chat_id,
        inp.query,
        ids,
    )
    by_id = {r["id"]: r for r in rows}
    fts_set, vec_set = set(fts_ids), set(vec_ids)
    results = []
    for i in ids:
        row = by_id[i]
        matched = [arm for arm, hit in (("text", i in fts_set), ("meaning", i in vec_set)) if hit]
        snippet = excerpt(row["headline"] or row["text"], SNIPPET_CHARS)
        results.append(_summary(row, snippet=snippet, matched=matched))
    out: dict[str, Any] = {"query": inp.query, "count": len(results), "results": results}
    out["degraded"] = problem is not None
    if problem:
        out["note"] = f"full-text search only: {problem}"
    return out


# --- get_entry / get_entries_by_date / on_this_day ----------------------------------------------


@attrs.frozen
class GetEntryInput:
    uuid: str = attrs.field(metadata=spec(min_length=1, max_length=64, description="Entry UUID"))


@tool(_TOOLS, "get_entry", GetEntryInput)
async def get_entry(ctx: ToolContext, inp: GetEntryInput) -> dict[str, Any]:
    """Read one journal entry in full, by uuid."""
    row = await ctx.db.fetchrow(
        f"{LOCAL} SELECT * FROM le WHERE le.uuid = $3", ctx.timezone, ctx.chat_id, inp.uuid
    )
    if row is None:
        raise ToolError(f"no entry with uuid {inp.uuid!r}", "uuid")
    text: str = row["text"]
    item = _summary(
        row,
        timezone=row["timezone"],
        country=row["country"],
        place_name=row["place_name"],
        latitude=row["latitude"],
        longitude=row["longitude"],
        weather=_json_value(row["weather"]),
        modified_at=row["modified_at"],
        word_count=row["word_count"],
        photos=row["photo_count"] or None,
        videos=row["video_count"] or None,
        audios=row["audio_count"] or None,
    )
    item["text"] = text[:MAX_ENTRY_CHARS]
    if len(text) > MAX_ENTRY_CHARS:
        item["truncated"] = True
    return item


@attrs.frozen
class GetEntriesByDateInput:
    date_from: str = attrs.field(metadata=date_spec("First date (YYYY-MM-DD)"))
    date_to: str | None = optional_date("Last date, inclusive; defaults to date_from")
    limit: int = _limit(20, 50, "entries")


def _with_text(row: Any, chars: int = LIST_TEXT_CHARS, **extra: Any) -> dict[str, Any]:
    text: str = row["text"]
    return _summary(row, **extra, text=text[:chars], truncated=True if len(text) > chars else None)


@tool(_TOOLS, "get_entries_by_date", GetEntriesByDateInput)
async def get_entries_by_date(ctx: ToolContext, inp: GetEntriesByDateInput) -> dict[str, Any]:
    """Read the journal entries written between two dates (inclusive), oldest first."""
    start, end = date_range(inp.date_from, inp.date_to or inp.date_from)
    sql = Sql(ctx.timezone, ctx.chat_id).filters(start, end)
    rows = await ctx.db.fetch(
        f"{LOCAL} SELECT {_SUMMARY_COLS}, count(*) OVER () AS total FROM le WHERE {sql.where} "
        f"ORDER BY le.created_at LIMIT {sql.arg(inp.limit)}",
        *sql.args,
    )
    total = rows[0]["total"] if rows else 0
    return {
        "date_from": str(start),
        "date_to": str(end),
        "total": total,
        "count": len(rows),
        "entries": [_with_text(r) for r in rows],
    }


def _check_month_day(value: Any) -> str | None:
    try:
        date.fromisoformat(f"2000-{value}")  # a leap year, so 02-29 is valid
    except ValueError:
        return f"{value!r} is not a valid month-day (MM-DD)"
    return None


@attrs.frozen
class OnThisDayInput:
    month_day: str | None = attrs.field(
        default=None,
        metadata=spec(
            pattern=r"^\d{2}-\d{2}$",
            check=_check_month_day,
            description="Month and day as MM-DD; defaults to today",
        ),
    )
    limit: int = _limit(20, 50, "entries")


async def entries_on_month_day(
    db: Queries, timezone: str, chat_id: int, month_day: str, limit: int, *, before_year: int = 0
) -> Sequence[Any]:
    """The chat's entries written on ``month_day`` (MM-DD, local) of any year (only years
    before ``before_year`` when given), newest first: ``on_this_day`` and the on-this-day
    routine."""
    return await db.fetch(
        f"{LOCAL} SELECT {_SUMMARY_COLS} FROM le WHERE to_char(le.local_ts, 'MM-DD') = $3 "
        "AND ($5::int = 0 OR extract(year FROM le.local_ts) < $5::int) "
        "ORDER BY le.local_ts DESC LIMIT $4",
        timezone,
        chat_id,
        month_day,
        limit,
        before_year,
    )


@tool(_TOOLS, "on_this_day", OnThisDayInput)
async def on_this_day(ctx: ToolContext, inp: OnThisDayInput) -> dict[str, Any]:
    """Entries written on a month-day (default today) in any year, newest year first."""
    today = ctx.today
    month_day = inp.month_day or today.strftime("%m-%d")
    rows = await entries_on_month_day(ctx.db, ctx.timezone, ctx.chat_id, month_day, inp.limit)
    entries = [
        _with_text(r, SNIPPET_CHARS * 2, years_ago=today.year - r["local_ts"].year) for r in rows
    ]
    return {"month_day": month_day, "count": len(entries), "entries": entries}


# --- find_similar / list_tags / entry_stats -----------------------------------------------------


@attrs.frozen
class FindSimilarInput:
    uuid: str = attrs.field(metadata=spec(min_length=1, max_length=64, description="Entry UUID"))
    limit: int = _limit(5, 20)


@tool(_TOOLS, "find_similar", FindSimilarInput)
async def find_similar(ctx: ToolContext, inp: FindSimilarInput) -> dict[str, Any]:
    """Entries closest in meaning to a given entry (excluding the entry itself)."""
    if ctx.embedder is None:
        raise ToolError("semantic search is unavailable (no embedding model configured)")
    model = ctx.embedder.model
    src = await ctx.db.fetchrow(
        "SELECT e.id, e.text, ee.embedding FROM entries e LEFT JOIN entry_embeddings ee "
        "ON ee.entry_id = e.id AND ee.model = $2 WHERE e.uuid = $1 AND e.chat_id = $3",
        inp.uuid,
        model,
        ctx.chat_id,
    )
    if src is None:
        raise ToolError(f"no entry with uuid {inp.uuid!r}", "uuid")
    vector = src["embedding"]
    if vector is None:
        vector, problem = await embed_query(ctx, src["text"])
        if vector is None:
            raise ToolError(f"semantic search is unavailable: {problem}")
    rows = await ctx.db.fetch(
        f"{LOCAL} SELECT {_SUMMARY_COLS}, 1 - (ee.embedding <=> $6::vector) AS similarity "
        "FROM le JOIN entry_embeddings ee ON ee.chat_id = $2 AND ee.entry_id = le.id "
        "AND ee.model = $3 AND ee.dims = vector_dims($6::vector) WHERE le.id <> $4 "
        "ORDER BY ee.embedding <=> $6::vector, le.created_at LIMIT $5",
        ctx.timezone,
        ctx.chat_id,
        model,
        src["id"],
        inp.limit,
        vector,
    )
    results = [
        _summary(
            r,
            similarity=round(float(r["similarity"]), 3),
            snippet=excerpt(r["text"], SNIPPET_CHARS),
        )
        for r in rows
    ]
    return {"uuid": inp.uuid, "count": len(results), "results": results}


@attrs.frozen
class ListTagsInput:
    pass


@tool(_TOOLS, "list_tags", ListTagsInput)
async def list_tags(ctx: ToolContext, inp: ListTagsInput) -> dict[str, Any]:
    """All journal tags with their entry counts, most used first."""
    rows = await ctx.db.fetch(
        "SELECT t AS tag, count(*) AS n FROM entries, unnest(tags) t WHERE chat_id = $1 "
        "GROUP BY t ORDER BY n DESC, t",
        ctx.chat_id,
    )
    return {"count": len(rows), "tags": [{"tag": r["tag"], "count": r["n"]} for r in rows]}


@attrs.frozen
class EntryStatsInput:
    date_from: str | None = optional_date("Earliest date")
    date_to: str | None = optional_date("Latest date")


@tool(_TOOLS, "entry_stats", EntryStatsInput)
async def entry_stats(ctx: ToolContext, inp: EntryStatsInput) -> dict[str, Any]:
    """Journal writing statistics: entry and word totals, entries per weekday and month,
    entries per week, longest and current streak of consecutive days."""
    start, end = date_range(inp.date_from, inp.date_to)
    sql = Sql(ctx.timezone, ctx.chat_id).filters(start, end)
    rows = await ctx.db.fetch(
        f"{LOCAL} SELECT le.local_ts::date AS day, count(*) AS n, "
        f"coalesce(sum(le.word_count), 0) AS words FROM le WHERE {sql.where} GROUP BY 1",
        *sql.args,
    )
    per_day = {r["day"]: int(r["n"]) for r in rows}
    words = sum(int(r["words"]) for r in rows)
    return writing_stats(per_day, words, ctx.today, start, end)


# --- registry ---------------------------------------------------------------------------------


def journal_registry() -> ToolRegistry:
    """A registry with every journal tool and the personal tools."""
    return ToolRegistry(JOURNAL_TOOLS)


#: every journal tool and the personal tools, in the order they are offered
JOURNAL_TOOLS: tuple[Tool[Any], ...] = (*_TOOLS, *PERSONAL_TOOLS)
