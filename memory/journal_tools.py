"""The agent's journal tools (seed 000: "the existing 7 tool handlers"), ``log_weight`` and
``get_usage``.

Entry dates are local: in the entry's own time zone when it has a valid one, else the context
time zone. Date filters compare against that local date. The journal is not chat-scoped;
weights are (``daily_metrics.chat_id``).
"""

from __future__ import annotations

import json
from datetime import date, datetime, time, timedelta
from typing import Any

import attrs

from memory.embedding_store import check_model
from memory.ranking import rrf
from memory.tool_results import excerpt, usage_report, writing_stats
from memory.tools import (
    Tool,
    ToolContext,
    ToolError,
    ToolRegistry,
    date_spec,
    spec,
    tool,
)
from memory.usage import usage_summary
from runtime.logs import get_logger

log = get_logger(__name__)

EMBED_PURPOSE = "embedding"
SNIPPET_CHARS = 300
LIST_TEXT_CHARS = 2000
MAX_ENTRY_CHARS = 20_000
CANDIDATES_PER_ARM = 100
#: full-text matches ranked per search (the newest ones; see ``_text_arm``)
FTS_POOL = 200
#: filters leaving at most this many entries: exact vector scan of them, else the HNSW index
EXACT_MAX = 2000
#: nearest rows taken from the index before filters (a filter passes > EXACT_MAX entries)
ANN_K = 400
#: ``hnsw.ef_search`` of a search (>= the rows asked of the index; pgvector's default is 40)
EF_SEARCH = 100

# Every query below takes the context time zone as $1 and reads entries through ``le``. An
# entry's zone is a valid one or NULL (checked on import, and by the trigger of migration 003
# for any other writer), so it is used as is: no per-query lookup in pg_timezone_names.
# NOT MATERIALIZED: a statement that reads ``le`` twice must not copy the whole journal.
_LOCAL = """
WITH le AS NOT MATERIALIZED (
    SELECT e.*, (e.created_at AT TIME ZONE coalesce(e.timezone, $1)) AS local_ts
    FROM entries e
)
"""
_TOOLS: list[Tool[Any]] = []
_SUMMARY_COLS = "le.id, le.uuid, le.local_ts, le.tags, le.city, le.text, le.word_count"


class _Sql:
    """Positional parameters and WHERE conditions for the entry filters."""

    def __init__(self, tz: str) -> None:
        self.args: list[Any] = [tz]
        self.conds: list[str] = ["TRUE"]

    def arg(self, value: Any) -> str:
        self.args.append(value)
        return f"${len(self.args)}"

    def filters(
        self,
        date_from: date | None = None,
        date_to: date | None = None,
        tags: list[str] | None = None,
        city: str | None = None,
    ) -> _Sql:
        # UTC offsets lie within -12 h .. +14 h, so a local day lies within one UTC day either
        # side of it: the bounds on created_at change no result and let its index narrow
        if date_from is not None:
            start = self.arg(date_from)
            self.conds.append(f"le.local_ts >= {start}::date")
            self.conds.append(f"le.created_at >= ({start}::date - 1)::timestamp AT TIME ZONE 'UTC'")
        if date_to is not None:
            end = self.arg(date_to)
            self.conds.append(f"le.local_ts < {end}::date + 1")
            self.conds.append(f"le.created_at < ({end}::date + 2)::timestamp AT TIME ZONE 'UTC'")
        if tags:
            lowered = self.arg([t.lower() for t in tags])
            self.conds.append(
                f"EXISTS (SELECT 1 FROM unnest(le.tags) t WHERE lower(t) = ANY({lowered}::text[]))"
            )
        if city:
            self.conds.append(f"lower(le.city) = lower({self.arg(city)})")
        return self

    @property
    def filtered(self) -> bool:
        return len(self.conds) > 1

    @property
    def where(self) -> str:
        return " AND ".join(self.conds)


