"""The SQL of pattern retrieval: the vector arm's plan (per chat and model) and the one
candidates statement. See :mod:`memory.retrieval.retriever` for how one retrieval uses them.

**Vector arm plan.** pgvector 0.6 filters HNSW results *after* the graph walk (no iterative
scan), so a chat holding a small share of the model's index can get too few rows back; an exact
scan costs ~1-2 µs per 256-d vector. The plan per (chat, model) comes from the chat's vector
count and whether it has its own index (cached for :data:`SIZE_TTL` seconds) and the table's
row estimate (:func:`choose_plan`):

* ``exact``: the chat holds at most :data:`EXACT_MAX` vectors: scan them all (full recall);
* ``hnsw``: the model's shared partial HNSW index with ``hnsw.ef_search = candidates × total /
  chat_count × 1.5`` (set for this one statement), when that is at most :data:`EF_SEARCH_MAX`;
* ``chat_index``: the chat's own partial HNSW index (``WHERE model = ... AND chat_id = ...``),
  which :func:`ensure_chat_indexes` builds for chats too big for an exact scan and too small a
  share of the shared index (a maintenance job's work, not the turn's);
* otherwise ``exact`` again. If a graph walk yields fewer rows than asked, the exact scan runs
  instead: recall never silently drops.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import Counter
from collections.abc import Sequence
from typing import Literal

import attrs

from memory.embeddings.store import check_model
from memory.retrieval.ranking import VALIDITY_BY_STATUS, WEIGHT_JOINS, WEIGHT_SQL
from runtime.db import Queries
from runtime.logs import get_logger

log = get_logger(__name__)

LIVE_STATUSES = tuple(s for s, v in VALIDITY_BY_STATUS.items() if v > 0.0)
DEFAULT_CANDIDATES = 40  # rows per arm
EXACT_MAX = 2_000  # chats up to this many vectors are scanned exactly
EF_SEARCH_MAX = 400  # above this the shared graph walk costs more than the chat's own
EF_SLACK = 1.5
HNSW_EF_LIMIT = 1_000  # pgvector's maximum hnsw.ef_search
SIZE_TTL = 300.0  # seconds a chat's vector count is trusted
LEXICON_TTL = 1_800.0  # seconds a chat's document frequencies are trusted (they drift slowly;
# a refresh costs ~40 ms at 10k patterns, ~270 ms at 100k)

Plan = Literal["exact", "hnsw", "chat_index", "none"]


# --- the vector arm's plan ------------------------------------------------------------------


def chat_index_name(chat_id: int, model: str, dims: int) -> str:
    """The name of ``chat_id``'s own partial HNSW index for ``model`` (<= 63 bytes)."""
    chat = f"m{-chat_id}" if chat_id < 0 else str(chat_id)
    digest = hashlib.sha1(f"{check_model(model)}/{dims}".encode()).hexdigest()[:8]
    return f"idx_pattern_emb_chat_{chat}_{digest}"


def choose_plan(
    chat_count: int,
    total: int,
    candidates: int,
    *,
    chat_index: bool = False,
    exact_max: int = EXACT_MAX,
    ef_max: int = EF_SEARCH_MAX,
) -> tuple[Plan, int]:
    """The vector arm's plan and its ``hnsw.ef_search`` (0 for ``exact``/``none``). Pure."""
    if chat_count <= 0:
        return "none", 0
    if chat_count <= exact_max:
        return "exact", 0
    ef_max = min(ef_max, HNSW_EF_LIMIT)
    share = chat_count / max(total, chat_count)
    ef = max(math.ceil(candidates / share * EF_SLACK), candidates)
    if ef <= ef_max:
        return "hnsw", ef
    if chat_index:
        return "chat_index", max(math.ceil(candidates * EF_SLACK), candidates)
    return "exact", 0


@attrs.frozen
class ChatSize:
    count: int  # the chat's vectors for the model
    total: int  # estimated vectors in the table
    chat_index: bool  # the chat has its own valid partial HNSW index
    at: float


