"""The search machinery of the ``search_entries`` tool (:mod:`memory.journal.tools`): the
entry filters as SQL, the full-text and vector candidate arms, and the choice between an exact
vector scan and the HNSW index. :data:`LOCAL` (the entries with their local time, ``le``),
:class:`Sql` (the entry filters) and :func:`embed_query` serve the other journal tools too.
"""

from __future__ import annotations

from datetime import date
from typing import Any

from memory.embeddings.store import check_model
from memory.tools.registry import ToolContext
from runtime.concurrency import both
from runtime.db import Database
from runtime.logs import get_logger

log = get_logger(__name__)

EMBED_PURPOSE = "embedding"
CANDIDATES_PER_ARM = 100
#: full-text matches ranked per search (the newest ones; see ``_text_arm``)
FTS_POOL = 200
#: filters leaving at most this many entries: exact vector scan of them, else the HNSW index
EXACT_MAX = 2000
#: nearest rows taken from the index before filters (a filter passes > EXACT_MAX entries)
ANN_K = 400
#: ``hnsw.ef_search`` of a search (>= the rows asked of the index; pgvector's default is 40)
EF_SEARCH = 100

# Every query below takes the context time zone as $1, the turn's chat as $2 and reads entries
# through ``le``: the chat's own entries only (each chat owns its journal, migration 012). An
# entry's zone is a valid one or NULL (checked on import, and by the trigger of migration 002
# for any other writer), so it is used as is: no per-query lookup in pg_timezone_names.
# NOT MATERIALIZED: a statement that reads ``le`` twice must not copy the whole journal.
LOCAL = """
WITH le AS NOT MATERIALIZED (
    SELECT e.*, (e.created_at AT TIME ZONE coalesce(e.timezone, $1)) AS local_ts
    FROM entries e WHERE e.chat_id = $2
)
"""


class Sql:
    """Positional parameters (``$1`` time zone, ``$2`` chat, as :data:`LOCAL` reads them) and
    WHERE conditions for the entry filters."""

    def __init__(self, tz: str, chat_id: int) -> None:
        self.args: list[Any] = [tz, chat_id]
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
    ) -> Sql:
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


async def embed_query(ctx: ToolContext, text: str) -> tuple[Any, str | None]:
    """The query vector, or ``None`` and the reason semantic search is unavailable."""
    if ctx.embedder is None:
        return None, "no embedding model configured"
    try:
        [vector] = await ctx.embedder.embed([text], purpose=EMBED_PURPOSE, chat_id=ctx.chat_id)
    except Exception as exc:
        log.warning("tools.embed_failed", chat_id=ctx.chat_id, error=f"{type(exc).__name__}")
        return None, f"embedding failed ({type(exc).__name__})"
    return vector, None


def _text_arm(sql: Sql, query: str) -> str:
    """Full-text candidates: the ``FTS_POOL`` newest matches, ranked by ``ts_rank_cd``.

    Reading a match's tsvector (detoasting it) is what costs, so only a bounded pool is
    ranked: a common word matching thousands of entries costs the same as a rare one."""
    q = sql.arg(query)
    return (
        f"SELECT e.id FROM (SELECT le.id FROM le WHERE le.text_search @@ "
        f"websearch_to_tsquery('english', {q}) AND {sql.where} "
        f"ORDER BY le.created_at DESC LIMIT {FTS_POOL}) pool "
        f"JOIN entries e ON e.chat_id = $2 AND e.id = pool.id "
        f"ORDER BY ts_rank_cd(e.text_search, websearch_to_tsquery('english', {q})) DESC, "
        f"e.created_at DESC LIMIT {CANDIDATES_PER_ARM}"
    )