def _limit(default: int, maximum: int, what: str = "results") -> Any:
    return attrs.field(
        default=default, metadata=spec(minimum=1, maximum=maximum, description=f"Maximum {what}")
    )


def _optional_date(description: str) -> Any:
    return attrs.field(default=None, metadata=date_spec(description))


def _day(value: str | None) -> date | None:
    return None if value is None else date.fromisoformat(value)


def _range(date_from: str | None, date_to: str | None) -> tuple[date | None, date | None]:
    start, end = _day(date_from), _day(date_to)
    if start and end and start > end:
        raise ToolError("date_from must not be after date_to", "date_from")
    return start, end


def _summary(row: Any, **extra: Any) -> dict[str, Any]:
    local: datetime = row["local_ts"]
    item: dict[str, Any] = {
        "uuid": row["uuid"],
        "date": local.date().isoformat(),
        "time": local.strftime("%H:%M"),
        "tags": list(row["tags"]),
    }
    if row["city"]:
        item["city"] = row["city"]
    item.update({k: v for k, v in extra.items() if v is not None})
    return item


def _json_value(raw: Any) -> Any:
    """A JSONB column value (asyncpg returns text without a codec)."""
    return json.loads(raw) if isinstance(raw, str) else raw


# --- search_entries ----------------------------------------------------------------------------


@attrs.frozen
class SearchEntriesInput:
    query: str = attrs.field(
        metadata=spec(min_length=1, max_length=500, description="What to look for, in words")
    )
    date_from: str | None = _optional_date("Earliest date")
    date_to: str | None = _optional_date("Latest date")
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


async def _embed_query(ctx: ToolContext, text: str) -> tuple[Any, str | None]:
    """The query vector, or ``None`` and the reason semantic search is unavailable."""
    if ctx.embedder is None:
        return None, "no embedding model configured"
    try:
        [vector] = await ctx.embedder.embed([text], purpose=EMBED_PURPOSE, chat_id=ctx.chat_id)
    except Exception as exc:
        log.warning("tools.embed_failed", chat_id=ctx.chat_id, error=f"{type(exc).__name__}")
        return None, f"embedding failed ({type(exc).__name__})"
    return vector, None


def _text_arm(sql: _Sql, query: str) -> str:
    """Full-text candidates: the ``FTS_POOL`` newest matches, ranked by ``ts_rank_cd``.

    Reading a match's tsvector (detoasting it) is what costs, so only a bounded pool is
    ranked: a common word matching thousands of entries costs the same as a rare one."""
    q = sql.arg(query)
    return (
        f"SELECT e.id FROM (SELECT le.id FROM le WHERE le.text_search @@ "
        f"websearch_to_tsquery('english', {q}) AND {sql.where} "
        f"ORDER BY le.created_at DESC LIMIT {FTS_POOL}) pool JOIN entries e ON e.id = pool.id "
        f"ORDER BY ts_rank_cd(e.text_search, websearch_to_tsquery('english', {q})) DESC, "
        f"e.created_at DESC LIMIT {CANDIDATES_PER_ARM}"
    )