@attrs.define
class VectorPlanner:
    """Caches each chat's vector count (and own-index flag) per model for ``ttl`` seconds
    (a count of zero is not cached)."""

    ttl: float = SIZE_TTL
    exact_max: int = EXACT_MAX
    ef_max: int = EF_SEARCH_MAX
    plans: Counter[str] = attrs.field(factory=Counter)  # plans run, for tests and benches
    _sizes: dict[tuple[int, str], ChatSize] = attrs.field(factory=dict)

    def forget(self, chat_id: int | None = None) -> None:
        """Drop cached sizes (of one chat, or all)."""
        for key in [k for k in self._sizes if chat_id is None or k[0] == chat_id]:
            del self._sizes[key]

    async def plan(
        self, db: Queries, chat_id: int, model: str, dims: int, candidates: int
    ) -> tuple[Plan, int]:
        size = await self.size(db, chat_id, model, dims)
        return choose_plan(
            size.count,
            size.total,
            candidates,
            chat_index=size.chat_index,
            exact_max=self.exact_max,
            ef_max=self.ef_max,
        )

    async def size(self, db: Queries, chat_id: int, model: str, dims: int) -> ChatSize:
        key = (chat_id, model)
        hit = self._sizes.get(key)
        now = time.monotonic()
        # a chat without vectors is asked again every time: its first patterns (a remember, a
        # first compaction) must be searchable by meaning at once, not after the ttl
        if hit is not None and hit.count > 0 and now - hit.at < self.ttl:
            return hit
        [row] = await db.fetch(
            "SELECT (SELECT count(*) FROM pattern_embeddings WHERE model = $1 AND chat_id = $2)"
            " AS n, (SELECT reltuples::bigint FROM pg_class"
            "        WHERE oid = 'pattern_embeddings'::regclass) AS est,"
            " coalesce((SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($3)),"
            " false) AS own",
            model,
            chat_id,
            chat_index_name(chat_id, model, dims),
        )
        count = int(row["n"])
        total = int(row["est"]) if row["est"] is not None else -1
        if count > self.exact_max and total < count:  # never analysed yet: count them
            total = int(
                await db.fetchval(
                    "/* all chats: the whole table's vectors, for the shared index */ "
                    "SELECT count(*) FROM pattern_embeddings WHERE model = $1",
                    model,
                )
            )
        size = ChatSize(count, max(total, count), bool(row["own"]), now)
        self._sizes[key] = size
        return size


async def ensure_chat_indexes(
    db: Queries,
    model: str,
    dims: int,
    *,
    candidates: int = DEFAULT_CANDIDATES,
    exact_max: int = EXACT_MAX,
    ef_max: int = EF_SEARCH_MAX,
    concurrently: bool = True,
) -> list[int]:
    """Give every chat that needs one its own partial HNSW index; the chats indexed now.

    A chat needs one when it is too big for an exact scan and too small a share of the
    model's index for the shared graph walk (see :func:`choose_plan`). A maintenance job
    (or ``engram patterns``) runs this; retrieval uses an index once it is valid. Built
    ``CONCURRENTLY`` by default, so writes to other chats are not blocked meanwhile.
    """
    check_model(model)
    rows = await db.fetch(
        "/* all chats: the per-chat index job's scan */ "
        "SELECT chat_id, count(*) AS n FROM pattern_embeddings WHERE model = $1 AND dims = $2"
        " GROUP BY chat_id HAVING count(*) > $3",
        model,
        dims,
        exact_max,
    )
    total = sum(int(r["n"]) for r in rows)
    total = max(
        total,
        int(
            await db.fetchval(
                "/* all chats: the whole table's vectors, for the shared index */ "
                "SELECT count(*) FROM pattern_embeddings WHERE model = $1",
                model,
            )
        ),
    )
    made: list[int] = []
    for r in rows:
        chat_id, n = int(r["chat_id"]), int(r["n"])
        plan, _ = choose_plan(
            n, total, candidates, chat_index=True, exact_max=exact_max, ef_max=ef_max
        )
        name = chat_index_name(chat_id, model, dims)
        if plan != "chat_index":
            continue
        valid = await db.fetchval(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)", name
        )
        if valid:
            continue
        if valid is not None:  # a failed concurrent build left an invalid index
            await db.execute(f"DROP INDEX {'CONCURRENTLY ' if concurrently else ''}{name}")
        await db.execute(
            f"CREATE INDEX {'CONCURRENTLY ' if concurrently else ''}IF NOT EXISTS {name} "
            f"ON pattern_embeddings USING hnsw ((embedding::vector({dims})) vector_cosine_ops) "
            f"WITH (m = 16, ef_construction = 64) "
            f"WHERE model = '{model}' AND chat_id = {chat_id}"
        )
        log.info("retrieval.chat_index_created", chat_id=chat_id, model=model, rows=n)
        made.append(chat_id)
    return made