def vector_arm(sql: Sql, vector: Any, model: str, dims: int, exact: bool) -> str:
    """Meaning candidates. ``exact``: every row passing the filters, by distance (few rows);
    else the model's HNSW index (:func:`memory.embeddings.store.ensure_vector_index`, partial
    on the model: hence the model and dims as literals) gives the nearest ``k``, then the
    filters. ``set_config`` in a one-time filter raises ``hnsw.ef_search`` to ``k`` for this
    statement only, before the index scan starts (no transaction, no extra round trip)."""
    v = sql.arg(vector)
    lit = f"'{check_model(model)}'"
    if exact:
        return (
            f"SELECT le.id FROM le JOIN entry_embeddings ee "
            f"ON ee.chat_id = $2 AND ee.entry_id = le.id "
            f"AND ee.model = {lit} AND ee.dims = {int(dims)} WHERE {sql.where} "
            f"ORDER BY ee.embedding <=> {v}::vector, le.created_at DESC "
            f"LIMIT {CANDIDATES_PER_ARM}"
        )
    k = ANN_K if sql.filtered else CANDIDATES_PER_ARM
    dist = f"embedding::vector({int(dims)}) <=> {v}::vector({int(dims)})"
    return (
        f"SELECT le.id FROM (SELECT entry_id, {dist} AS dist FROM entry_embeddings "
        f"WHERE model = {lit} AND dims = {int(dims)} AND chat_id = $2 "
        f"AND (SELECT set_config('hnsw.ef_search', '{max(k, EF_SEARCH)}', true)) IS NOT NULL "
        f"ORDER BY {dist} LIMIT {k}) nn JOIN le ON le.id = nn.entry_id WHERE {sql.where} "
        f"ORDER BY nn.dist, le.created_at DESC LIMIT {CANDIDATES_PER_ARM}"
    )


async def _exact_is_cheap(ctx: ToolContext, sql: Sql) -> bool:
    """True when the filters leave at most ``EXACT_MAX`` entries (an exact scan of them beats
    the index, whose nearest rows would mostly be filtered out)."""
    if not sql.filtered:
        return False
    rows = await ctx.db.fetch(
        f"{LOCAL} SELECT count(*) AS n FROM (SELECT 1 FROM le WHERE {sql.where} "
        f"LIMIT {EXACT_MAX + 1}) f",
        *sql.args,
    )
    return int(rows[0]["n"]) <= EXACT_MAX


async def _text_ids(ctx: ToolContext, sql: Sql, query: str) -> list[int]:
    rows = await ctx.db.fetch(f"{LOCAL} SELECT ARRAY({_text_arm(sql, query)}) AS ids", *sql.args)
    return list(rows[0]["ids"])


async def _vector_ids(ctx: ToolContext, sql: Sql, vector: Any) -> list[int]:
    assert ctx.embedder is not None
    exact = await _exact_is_cheap(ctx, sql)
    arm = vector_arm(sql, vector, ctx.embedder.model, ctx.embedder.dims, exact)
    rows = await ctx.db.fetch(f"{LOCAL} SELECT ARRAY({arm}) AS ids", *sql.args)
    return list(rows[0]["ids"])


async def search_candidates(
    ctx: ToolContext,
    query: str,
    vector: Any,
    start: date | None = None,
    end: date | None = None,
    tags: list[str] | None = None,
    city: str | None = None,
) -> tuple[list[int], list[int]]:
    """Entry ids found by words and by meaning (``vector`` None: words only), best first.

    On a pool the two arms run at once on two connections (two backends, two cores); on a
    single connection (a transaction) one after the other."""

    def filters() -> Sql:
        return Sql(ctx.timezone, ctx.chat_id).filters(start, end, tags, city)

    if vector is None or ctx.embedder is None:
        return await _text_ids(ctx, filters(), query), []
    text_sql, vector_sql = filters(), filters()
    if isinstance(ctx.db, Database):
        return await both(
            lambda: _text_ids(ctx, text_sql, query), lambda: _vector_ids(ctx, vector_sql, vector)
        )
    return await _text_ids(ctx, text_sql, query), await _vector_ids(ctx, vector_sql, vector)


async def find_candidates(
    ctx: ToolContext,
    query: str,
    start: date | None = None,
    end: date | None = None,
    tags: list[str] | None = None,
    city: str | None = None,
) -> tuple[list[int], list[int], str | None]:
    """:func:`search_candidates` for ``query``, embedding it first; on a pool the full-text
    arm runs while the query is embedded (a remote embedding call costs a round trip).
    Returns both arms' ids and why the meaning arm is missing (None when it ran)."""
    if not isinstance(ctx.db, Database):
        vector, problem = await embed_query(ctx, query)
        return (*await search_candidates(ctx, query, vector, start, end, tags, city), problem)
    sql = Sql(ctx.timezone, ctx.chat_id).filters(start, end, tags, city)
    vector_sql = Sql(ctx.timezone, ctx.chat_id).filters(start, end, tags, city)
    missing: list[str] = []

    async def meaning() -> list[int]:
        vector, problem = await embed_query(ctx, query)
        if vector is None:
            missing.append(problem or "no query vector")
            return []
        return await _vector_ids(ctx, vector_sql, vector)

    text_ids, vector_ids = await both(lambda: _text_ids(ctx, sql, query), meaning)
    return text_ids, vector_ids, (missing[0] if missing else None)