def _vector_arm(sql: _Sql, vector: Any, model: str, dims: int, exact: bool) -> str:
    """Meaning candidates. ``exact``: every row passing the filters, by distance (few rows);
    else the model's HNSW index (:func:`memory.embedding_store.ensure_vector_index`, partial
    on the model: hence the model and dims as literals) gives the nearest ``k``, then the
    filters. ``set_config`` in a one-time filter raises ``hnsw.ef_search`` to ``k`` for this
    statement only, before the index scan starts (no transaction, no extra round trip)."""
    v = sql.arg(vector)
    lit = f"'{check_model(model)}'"
    if exact:
        return (
            f"SELECT le.id FROM le JOIN entry_embeddings ee ON ee.entry_id = le.id "
            f"AND ee.model = {lit} AND ee.dims = {int(dims)} WHERE {sql.where} "
            f"ORDER BY ee.embedding <=> {v}::vector, le.created_at DESC "
            f"LIMIT {CANDIDATES_PER_ARM}"
        )
    k = ANN_K if sql.filtered else CANDIDATES_PER_ARM
    dist = f"embedding::vector({int(dims)}) <=> {v}::vector({int(dims)})"
    return (
        f"SELECT le.id FROM (SELECT entry_id, {dist} AS dist FROM entry_embeddings "
        f"WHERE model = {lit} AND dims = {int(dims)} "
        f"AND (SELECT set_config('hnsw.ef_search', '{max(k, EF_SEARCH)}', true)) IS NOT NULL "
        f"ORDER BY {dist} LIMIT {k}) nn JOIN le ON le.id = nn.entry_id WHERE {sql.where} "
        f"ORDER BY nn.dist, le.created_at DESC LIMIT {CANDIDATES_PER_ARM}"
    )


async def _exact_is_cheap(ctx: ToolContext, sql: _Sql) -> bool:
    """True when the filters leave at most ``EXACT_MAX`` entries (an exact scan of them beats
    the index, whose nearest rows would mostly be filtered out)."""
    if not sql.filtered:
        return False
    rows = await ctx.db.fetch(
        f"{_LOCAL} SELECT count(*) AS n FROM (SELECT 1 FROM le WHERE {sql.where} "
        f"LIMIT {EXACT_MAX + 1}) f",
        *sql.args,
    )
    return int(rows[0]["n"]) <= EXACT_MAX


async def search_candidates(
    ctx: ToolContext,
    query: str,
    vector: Any,
    start: date | None = None,
    end: date | None = None,
    tags: list[str] | None = None,
    city: str | None = None,
) -> tuple[list[int], list[int]]:
    """Entry ids found by words and by meaning (``vector`` None: words only), best first,
    both arms in one statement."""
    sql = _Sql(ctx.timezone).filters(start, end, tags, city)
    semantic = vector is not None and ctx.embedder is not None
    exact = semantic and await _exact_is_cheap(ctx, sql)
    arms = [f"ARRAY({_text_arm(sql, query)}) AS text_ids"]
    if semantic and ctx.embedder is not None:
        arm = _vector_arm(sql, vector, ctx.embedder.model, ctx.embedder.dims, exact)
        arms.append(f"ARRAY({arm}) AS vector_ids")
    [row] = await ctx.db.fetch(f"{_LOCAL} SELECT {', '.join(arms)}", *sql.args)
    vector_ids = row["vector_ids"] if len(arms) > 1 else []
    return list(row["text_ids"]), list(vector_ids)