# --- SQL ------------------------------------------------------------------------------------

# $1 chat, $2 now, $3 kinds, $4 half-lives, $5 floors, $6 statuses, $7 validities, $8 today
# (local), $9 the local moment ($3 .. $9: memory.retrieval.ranking.weight_parameters()), $10 live
# statuses, $11 candidates per arm, $12 tsquery text, $13 query vector (or NULL), $14
# hnsw.ef_search (graph-walk plans).
# The typed weight and its joins are memory.retrieval.ranking's WEIGHT_SQL and WEIGHT_JOINS.

_FTS_ARM = """
    fts AS MATERIALIZED (
        SELECT s.id, s.lexical, row_number() OVER () AS rnk FROM (
            SELECT p.id, ts_rank(p.text_search, q)::float8 AS lexical
            FROM patterns p, to_tsquery('english', $12) q
            WHERE $12 <> '' AND p.chat_id = $1 AND p.status = ANY($10::text[])
              AND p.text_search @@ q
            ORDER BY lexical DESC, p.id DESC
            LIMIT $11) s)"""


def _vec_arm(model: str, dims: int, plan: Plan, chat_id: int) -> str:
    if plan == "none":
        return "vec AS (SELECT NULL::bigint AS id, NULL::bigint AS rnk WHERE false)"
    # the HNSW index is on the cast expression; the exact plan orders by the bare column,
    # which no index matches, so the planner scans the chat's rows through (model, chat_id)
    dist = (
        f"pe.embedding <=> $13::vector({dims})"
        if plan == "exact"
        else f"pe.embedding::vector({dims}) <=> $13::vector({dims})"
    )
    # the chat's own partial index is only matched against a literal chat id
    chat = str(int(chat_id)) if plan == "chat_index" else "$1"
    # A graph walk returns at most hnsw.ef_search rows. It is set for this statement only
    # (set_config(..., is_local) ends with the statement's implicit transaction): a Limit node
    # evaluates its count, and so this InitPlan, before it pulls the first row from the index
    # scan, and pgvector reads the setting on that first pull. One round trip, no BEGIN/SET.
    limit = (
        "$11"
        if plan == "exact"
        else "(SELECT $11::bigint FROM (SELECT set_config('hnsw.ef_search', $14::text, true)) ef)"
    )
    return f"""
    vec AS MATERIALIZED (
        SELECT s.id, row_number() OVER () AS rnk FROM (
            SELECT pe.pattern_id AS id FROM pattern_embeddings pe
            WHERE pe.model = '{model}' AND pe.chat_id = {chat} AND pe.dims = {dims}
            ORDER BY {dist} LIMIT {limit}) s)"""


