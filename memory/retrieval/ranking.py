"""Pattern retrieval math (seed 000, "Pattern retrieval with typed decay + floor"): the one
home of the retrieval score, and the place where MMR reranking, the injected-pattern budget and
RRF fusion run::

    relevance = (1 - LEXICAL_SHARE) * max(cosine, 0) + LEXICAL_SHARE * lexical / max_lexical
    recency   = floor + (1 - floor) * exp(-ln2 * days / half_life)  # per kind; core tenets 1
    memory    = 1 + 0.25 * min(ln(1 + strength), 2.0)
    boost     = event_boost * temporal_boost                       # 1 when neither applies
    weight    = recency * memory * confidence * validity * boost
    score     = relevance * weight

``days`` is the time since the pattern was last seen, except for an event (a pattern with a
day, ``occurs_on``): the whole days from its day to today in ``TIMEZONE`` (negative while it is
ahead, which counts as 0). A fact barely fades (half-life 730 days, floor 0.8); an event keeps
full weight until its day and then fades like an emotion. A core tenet (``is_core_tenet``,
seed 000 "Core tenets") never decays. ``event_boost`` is :data:`EVENT_NEAR_BOOST` from
:data:`EVENT_AHEAD_DAYS` before an event's day to :data:`EVENT_AFTER_DAYS` after it;
``temporal_boost`` is :data:`TEMPORAL_BOOST` when the pattern's ``temporal`` hints match the
turn's local time of day, weekday, season or month (:mod:`memory.retrieval.temporal`).

``validity`` is 1.0 for active patterns, 0.0 for superseded/deprecated/merged ones and
``DISPUTED_VALIDITY`` (0.5) for disputed ones: a disputed pattern is a live but contested
hypothesis, so it still surfaces on a strong match, at half weight.

The store computes the weight in SQL: :data:`WEIGHT_SQL` (with :data:`WEIGHT_JOINS` and the
arrays of :func:`weight_parameters`) is generated from the constants here, and
:func:`relevance` runs in Python on the SQL's candidates (:mod:`memory.retrieval.retriever`).
The Python :func:`recency`, :func:`memory_factor`, :func:`validity`, :func:`event_boost`,
:func:`temporal_boost`, :func:`weight` and :func:`score` are the oracle the tests compare the
SQL with (and the LoCoMo bench's reference); no production path calls them.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from datetime import date, datetime
from types import MappingProxyType
from typing import Protocol, TypeVar
from zoneinfo import ZoneInfo

import attrs
import numpy as np
import numpy.typing as npt

from memory.retrieval.temporal import Moment, matches, moment, moment_json

Vector = Sequence[float] | npt.NDArray[np.floating]

MIN_SIMILARITY = 0.4
MMR_LAMBDA = 0.7
PATTERN_BUDGET_TOKENS = 2000
CHARS_PER_TOKEN = 4
RRF_K = 60
DISPUTED_VALIDITY = 0.5
MEMORY_WEIGHT = 0.25
MEMORY_LOG_CAP = 2.0
EVENT_NEAR_BOOST = 1.5  # an event from EVENT_AHEAD_DAYS before its day to EVENT_AFTER_DAYS after
EVENT_AHEAD_DAYS = 14
EVENT_AFTER_DAYS = 2
TEMPORAL_BOOST = 1.2  # a pattern whose temporal hints match the turn's local moment


@attrs.frozen
class Decay:
    """Typed decay of one pattern kind: half-life in days and the recency floor."""

    half_life_days: float
    floor: float


DECAY_BY_KIND: Mapping[str, Decay] = MappingProxyType(
    {
        "behavior": Decay(90.0, 0.45),
        "belief": Decay(90.0, 0.45),
        "goal": Decay(60.0, 0.35),
        "preference": Decay(90.0, 0.45),
        "emotion": Decay(14.0, 0.15),
        "temporal": Decay(365.0, 0.60),
        "causal": Decay(90.0, 0.45),
        "fact": Decay(730.0, 0.80),  # stable: a job, a family, where they live
        "event": Decay(14.0, 0.15),  # measured from its day (occurs_on), like an emotion
    }
)

VALIDITY_BY_STATUS: Mapping[str, float] = MappingProxyType(
    {
        "active": 1.0,
        "disputed": DISPUTED_VALIDITY,
        "superseded": 0.0,
        "deprecated": 0.0,
        "merged": 0.0,
    }
)


def recency(kind: str, days: float, *, core: bool = False) -> float:
    """Typed decay with floor; ``days`` since last seen, or since an event's day (negative:
    clock skew, or an event still ahead, counts as 0); 1.0 for a core tenet."""
    try:
        decay = DECAY_BY_KIND[kind]
    except KeyError:
        raise ValueError(f"unknown pattern kind {kind!r}") from None
    if core:
        return 1.0
    days = max(days, 0.0)
    return decay.floor + (1.0 - decay.floor) * math.exp(-math.log(2) * days / decay.half_life_days)


def memory_factor(strength: float) -> float:
    """``1 + 0.25 * min(ln(1 + strength), 2)``, in [1.0, 1.5]; negative strength counts as 0."""
    return 1.0 + MEMORY_WEIGHT * min(math.log1p(max(strength, 0.0)), MEMORY_LOG_CAP)


def validity(status: str) -> float:
    """1.0 active, 0.5 disputed, 0.0 superseded/deprecated/merged."""
    try:
        return VALIDITY_BY_STATUS[status]
    except KeyError:
        raise ValueError(f"unknown pattern status {status!r}") from None


def event_boost(days_since: int | None) -> float:
    """:data:`EVENT_NEAR_BOOST` when an event's day is at most :data:`EVENT_AHEAD_DAYS` ahead
    or :data:`EVENT_AFTER_DAYS` behind (``days_since`` = today - its day), else 1.0 (also for
    a pattern without a day: ``None``)."""
    if days_since is None or not -EVENT_AHEAD_DAYS <= days_since <= EVENT_AFTER_DAYS:
        return 1.0
    return EVENT_NEAR_BOOST


def temporal_boost(temporal: Mapping[str, object] | None, at: Moment) -> float:
    """:data:`TEMPORAL_BOOST` when the hints match the moment ``at``
    (:func:`memory.retrieval.temporal.matches`), else 1.0."""
    return TEMPORAL_BOOST if matches(temporal, at) else 1.0


def weight(
    kind: str,
    days: float,
    strength: float,
    confidence: float,
    status: str,
    *,
    core: bool = False,
    boost: float = 1.0,
) -> float:
    """The typed weight of one pattern: ``recency × memory × confidence × validity × boost``
    (``boost``: :func:`event_boost` × :func:`temporal_boost`)."""
    decay = recency(kind, days, core=core)
    return decay * memory_factor(strength) * confidence * validity(status) * boost


def score(
    relevance: float,
    kind: str,
    days: float,
    strength: float,
    confidence: float,
    status: str,
    *,
    core: bool = False,
    boost: float = 1.0,
) -> float:
    """The retrieval score of one pattern: ``relevance × weight`` (callers drop candidates with
    a cosine below ``MIN_SIMILARITY`` first)."""
    return relevance * weight(kind, days, strength, confidence, status, core=core, boost=boost)


# --- relevance (Python, on the SQL's candidates) -------------------------------------------

LEXICAL_SHARE = 0.5  # relevance = (1 - share) × cosine + share × lexical / max lexical


def relevance(similarity: float | None, lexical: float, max_lexical: float) -> float:
    """``0.5 × max(similarity, 0) + 0.5 × lexical / max_lexical``; ``lexical / max_lexical``
    alone without a similarity (the degraded path). Pure."""
    lex = lexical / max_lexical if max_lexical > 0.0 else 0.0
    if similarity is None:
        return lex
    return (1.0 - LEXICAL_SHARE) * max(similarity, 0.0) + LEXICAL_SHARE * lex


# --- the weight in SQL ----------------------------------------------------------------------

_DAYS_SQL = """CASE WHEN p.occurs_on IS NOT NULL THEN ($8::date - p.occurs_on)::float8
             ELSE extract(epoch FROM ($2::timestamptz - p.last_seen)) / 86400.0 END"""
_HINTS_SQL = """(SELECT bool_and(($9::jsonb -> t.key) ? lower(btrim(t.value)))
             FROM jsonb_each_text(CASE jsonb_typeof(p.temporal) WHEN 'object'
                                  THEN p.temporal END) t
             WHERE $9::jsonb ? t.key AND t.value IS NOT NULL)"""

#: The typed weight as a SQL expression over a pattern ``p``, the decay row ``d`` and the
#: validity row ``v`` that :data:`WEIGHT_JOINS` joins, with ``$2`` the present (timestamptz),
#: ``$8`` today's local date and ``$9`` the local moment (:func:`weight_parameters`).
WEIGHT_SQL = f"""
    (CASE WHEN p.is_core_tenet THEN 1.0 ELSE
       d.floor + (1 - d.floor) * exp(-ln(2) * greatest({_DAYS_SQL}, 0) / d.half_life) END)
    * (1 + {MEMORY_WEIGHT} * least(ln(1 + greatest(p.strength, 0)), {MEMORY_LOG_CAP}))
    * p.confidence * v.validity
    * (CASE WHEN ($8::date - p.occurs_on) BETWEEN {-EVENT_AHEAD_DAYS} AND {EVENT_AFTER_DAYS}
       THEN {EVENT_NEAR_BOOST} ELSE 1 END)
    * (CASE WHEN coalesce({_HINTS_SQL}, false) THEN {TEMPORAL_BOOST} ELSE 1 END)"""

#: The joins giving :data:`WEIGHT_SQL` its ``d`` (per kind) and ``v`` (per status) rows, from
#: the arrays ``$3`` .. ``$7`` of :func:`weight_parameters`; a pattern of an unknown kind or
#: status has no row, so no weight.
WEIGHT_JOINS = """
    JOIN unnest($3::text[], $4::float8[], $5::float8[]) AS d(kind, half_life, floor)
      ON d.kind = p.kind
    JOIN unnest($6::text[], $7::float8[]) AS v(status, validity) ON v.status = p.status"""

WeightParameters = tuple[list[str], list[float], list[float], list[str], list[float], date, str]


def weight_parameters(now: datetime, timezone: str) -> WeightParameters:
    """The parameters ``$3`` .. ``$9`` of :data:`WEIGHT_SQL` and :data:`WEIGHT_JOINS`: kinds,
    their half-lives (days) and floors (:data:`DECAY_BY_KIND`), statuses and their validities
    (:data:`VALIDITY_BY_STATUS`), today in ``timezone`` and the moment ``now`` there (JSON of
    every recognised hint key, see :func:`memory.retrieval.temporal.moment`)."""
    return (
        list(DECAY_BY_KIND),
        [d.half_life_days for d in DECAY_BY_KIND.values()],
        [d.floor for d in DECAY_BY_KIND.values()],
        list(VALIDITY_BY_STATUS),
        list(VALIDITY_BY_STATUS.values()),
        local_today(now, timezone),
        moment_json(moment(now, timezone)),
    )


def local_today(now: datetime, timezone: str) -> date:
    """The date of ``now`` in ``timezone`` (what an event's days are counted from)."""
    return now.astimezone(ZoneInfo(timezone)).date()


# --- MMR ------------------------------------------------------------------------------------


class Scored(Protocol):
    """Anything with a retrieval score."""

    @property
    def score(self) -> float: ...


class Embedded(Scored, Protocol):
    """A scored item with an embedding vector."""

    @property
    def vector(self) -> Vector: ...


class Sized(Scored, Protocol):
    """A scored item with the text that would be injected."""

    @property
    def text(self) -> str: ...


@attrs.frozen
class Candidate:
    """A ready-made retrieval candidate satisfying :class:`Embedded` and :class:`Sized`."""

    id: int
    score: float
    vector: Vector = attrs.field(eq=False, repr=False)
    text: str = ""


E = TypeVar("E", bound=Embedded)
S = TypeVar("S", bound=Sized)
H = TypeVar("H", bound=Hashable)


def _unit_rows(vectors: Sequence[Vector]) -> npt.NDArray[np.float64]:
    mat = np.asarray([np.asarray(v, dtype=np.float64).ravel() for v in vectors], dtype=np.float64)
    norms = np.linalg.norm(mat, axis=1, keepdims=True)
    norms[norms == 0.0] = 1.0
    unit: npt.NDArray[np.float64] = mat / norms
    return unit


def mmr(candidates: Sequence[E], k: int | None = None, lam: float = MMR_LAMBDA) -> list[E]:
    """Maximal Marginal Relevance: pick up to ``k`` items, trading score against redundancy.

    The first pick is the highest score; each next one maximises
    ``lam * score - (1 - lam) * max cosine similarity to the already selected``.
    Ties go to the earlier candidate. Vectors are normalised here, so they need not be unit.
    """
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must be in [0, 1], got {lam}")
    n = len(candidates)
    k = n if k is None else min(k, n)
    if k <= 0:
        return []
    vecs = _unit_rows([c.vector for c in candidates])
    sims = vecs @ vecs.T
    scores = np.asarray([c.score for c in candidates], dtype=np.float64)
    first = int(np.argmax(scores))
    selected = [first]
    remaining = np.ones(n, dtype=bool)
    remaining[first] = False
    max_sim = sims[first].copy()
    while len(selected) < k:
        mmr_scores = lam * scores - (1.0 - lam) * max_sim
        mmr_scores[~remaining] = -np.inf
        pick = int(np.argmax(mmr_scores))
        selected.append(pick)
        remaining[pick] = False
        np.maximum(max_sim, sims[pick], out=max_sim)
    return [candidates[i] for i in selected]


# --- budget ---------------------------------------------------------------------------------


def estimate_tokens(text: str) -> int:
    """Rough token count: ``ceil(len(text) / 4)``."""
    return -(-len(text) // CHARS_PER_TOKEN)


def apply_budget(items: Sequence[S], max_tokens: int = PATTERN_BUDGET_TOKENS) -> list[S]:
    """Drop the lowest-scored items until the total estimated tokens fit ``max_tokens``.

    Order is otherwise kept (items arrive in rank/MMR order). Among equal scores the later item
    goes first. An item larger than the whole budget is always dropped eventually.
    """
    tokens = [estimate_tokens(it.text) for it in items]
    total = sum(tokens)
    keep = [True] * len(items)
    drop_order = sorted(range(len(items)), key=lambda i: (items[i].score, -i))
    for i in drop_order:
        if total <= max_tokens:
            break
        keep[i] = False
        total -= tokens[i]
    return [it for it, kept in zip(items, keep, strict=True) if kept]


# --- RRF ------------------------------------------------------------------------------------


def rrf(rankings: Sequence[Sequence[H]], k: int = RRF_K) -> list[tuple[H, float]]:
    """Reciprocal Rank Fusion: ``sum 1 / (k + rank)`` over lists (rank from 1), best first.

    A repeated id within one list counts at its best rank only. Ties keep first-seen order.
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    fused: dict[H, float] = {}
    for ranking in rankings:
        seen: set[H] = set()
        for rank, item in enumerate(ranking, start=1):
            if item in seen:
                continue
            seen.add(item)
            fused[item] = fused.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(fused.items(), key=lambda kv: -kv[1])