@tool(_TOOLS, "search_entries", SearchEntriesInput)
async def search_entries(ctx: ToolContext, inp: SearchEntriesInput) -> dict[str, Any]:
    """Search the journal by words and by meaning, optionally filtered by dates, tags
    (any of) and city. Returns entries with a snippet; use get_entry for the full text."""
    start, end = _range(inp.date_from, inp.date_to)
    vector, problem = await _embed_query(ctx, inp.query)
    fts_ids, vec_ids = await search_candidates(
        ctx, inp.query, vector, start, end, inp.tags, inp.city
    )
    ids = [i for i, _ in rrf([fts_ids, vec_ids])[: inp.limit]]
    rows = await ctx.db.fetch(
        f"{_LOCAL} SELECT {_SUMMARY_COLS}, CASE WHEN le.text_search @@ q THEN "
        'ts_headline(\'english\', le.text, q, \'StartSel="", StopSel="", MaxWords=45, '
        'MinWords=20, MaxFragments=2, FragmentDelimiter=" … "\') END AS headline '
        "FROM le, websearch_to_tsquery('english', $2) q WHERE le.id = ANY($3::bigint[])",
        ctx.timezone,
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
        f"{_LOCAL} SELECT * FROM le WHERE le.uuid = $2", ctx.timezone, inp.uuid
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
    date_to: str | None = _optional_date("Last date, inclusive; defaults to date_from")
    limit: int = _limit(20, 50, "entries")


def _with_text(row: Any, chars: int = LIST_TEXT_CHARS, **extra: Any) -> dict[str, Any]:
    text: str = row["text"]
    return _summary(row, **extra, text=text[:chars], truncated=True if len(text) > chars else None)


@tool(_TOOLS, "get_entries_by_date", GetEntriesByDateInput)
async def get_entries_by_date(ctx: ToolContext, inp: GetEntriesByDateInput) -> dict[str, Any]:
    """Read the journal entries written between two dates (inclusive), oldest first."""
    start, end = _range(inp.date_from, inp.date_to or inp.date_from)
    sql = _Sql(ctx.timezone).filters(start, end)
    rows = await ctx.db.fetch(
        f"{_LOCAL} SELECT {_SUMMARY_COLS}, count(*) OVER () AS total FROM le WHERE {sql.where} "
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


@tool(_TOOLS, "on_this_day", OnThisDayInput)
async def on_this_day(ctx: ToolContext, inp: OnThisDayInput) -> dict[str, Any]:
    """Entries written on a month-day (default today) in any year, newest year first."""
    today = ctx.today
    month_day = inp.month_day or today.strftime("%m-%d")
    rows = await ctx.db.fetch(
        f"{_LOCAL} SELECT {_SUMMARY_COLS} FROM le WHERE to_char(le.local_ts, 'MM-DD') = $2 "
        "ORDER BY le.local_ts DESC LIMIT $3",
        ctx.timezone,
        month_day,
        inp.limit,
    )
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
        "ON ee.entry_id = e.id AND ee.model = $2 WHERE e.uuid = $1",
        inp.uuid,
        model,
    )
    if src is None:
        raise ToolError(f"no entry with uuid {inp.uuid!r}", "uuid")
    vector = src["embedding"]
    if vector is None:
        vector, problem = await _embed_query(ctx, src["text"])
        if vector is None:
            raise ToolError(f"semantic search is unavailable: {problem}")
    rows = await ctx.db.fetch(
        f"{_LOCAL} SELECT {_SUMMARY_COLS}, 1 - (ee.embedding <=> $5::vector) AS similarity "
        "FROM le JOIN entry_embeddings ee ON ee.entry_id = le.id AND ee.model = $2 "
        "AND ee.dims = vector_dims($5::vector) WHERE le.id <> $3 "
        "ORDER BY ee.embedding <=> $5::vector, le.created_at LIMIT $4",
        ctx.timezone,
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
        "SELECT t AS tag, count(*) AS n FROM entries, unnest(tags) t GROUP BY t ORDER BY n DESC, t"
    )
    return {"count": len(rows), "tags": [{"tag": r["tag"], "count": r["n"]} for r in rows]}


@attrs.frozen
class EntryStatsInput:
    date_from: str | None = _optional_date("Earliest date")
    date_to: str | None = _optional_date("Latest date")


@tool(_TOOLS, "entry_stats", EntryStatsInput)
async def entry_stats(ctx: ToolContext, inp: EntryStatsInput) -> dict[str, Any]:
    """Journal writing statistics: entry and word totals, entries per weekday and month,
    entries per week, longest and current streak of consecutive days."""
    start, end = _range(inp.date_from, inp.date_to)
    sql = _Sql(ctx.timezone).filters(start, end)
    rows = await ctx.db.fetch(
        f"{_LOCAL} SELECT le.local_ts::date AS day, count(*) AS n, "
        f"coalesce(sum(le.word_count), 0) AS words FROM le WHERE {sql.where} GROUP BY 1",
        *sql.args,
    )
    per_day = {r["day"]: int(r["n"]) for r in rows}
    words = sum(int(r["words"]) for r in rows)
    return writing_stats(per_day, words, ctx.today, start, end)


# --- log_weight / get_usage ----------------------------------------------------------------------


@attrs.frozen
class LogWeightInput:
    weight_kg: float = attrs.field(
        metadata=spec(exclusive_minimum=0, exclusive_maximum=500, description="Weight in kilograms")
    )
    date: str | None = attrs.field(
        default=None,
        metadata=date_spec("Date in YYYY-MM-DD format. Defaults to today (timezone-aware)."),
    )


_UPSERT_WEIGHT = """
WITH old AS (SELECT weight_kg FROM daily_metrics WHERE chat_id = $1 AND date = $2),
up AS (
    INSERT INTO daily_metrics (chat_id, date, weight_kg) VALUES ($1, $2, $3)
    ON CONFLICT (chat_id, date) DO UPDATE SET weight_kg = EXCLUDED.weight_kg, updated_at = now()
    RETURNING date, weight_kg
)
SELECT up.date, up.weight_kg, (SELECT weight_kg FROM old) AS replaced FROM up
"""


@tool(_TOOLS, "log_weight", LogWeightInput)
async def log_weight(ctx: ToolContext, inp: LogWeightInput) -> dict[str, Any]:
    """Log a daily weight measurement. Use when the user mentions their weight. Returns
    the stored reading and the previous one."""
    today = ctx.today
    day = _day(inp.date) or today
    if day > today + timedelta(days=1):
        raise ToolError(f"date {day} is in the future (today is {today})", "date")
    row = await ctx.db.fetchrow(_UPSERT_WEIGHT, ctx.chat_id, day, inp.weight_kg)
    prev = await ctx.db.fetchrow(
        "SELECT date, weight_kg FROM daily_metrics WHERE chat_id = $1 AND date < $2 "
        "AND weight_kg IS NOT NULL ORDER BY date DESC LIMIT 1",
        ctx.chat_id,
        day,
    )
    out: dict[str, Any] = {
        "logged": {"date": row["date"].isoformat(), "weight_kg": row["weight_kg"]},
        "previous": None,
    }
    if prev is not None:
        out["previous"] = {
            "date": prev["date"].isoformat(),
            "weight_kg": prev["weight_kg"],
            "change_kg": round(row["weight_kg"] - prev["weight_kg"], 2),
        }
    if row["replaced"] is not None:
        out["replaced_kg"] = row["replaced"]
    return out


@attrs.frozen
class GetUsageInput:
    date_from: str | None = _optional_date("First day; defaults to 29 days before date_to")
    date_to: str | None = _optional_date("Last day, inclusive; defaults to today")


@tool(_TOOLS, "get_usage", GetUsageInput)
async def get_usage(ctx: ToolContext, inp: GetUsageInput) -> dict[str, Any]:
    """What the assistant has cost in API fees (USD: this chat's calls plus shared ones such
    as journal import) by purpose, model and day; by default over the last 30 days."""
    start, end = _range(inp.date_from, inp.date_to)
    end = end or ctx.today
    start = start or end - timedelta(days=29)
    if start > end:
        raise ToolError("date_from must not be after date_to", "date_from")
    since = datetime.combine(start, time(), ctx.tz)
    until = datetime.combine(end + timedelta(days=1), time(), ctx.tz)
    s = await usage_summary(
        ctx.db,
        since=since,
        until=until,
        tz=ctx.timezone,
        chat_id=ctx.chat_id,
        include_shared=True,
    )
    return usage_report(s, start, end)


# --- registry ---------------------------------------------------------------------------------


def journal_registry() -> ToolRegistry:
    """A registry with every journal tool, ``log_weight`` and ``get_usage``."""
    return ToolRegistry(JOURNAL_TOOLS)


#: every journal tool, ``log_weight`` and ``get_usage``, in the order they are offered
JOURNAL_TOOLS: tuple[Tool[Any], ...] = tuple(_TOOLS)