def candidates_sql(model: str, dims: int, plan: Plan, chat_id: int = 0) -> str:
    """The one statement computing both arms, per candidate its cosine similarity (NULL without
    a query vector or a stored vector), its ``ts_rank`` (``lexical``, 0 when the full-text arm
    did not find it) and its typed weight."""
    check_model(model)
    sim = f"1 - (pe.embedding <=> $13::vector({dims}))" if plan != "none" else "NULL::float8"
    return f"""
    WITH {_vec_arm(model, dims, plan, chat_id)},{_FTS_ARM},
    cand AS (
        SELECT id, min(vrnk) AS vrnk, min(frnk) AS frnk, max(lexical) AS lexical FROM (
            SELECT id, rnk AS vrnk, NULL::bigint AS frnk, NULL::float8 AS lexical FROM vec
            UNION ALL SELECT id, NULL, rnk, lexical FROM fts) u
        GROUP BY id)
    SELECT p.id, p.content, p.kind, p.confidence, p.strength, p.status, p.last_seen,
           p.times_seen, p.occurs_on, p.occurs_at, p.is_core_tenet, c.vrnk, c.frnk,
           coalesce(c.lexical, 0) AS lexical, pe.embedding,
           {sim} AS similarity,
           tsvector_to_array(p.text_search) AS lexemes, length(p.text_search) AS doclen,
           (SELECT tsvector_to_array(to_tsvector('english', replace($12, ' | ', ' '))))
             AS qlexemes,
           (SELECT count(*) FROM vec) AS vec_rows,
           {WEIGHT_SQL} AS weight
    FROM cand c
    JOIN patterns p ON p.id = c.id AND p.chat_id = $1 AND p.status = ANY($10::text[]){WEIGHT_JOINS}
    LEFT JOIN pattern_embeddings pe
      ON pe.chat_id = p.chat_id AND pe.pattern_id = p.id AND pe.model = '{model}'
      AND pe.dims = {dims}"""


# --- BM25 re-scoring of the candidates ----------------------------------------------------

BM25_K1 = 1.2
BM25_B = 0.75


@attrs.frozen
class Lexicon:
    """A chat's live patterns: document frequency per lexeme, count, mean length."""

    df: dict[str, int]
    n: int
    avglen: float
    at: float = 0.0

    def bm25(self, query: Sequence[str], lexemes: Sequence[str], length: int) -> float:
        """BM25 (k1 1.2, b 0.75, tf taken as 1: claims rarely repeat a word). Pure."""
        have = set(lexemes)
        norm = 1.0 + BM25_K1 * (1.0 - BM25_B + BM25_B * max(length, 1) / max(self.avglen, 1.0))
        total = 0.0
        for term in set(query):
            if term in have:
                df = max(self.df.get(term, 1), 1)  # newer than the cache: count it as rare
                n = max(self.n, df)
                total += math.log(1.0 + (n - df + 0.5) / (df + 0.5)) * (BM25_K1 + 1.0) / norm
        return total


@attrs.define
class LexiconCache:
    """Each chat's :class:`Lexicon` (from ``ts_stat`` over its live patterns), trusted for
    ``ttl`` seconds; a lexeme newer than the cache counts as rare (df 1)."""

    ttl: float = LEXICON_TTL
    _chats: dict[int, Lexicon] = attrs.field(factory=dict)

    def forget(self, chat_id: int | None = None) -> None:
        for key in [k for k in self._chats if chat_id is None or k == chat_id]:
            del self._chats[key]

    async def get(self, db: Queries, chat_id: int) -> Lexicon:
        hit = self._chats.get(chat_id)
        now = time.monotonic()
        if hit is not None and now - hit.at < self.ttl:
            return hit
        live = ", ".join(f"''{s}''" for s in LIVE_STATUSES)
        docs = (
            f"SELECT text_search FROM patterns WHERE chat_id = {int(chat_id)}"
            f" AND status IN ({live})"
        )
        rows = await db.fetch(f"SELECT word, ndoc FROM ts_stat('{docs}')")
        [stats] = await db.fetch(
            "SELECT count(*) AS n, coalesce(avg(length(text_search)), 1)::float8 AS avglen"
            " FROM patterns WHERE chat_id = $1 AND status = ANY($2::text[])",
            chat_id,
            list(LIVE_STATUSES),
        )
        lex = Lexicon(
            {str(r["word"]): int(r["ndoc"]) for r in rows},
            int(stats["n"]),
            float(stats["avglen"]),
            now,
        )
        self._chats[chat_id] = lex
        return lex
