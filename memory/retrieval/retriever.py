"""Pattern retrieval: hybrid ranking in SQL, MMR rerank, the injected-pattern budget.

Seed 000 "Pattern retrieval with typed decay + floor" and "Hybrid retrieval for patterns".
One call of :meth:`SqlPatternRetriever.retrieve` is:

1. **Candidates** (one SQL statement, :func:`memory.retrieval.sql.candidates_sql`):
   the chat's ``candidates`` nearest pattern vectors of the embedder's model (vector arm) and its
   ``candidates`` best full-text matches (``to_tsquery('english', or_tsquery(query))`` ordered by
   ``ts_rank``; full-text arm), both over this chat only. For every candidate of either arm the
   same statement returns the cosine similarity to the query (keyword-only hits included), its
   ``ts_rank`` (0 when the full-text arm did not return it), its lexemes and length, the query's
   lexemes (``to_tsvector('english', content words)``) and the typed weight ``recency(kind, days
   since last_seen or an event's day, floor) × memory(strength) × confidence × validity(status)
   × boost`` (the seed's formula with facts, events, core tenets and the time-aware boost,
   :data:`memory.retrieval.ranking.WEIGHT_SQL`, with the
   :data:`memory.retrieval.ranking.DECAY_BY_KIND` half-lives and floors at full strength; days and
   the local moment in the retriever's ``timezone``);
   superseded, deprecated and merged patterns are never candidates (validity 0), disputed ones
   count at :data:`memory.retrieval.ranking.DISPUTED_VALIDITY`.
2. **Fusion** (:func:`fuse`, in Python): candidates below ``thresholds.min_similarity`` are
   dropped whichever arm found them (a keyword hit with no semantic affinity to the query is not
   injected), as are those without a stored vector for the model. Each remaining candidate gets
   ``relevance = 0.5 × max(similarity, 0) + 0.5 × lexical / max_lexical``
   (:func:`memory.retrieval.ranking.relevance`) and the score ``relevance × typed weight``.
   ``lexical`` is the candidate's BM25 over the query's lexemes
   (k1 1.2, b 0.75, term frequency taken as 1, ``idf = ln(1 + (N - df + 0.5) / (df + 0.5))``
   with ``N``, ``df`` and the mean length from the chat's live patterns: ``ts_stat``, cached per
   chat by :class:`memory.retrieval.sql.LexiconCache` for 30 minutes), 0 when it shares no
   lexeme with the query; ``max_lexical`` is the highest among this query's candidates (the best
   keyword match has 1), so ``relevance`` is in [0, 1]. Both halves are graded scores, not
   ranks: a rare keyword such as "melatonin" lifts a pattern by up to half, a close paraphrase
   without shared words still counts by its cosine. (:func:`rank_patterns` called without a
   ``LexiconCache`` uses ``ts_rank`` as ``lexical``.)
3. **MMR** (λ = 0.7) over the best ``limit × 3`` candidates' stored vectors picks up to ``limit``
   patterns, then :func:`memory.retrieval.ranking.apply_budget` drops the lowest-scored until the
   lines fit 2,000 tokens.

When the query cannot be embedded (outage, rate limit), or the chat's patterns have no vector
of the model yet (a model switch before the re-embed), the full-text arm alone ranks:
``similarity`` is ``None``, ``relevance = lexical / max_lexical`` and the score is
``relevance × typed weight``; the result is ``degraded`` and the prompt block starts with
``[memory: degraded]``. Never does an embedding failure fail the turn.

The vector arm's plan (exact scan, shared HNSW walk or the chat's own index), the SQL and the
per-chat caches (vector counts, document frequencies) live in :mod:`memory.retrieval.sql`
(names re-exported here). What a turn gets back is a :class:`RetrievedMemory`, from any
:class:`PatternRetriever` (:class:`NoPatterns` until pattern memory exists).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime, time
from typing import Any, Protocol

import attrs
import numpy as np

from memory.embeddings.providers import PURPOSE, Embedder
from memory.embeddings.store import check_model
from memory.embeddings.thresholds import Thresholds, default_thresholds
from memory.retrieval.query_text import or_tsquery
from memory.retrieval.ranking import (
    MMR_LAMBDA,
    PATTERN_BUDGET_TOKENS,
    apply_budget,
    mmr,
    relevance,
    weight_parameters,
)
from memory.retrieval.sql import (
    DEFAULT_CANDIDATES,
    LIVE_STATUSES,
    Lexicon,
    LexiconCache,
    Plan,
    VectorPlanner,
    candidates_sql,
)
from memory.retrieval.temporal import event_day
from runtime.clock import local_date
from runtime.db import Queries
from runtime.logs import get_logger

__all__ = [
    "DEFAULT_LIMIT",
    "DEGRADED_MARK",
    "NoPatterns",
    "PatternRetriever",
    "RankedPattern",
    "RetrievedMemory",
    "SqlPatternRetriever",
    "fetch_candidates",
    "fuse",
    "memory_block",
    "pattern_line",
    "rank_patterns",
]

log = get_logger(__name__)

DEFAULT_LIMIT = 20  # patterns injected at most (the token budget usually binds first)
MMR_POOL = 3  # MMR picks ``limit`` patterns among the best ``limit * MMR_POOL`` by score
DEGRADED_MARK = "[memory: degraded]"


# --- what a turn gets -----------------------------------------------------------------------


@attrs.frozen
class RetrievedMemory:
    """The pattern block for the prompt; ``degraded`` when retrieval fell back or failed."""

    text_block: str = ""
    degraded: bool = False
    pattern_ids: tuple[int, ...] = ()  # the injected patterns, in prompt order


class PatternRetriever(Protocol):
    """Long-term memory for a turn (ranked, MMR-reranked, budget-capped patterns)."""

    async def retrieve(self, chat_id: int, query: str) -> RetrievedMemory: ...


@attrs.frozen
class NoPatterns:
    """The retriever used until pattern memory exists: nothing to add."""

    async def retrieve(self, chat_id: int, query: str) -> RetrievedMemory:
        return RetrievedMemory()


@attrs.frozen
class RankedPattern:
    """One retrieval candidate with its final score and stored vector (for MMR)."""

    id: int
    content: str
    kind: str
    score: float
    similarity: float | None  # None on the full-text-only (degraded) path
    confidence: float
    strength: float
    status: str
    last_seen: datetime
    vector: Any = attrs.field(eq=False, repr=False)
    times_seen: int = 1
    relevance: float = 1.0  # the cosine / lexical mix in [0, 1] (see the module docstring)
    occurs_on: date | None = None  # an event's day
    occurs_at: time | None = None  # an event's local time of day, when said
    core: bool = False  # a core tenet (never decays)

    @property
    def text(self) -> str:
        """The prompt line of this pattern (what the budget counts)."""
        return pattern_line(self)


def pattern_line(p: RankedPattern, timezone: str = "UTC") -> str:
    """``- [behavior] Sleeps badly after late caffeine (id 12, seen 4×, last 2026-10-03)``;
    an event's tag carries its day (``[event on Fri 7 Mar 2025]``), a core tenet's ``core``;
    last seen is a date in ``timezone`` (the person's TIMEZONE in a prompt)."""
    tags = [p.kind if p.occurs_on is None else f"{p.kind} on {event_day(p.occurs_on, p.occurs_at)}"]
    tags += ["core"] * p.core + [p.status] * (p.status != "active")
    tag = ", ".join(tags)
    last = local_date(p.last_seen, timezone)  # the person's date, like every date they see
    content = " ".join(p.content.split())
    return f"- [{tag}] {content} (id {p.id}, seen {p.times_seen}×, last {last})"


def memory_block(patterns: Sequence[RankedPattern], degraded: bool, timezone: str = "UTC") -> str:
    """The prompt block: one line per pattern, led by the degraded mark when it applies."""
    lines = [pattern_line(p, timezone) for p in patterns]
    if degraded:
        lines.insert(0, f"{DEGRADED_MARK} keyword search only; related memories may be missing.")
    return "\n".join(lines)


# --- ranking --------------------------------------------------------------------------------


def _as_array(vec: Any, dims: int) -> Any:
    """A stored vector as numpy (pgvector's codec may give a ``Vector``); zeros when absent."""
    if vec is None:
        return np.zeros(dims, np.float32)
    to_numpy = getattr(vec, "to_numpy", None)
    return to_numpy() if to_numpy is not None else np.asarray(vec, dtype=np.float32)


def fuse(
    rows: Sequence[Any],
    min_similarity: float,
    dims: int,
    *,
    hybrid: bool,
    lexicon: Lexicon | None = None,
) -> list[RankedPattern]:
    """Rows of :func:`candidates_sql` -> scored patterns, best first (pure).

    ``hybrid``: the rows carry similarities (a query vector was used), so candidates below
    ``min_similarity`` or without a vector for the model are dropped. ``lexicon``: the lexical
    score is every candidate's BM25 (else the full-text arm's ``ts_rank``)."""
    if lexicon is None:
        lexical = [float(r["lexical"]) for r in rows]
    else:
        lexical = [
            lexicon.bm25(r["qlexemes"] or (), r["lexemes"] or (), int(r["doclen"])) for r in rows
        ]
    max_lexical = max(lexical, default=0.0)
    out: list[RankedPattern] = []
    for r, lex in zip(rows, lexical, strict=True):
        sim = None if r["similarity"] is None else float(r["similarity"])
        if hybrid and (sim is None or sim < min_similarity):
            continue
        weight = float(r["weight"])
        if weight <= 0.0:
            continue
        rel = relevance(sim if hybrid else None, lex, max_lexical)
        out.append(
            RankedPattern(
                id=int(r["id"]),
                content=str(r["content"]),
                kind=str(r["kind"]),
                score=rel * weight,
                similarity=sim,
                confidence=float(r["confidence"]),
                strength=float(r["strength"]),
                status=str(r["status"]),
                last_seen=r["last_seen"],
                vector=_as_array(r["embedding"], dims),
                times_seen=int(r["times_seen"]),
                relevance=rel,
                occurs_on=r["occurs_on"],
                occurs_at=r["occurs_at"],
                core=bool(r["is_core_tenet"]),
            )
        )
    out.sort(key=lambda p: (-p.score, -p.id))
    return out


async def _embed_query(embedder: Embedder, chat_id: int, query: str) -> Any | None:
    try:
        [vector] = await embedder.embed([query], purpose=PURPOSE, chat_id=chat_id)
    except Exception as exc:  # any failure degrades to full-text; never fails the turn
        log.warning("retrieval.embed_failed", chat_id=chat_id, error=f"{type(exc).__name__}: {exc}")
        return None
    return vector


async def fetch_candidates(
    db: Queries, sql: str, args: Sequence[Any], ef_search: int
) -> Sequence[Any]:
    """Run a :func:`candidates_sql` statement (``ef_search`` > 0 adds ``$14``)."""
    return await db.fetch(sql, *args, *([str(ef_search)] if ef_search else []))


async def rank_patterns(
    db: Queries,
    embedder: Embedder,
    chat_id: int,
    query: str,
    *,
    limit: int = DEFAULT_CANDIDATES,
    now: datetime | None = None,
    thresholds: Thresholds | None = None,
    planner: VectorPlanner | None = None,
    lexicons: LexiconCache | None = None,
    timezone: str = "UTC",
) -> tuple[list[RankedPattern], bool]:
    """This chat's live patterns for ``query``, best first, and whether retrieval degraded.

    ``timezone``: where today (an event's days) and the moment (temporal hints) are reckoned.

    ``limit`` is the number of candidates per arm (the result holds at most twice that).
    One round trip (two when a graph walk comes back short). Inside a caller's explicit
    transaction the statement's ``hnsw.ef_search`` stays set until that transaction ends.
    """
    if not query.strip():
        return [], False
    now = now or datetime.now(UTC)
    thresholds = thresholds or default_thresholds(embedder.model)
    planner = planner or VectorPlanner()
    model, dims = check_model(embedder.model), int(embedder.dims)
    vector = await _embed_query(embedder, chat_id, query)
    plan: Plan = "none"
    ef = 0
    if vector is not None:
        plan, ef = await planner.plan(db, chat_id, model, dims, limit)
    args: list[Any] = [
        chat_id,
        now,
        *weight_parameters(now, timezone),
        list(LIVE_STATUSES),
        limit,
        or_tsquery(query),
    ]
    if plan != "none":
        args.append(np.asarray(vector, dtype=np.float32))
    rows = await fetch_candidates(db, candidates_sql(model, dims, plan, chat_id), args, ef)
    if plan in ("hnsw", "chat_index") and (rows[0]["vec_rows"] if rows else 0) < limit:
        # the post-filtered graph walk came back short: scan the chat exactly instead
        log.info("retrieval.hnsw_short", chat_id=chat_id, model=model, ef_search=ef)
        plan = "exact"
        rows = await fetch_candidates(db, candidates_sql(model, dims, plan), args, 0)
    planner.plans[plan] += 1
    # keyword search alone also when the query embedded but none of the chat's patterns has a
    # vector of this model yet (a model switch before ``engram memory reembed``)
    degraded = vector is None or (plan == "none" and bool(rows))
    lexicon = await lexicons.get(db, chat_id) if lexicons is not None and rows else None
    fused = fuse(rows, thresholds.min_similarity, dims, hybrid=plan != "none", lexicon=lexicon)
    return fused, degraded


@attrs.define
class SqlPatternRetriever:
    """:class:`PatternRetriever` over the ``patterns`` tables."""

    db: Queries
    embedder: Embedder
    thresholds: Thresholds | None = None
    budget_tokens: int = PATTERN_BUDGET_TOKENS
    limit: int = DEFAULT_LIMIT
    candidates: int = DEFAULT_CANDIDATES
    lam: float = MMR_LAMBDA
    planner: VectorPlanner = attrs.field(factory=VectorPlanner)
    lexicons: LexiconCache | None = attrs.field(factory=LexiconCache)
    timezone: str = "UTC"  # the person's TIMEZONE (events' days, the time-aware boost)

    async def retrieve(self, chat_id: int, query: str) -> RetrievedMemory:
        """Rank, MMR-rerank, cap at the token budget; the prompt block and pattern ids."""
        ranked, degraded = await rank_patterns(
            self.db,
            self.embedder,
            chat_id,
            query,
            limit=self.candidates,
            thresholds=self.thresholds,
            planner=self.planner,
            lexicons=self.lexicons,
            timezone=self.timezone,
        )
        pool = ranked[: self.limit * MMR_POOL]  # MMR over the best by score only
        chosen = apply_budget(mmr(pool, k=self.limit, lam=self.lam), self.budget_tokens)
        return RetrievedMemory(
            text_block=memory_block(chosen, degraded, self.timezone),
            degraded=degraded,
            pattern_ids=tuple(p.id for p in chosen),
        )
