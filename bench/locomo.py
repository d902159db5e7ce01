"""LoCoMo evidence recall of pattern retrieval: vector only, full-text only, the product's hybrid.

    .venv/bin/python bench/locomo.py ../shared/data/locomo/locomo_dev5.json [--url URL]
        [--experiments] [--synthetic] [--smoke]

``--smoke``: the first conversation's first 12 questions, or, when the path is absent, a tiny
two-session conversation built here (no LoCoMo data is ever copied into the repository).

Each conversation's observations (LLM-extracted atomic claims with the dialog ids they rest on)
become the active patterns of one chat (kind ``behavior``, confidence 0.5, strength 1,
``first_seen = last_seen`` = the session's date) in a throwaway database (an embedded
PostgreSQL in a temporary directory unless ``--url`` is given), embedded with the local model.
The evidence ids live in a side map here, never in the database. For every question of
categories 1-4 with evidence ids, each arm retrieves the top 5 and top 10 patterns of the
conversation's chat; a question counts when a retrieved pattern's evidence ids intersect the
question's. ``now`` is the conversation's last session date (the chat's present).

* ``vector``: exact cosine order over the chat's vectors (``pattern_embeddings``);
* ``fulltext``: ``to_tsquery('english', memory.retrieval.query_text.or_tsquery(q))`` ranked
  by ``ts_rank``;
* ``hybrid``: :func:`memory.retrieval.retriever.rank_patterns` with a ``LexiconCache`` (the
  product path, as :class:`memory.retrieval.retriever.SqlPatternRetriever` runs it), in its
  score order (``hybrid+mmr``: after the retriever's MMR, i.e. what would be injected).

``--experiments`` also prints fusion/scoring variants computed here from the two arms
(:func:`variant_rankings`: RRF, weighted RRF, the product's cosine x RRF, a convex mix of
cosine and normalised lexical score, BM25 as SQL (:data:`BM25_SQL`) or as a re-scoring of both
arms' candidates, softened recency, content-word query vectors, centred cosine, pseudo-relevance
feedback) and the product path with the seed's thresholds, for the report only (about 5
minutes). ``--synthetic`` first runs everything on the sets written for engram,
``bench/data/paraphrases.jsonl`` (queries -> the claim and its paraphrases among all 230 claims,
hard negatives included) and ``bench/data/dialog_recall.json`` (a two-person, ten-session chat
of 84 claims and 50 questions): those are the sets to study failures on; LoCoMo is measured,
not tuned on.

Figures on this machine (5 conversations, 760 questions, local embedder, 2026-11; see the
README's memory section): vector 0.554 @5, ts_rank full-text 0.574, RRF 0.586. The product
(the seed's recency at full strength in every variant): cosine x normalised RRF x typed weight
0.488 @5 (0.597 @10; 0.584 @5 without recency), the former product; (0.5 cosine + 0.5
ts_rank/max) x typed weight 0.530 (0.600); (0.5 cosine + 0.5 BM25/max, BM25 re-scoring both
arms' candidates with the chat's cached document frequencies) x typed weight 0.578 (0.641), the
product now. Here every observation counts as a ``behavior`` (60-day half-life) and the dates
span months, so the seed's recency costs recall: 0.5 cosine + 0.5 BM25/max 0.617 without it
(0.616 with recency at a quarter strength). Any-observation-matches ceiling: 0.830.

Last line exactly:
``locomo recall@5 hybrid=<a> vector=<b> fulltext=<c> recall@10 hybrid=<d> questions=<n>``
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())

from _smoke import add_smoke_flag

from memory.embeddings.providers import LocalEmbedder
from memory.embeddings.store import store_vectors
from memory.embeddings.thresholds import SEED, Thresholds
from memory.patterns.canonical import canonical_hash
from memory.retrieval.query_text import content_text, content_words, or_tsquery
from memory.retrieval.ranking import memory_factor, mmr, recency
from runtime import db as dbmod
from runtime.embedded_pg import embedded_postgres
from runtime.migrate import apply_migrations

DIA_ID = re.compile(r"D\d+:\d+")
CATEGORIES = (1, 2, 3, 4)
KS = (5, 10)
CANDIDATES = 60  # rows per arm (the product's default)
KIND = "behavior"
CONFIDENCE = 0.5
SYNTHETIC_SET = Path(__file__).resolve().parent / "data" / "paraphrases.jsonl"
DIALOG_SET = Path(__file__).resolve().parent / "data" / "dialog_recall.json"
SMOKE_QUESTIONS = 12  # --smoke: the first conversation's first questions


@attrs.frozen
class Observation:
    content: str
    evidence: frozenset[str]
    at: datetime


@attrs.frozen
class Question:
    text: str
    category: int
    evidence: frozenset[str]


@attrs.frozen
class Conversation:
    name: str
    chat_id: int
    observations: tuple[Observation, ...]
    questions: tuple[Question, ...]
    now: datetime


# --- loading ----------------------------------------------------------------------------------


def session_date(text: str) -> datetime:
    """``'1:56 pm on 8 May, 2023'`` -> an aware datetime (UTC)."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def evidence_ids(value: Any) -> frozenset[str]:
    """Every ``D<n>:<m>`` in a string or list of strings (some ids are malformed/joined)."""
    items = value if isinstance(value, list) else [value]
    return frozenset(m for item in items for m in DIA_ID.findall(str(item)))


def load_locomo(path: Path) -> tuple[list[Conversation], int]:
    """Conversations (chat ids 1..n) and the count of questions dropped for lack of evidence."""
    data = json.loads(path.read_text(encoding="utf-8"))
    conversations, dropped = [], 0
    for chat_id, sample in enumerate(data, start=1):
        conv = sample["conversation"]
        observations = []
        dates = []
        for key, per_speaker in sample["observation"].items():
            n = int(re.fullmatch(r"session_(\d+)_observation", key).group(1))  # type: ignore[union-attr]
            at = session_date(conv[f"session_{n}_date_time"])
            dates.append(at)
            for items in per_speaker.values():
                for claim, evidence in items:
                    observations.append(Observation(claim, evidence_ids(evidence), at))
        questions = []
        for qa in sample["qa"]:
            if qa["category"] not in CATEGORIES:
                continue
            ids = evidence_ids(qa.get("evidence", []))
            if not ids:
                dropped += 1
                continue
            questions.append(Question(str(qa["question"]), int(qa["category"]), ids))
        conversations.append(
            Conversation(
                str(sample.get("sample_id", chat_id)),
                chat_id,
                tuple(observations),
                tuple(questions),
                max(dates),
            )
        )
    return conversations, dropped


#: --smoke without the LoCoMo file: (session date, speaker's claims, question about each claim)
TINY_SESSIONS = (
    (
        "2023-05-08",
        (
            ("Mia adopted a grey cat called Pepper", "What pet did Mia adopt?"),
            ("Leo started running before work", "When does Leo go running?"),
            ("Mia works as a nurse at the city hospital", "What is Mia's job?"),
        ),
    ),
    (
        "2023-06-20",
        (
            ("Leo ran his first half marathon in June", "What race did Leo run?"),
            ("Mia's sister moved to Lisbon", "Where did Mia's sister move?"),
            ("Leo is learning to bake sourdough bread", "What is Leo learning to bake?"),
        ),
    ),
)


def tiny_locomo() -> Conversation:
    """A two-session conversation built here, in LoCoMo's shape (``--smoke`` when the data is
    absent): one claim per dialog id, one category-1 question citing it."""
    observations, questions = [], []
    for n, (day, items) in enumerate(TINY_SESSIONS, start=1):
        at = datetime.fromisoformat(day).replace(tzinfo=UTC)
        for m, (claim, question) in enumerate(items, start=1):
            observations.append(Observation(claim, frozenset({f"D{n}:{m}"}), at))
            questions.append(Question(question, 1, frozenset({f"D{n}:{m}"})))
    at = observations[-1].at
    return Conversation("tiny", 1, tuple(observations), tuple(questions), at)


def smoke_conversations(path: Path | None) -> tuple[list[Conversation], int]:
    """The first conversation of ``path`` with its first questions, or :func:`tiny_locomo`."""
    if path is None or not path.is_file():
        print(f"LoCoMo data not at {path}: a tiny conversation built here instead", flush=True)
        return [tiny_locomo()], 0
    conversations, dropped = load_locomo(path)
    first = conversations[0]
    return [attrs.evolve(first, questions=first.questions[:SMOKE_QUESTIONS])], dropped


def load_synthetic(path: Path = SYNTHETIC_SET) -> Conversation:
    """The paraphrase set as one chat: every distinct claim is a pattern; each query's evidence
    is its group's claim and paraphrases (related-but-different claims are distractors)."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    at = datetime(2026, 1, 1, tzinfo=UTC)
    evidence: dict[str, set[str]] = defaultdict(set)
    questions = []
    for r in rows:
        tag = f"G{r['group']}"
        if r["label"] == "same":
            evidence[r["a"]].add(tag)
            evidence[r["b"]].add(tag)
        elif r["label"] == "related":
            evidence[r["a"]].add(tag)
            evidence.setdefault(r["b"], set())  # a distractor: no evidence of its own
        elif r["label"] == "query":
            questions.append(Question(r["a"], 0, frozenset({tag})))
    observations = tuple(Observation(c, frozenset(e), at) for c, e in evidence.items())
    return Conversation("synthetic", 9_000, observations, tuple(questions), at)


def load_dialog_set(path: Path = DIALOG_SET) -> Conversation:
    """bench/data/dialog_recall.json (written for engram, in the style of a two-person
    multi-session chat): claims per dated session, questions citing claim ids ``S<n>:<i>``."""
    data = json.loads(path.read_text(encoding="utf-8"))
    observations = []
    for n, session in enumerate(data["sessions"], start=1):
        at = datetime.fromisoformat(session["date"]).replace(tzinfo=UTC)
        for i, claim in enumerate(session["claims"], start=1):
            observations.append(Observation(claim, frozenset({f"S{n}:{i}"}), at))
    questions = tuple(
        Question(q["question"], 0, frozenset(q["evidence"])) for q in data["questions"]
    )
    now = max(o.at for o in observations)
    return Conversation("dialog", 9_001, tuple(observations), questions, now)


# --- database -----------------------------------------------------------------------------------


async def load_chat(
    db: dbmod.Database, embedder: LocalEmbedder, conv: Conversation
) -> dict[int, Observation]:
    """Insert and embed the conversation's patterns; pattern id -> observation."""
    ids: dict[int, Observation] = {}
    for obs in conv.observations:
        pid = await db.fetchval(
            "INSERT INTO patterns (chat_id, content, kind, confidence, strength, canonical_hash,"
            " first_seen, last_seen) VALUES ($1, $2, $3, $4, 1.0, $5, $6, $6) RETURNING id",
            conv.chat_id,
            obs.content,
            KIND,
            CONFIDENCE,
            canonical_hash(obs.content),
            obs.at,
        )
        ids[int(pid)] = obs
    vectors = await embedder.embed([o.content for o in ids.values()], purpose="bench")
    await store_vectors(
        db,
        "pattern_embeddings",
        "pattern_id",
        list(zip(ids, vectors, strict=True)),
        embedder.model,
    )
    return ids


async def vector_arm(
    db: dbmod.Database, model: str, chat_id: int, vector: np.ndarray, limit: int
) -> list[tuple[int, float]]:
    rows = await db.fetch(
        "SELECT pattern_id, 1 - (embedding <=> $3::vector) AS sim FROM pattern_embeddings"
        " WHERE model = $1 AND chat_id = $2 ORDER BY embedding <=> $3::vector LIMIT $4",
        model,
        chat_id,
        vector,
        limit,
    )
    return [(int(r["pattern_id"]), float(r["sim"])) for r in rows]


async def fulltext_arm(
    db: dbmod.Database, chat_id: int, tsquery: str, limit: int
) -> list[tuple[int, float]]:
    if not tsquery:
        return []
    rows = await db.fetch(
        "SELECT p.id, ts_rank(p.text_search, q) AS rank FROM patterns p,"
        " to_tsquery('english', $2) q WHERE p.chat_id = $1 AND p.text_search @@ q"
        " ORDER BY rank DESC, p.id DESC LIMIT $3",
        chat_id,
        tsquery,
        limit,
    )
    return [(int(r["id"]), float(r["rank"])) for r in rows]


#: The lexical arm recommended for memory.retrieval.retriever: BM25 (k1 1.2, b 0.75, tf taken as 1
# since
#: claims rarely repeat a word) with document frequencies counted over the chat's live patterns
#: through the GIN index. $1 chat, $2 the query's content words, $3 limit, $4 live statuses.
BM25_SQL = """
WITH terms AS (
    SELECT DISTINCT lex FROM unnest(tsvector_to_array(to_tsvector('english', $2))) AS t(lex)),
live AS (
    SELECT count(*)::float8 AS n, coalesce(avg(length(text_search)), 1)::float8 AS avglen
    FROM patterns WHERE chat_id = $1 AND status = ANY($4::text[])),
df AS (
    SELECT t.lex, quote_literal(t.lex)::tsquery AS q,
           (SELECT count(*) FROM patterns p WHERE p.chat_id = $1 AND p.status = ANY($4::text[])
              AND p.text_search @@ quote_literal(t.lex)::tsquery)::float8 AS df
    FROM terms t)
SELECT p.id, sum(ln(1 + (live.n - df.df + 0.5) / (df.df + 0.5))
                 * 2.2 / (1 + 1.2 * (0.25 + 0.75 * length(p.text_search) / live.avglen))) AS score
FROM df
JOIN patterns p ON p.text_search @@ df.q AND p.chat_id = $1 AND p.status = ANY($4::text[])
CROSS JOIN live
WHERE df.df > 0
GROUP BY p.id
ORDER BY score DESC, p.id DESC
LIMIT $3"""


async def bm25_arm(
    db: dbmod.Database, chat_id: int, text: str, limit: int
) -> list[tuple[int, float]]:
    words = content_text(text)
    if not words:
        return []
    rows = await db.fetch(BM25_SQL, chat_id, words, limit, ["active", "disputed"])
    return [(int(r["id"]), float(r["score"])) for r in rows]


async def hybrid_arm(
    db: dbmod.Database,
    embedder: LocalEmbedder,
    chat_id: int,
    query: str,
    now: datetime,
    thresholds: Thresholds | None = None,
) -> tuple[list[int], list[int]] | None:
    """The product path: ``memory.retrieval.retriever.rank_patterns`` order, and that order
    after the retriever's MMR (lambda 0.7) as injected; None until the module exists."""
    try:
        from memory.retrieval.retriever import rank_patterns
        from memory.retrieval.sql import LexiconCache
    except ImportError:
        return None
    ranked, _degraded = await rank_patterns(
        db,
        embedder,
        chat_id,
        query,
        limit=CANDIDATES,
        now=now,
        thresholds=thresholds,
        lexicons=LexiconCache(),
    )
    return [p.id for p in ranked], [p.id for p in mmr(ranked, k=max(KS))]


# --- scoring ------------------------------------------------------------------------------------


@attrs.define
class Recall:
    """Hits per arm and k over the questions seen."""

    hits: dict[tuple[str, int, int], int] = attrs.field(factory=lambda: defaultdict(int))
    per_category: dict[int, int] = attrs.field(factory=lambda: defaultdict(int))

    @property
    def questions(self) -> int:
        return sum(self.per_category.values())

    def count(self, q: Question) -> None:
        self.per_category[q.category] += 1

    def add(
        self, arm: str, ranking: Sequence[int], evidence: dict[int, Observation], q: Question
    ) -> None:
        for k in KS:
            if any(evidence[i].evidence & q.evidence for i in ranking[:k]):
                self.hits[(arm, k, q.category)] += 1

    def value(self, arm: str, k: int, category: int | None = None) -> float:
        cats = list(self.per_category) if category is None else [category]
        hits = sum(self.hits.get((arm, k, c), 0) for c in cats)
        total = sum(self.per_category[c] for c in cats)
        return hits / total if total else 0.0


Variant = Callable[["Arms"], list[int]]


@attrs.frozen
class Arms:
    """One question's candidates: both arms (id, value) best first, and each pattern's age."""

    vec: list[tuple[int, float]]
    fts: list[tuple[int, float]]
    days: dict[int, float]
    bm25: list[tuple[int, float]] = attrs.field(factory=list)
    allsims: dict[int, float] = attrs.field(factory=dict)
    vec_cw: list[tuple[int, float]] = attrs.field(factory=list)
    allsims_cw: dict[int, float] = attrs.field(factory=dict)
    qvec: Any = None  # the query vector
    qvec_cw: Any = None  # the query's content words' vector
    ids: tuple[int, ...] = ()  # the chat's pattern ids, rows of ``mat``
    mat: Any = None  # the chat's pattern vectors
    bm25_sql: list[tuple[int, float]] = attrs.field(factory=list)
    bm25_rescored: list[tuple[int, float]] = attrs.field(factory=list)  # of both arms' candidates


@attrs.frozen
class Lexicon:
    """The chat's lexemes as Postgres stems them (``unnest(text_search)``), for BM25."""

    tf: dict[int, dict[str, int]]
    df: dict[str, int]
    avg_len: float

    def bm25(
        self,
        terms: Sequence[str],
        k1: float = 1.2,
        b: float = 0.75,
        only: set[int] | None = None,
    ) -> list[tuple[int, float]]:
        """BM25 of the chat's patterns (or of ``only`` those) for ``terms``, best first."""
        n = len(self.tf)
        out = []
        for pid, doc in self.tf.items():
            if only is not None and pid not in only:
                continue
            length = sum(doc.values())
            score = 0.0
            for t in terms:
                f = doc.get(t, 0)
                if f:
                    idf = np.log(1 + (n - self.df[t] + 0.5) / (self.df[t] + 0.5))
                    score += idf * f * (k1 + 1) / (f + k1 * (1 - b + b * length / self.avg_len))
            if score > 0:
                out.append((pid, float(score)))
        out.sort(key=lambda kv: (-kv[1], -kv[0]))
        return out[:CANDIDATES]


async def lexicon(db: dbmod.Database, chat_id: int) -> Lexicon:
    rows = await db.fetch(
        "SELECT p.id, u.lexeme, coalesce(array_length(u.positions, 1), 1) AS tf"
        " FROM patterns p, unnest(p.text_search) u WHERE p.chat_id = $1",
        chat_id,
    )
    tf: dict[int, dict[str, int]] = defaultdict(dict)
    df: dict[str, int] = defaultdict(int)
    for r in rows:
        tf[int(r["id"])][str(r["lexeme"])] = int(r["tf"])
        df[str(r["lexeme"])] += 1
    avg = sum(sum(d.values()) for d in tf.values()) / max(len(tf), 1)
    return Lexicon(dict(tf), dict(df), avg)


async def query_lexemes(db: dbmod.Database, tsquery: str) -> list[str]:
    if not tsquery:
        return []
    found = await db.fetchval(
        "SELECT tsvector_to_array(to_tsvector('english', replace($1, ' | ', ' ')))", tsquery
    )
    return list(found or [])


def _weight(arms: Arms, pid: int, with_recency: bool = True) -> float:
    rec = recency(KIND, arms.days[pid]) if with_recency else 1.0
    return rec * memory_factor(1.0) * CONFIDENCE


def _rrf_ids(
    arms: Arms, k: int = 60, fts_weight: float = 1.0, bm25: bool = False
) -> dict[int, float]:
    out: dict[int, float] = defaultdict(float)
    for r, (pid, _) in enumerate(arms.vec, 1):
        out[pid] += 1.0 / (k + r)
    for r, (pid, _) in enumerate(arms.bm25 if bm25 else arms.fts, 1):
        out[pid] += fts_weight / (k + r)
    return out


def _best(scores: dict[int, float]) -> list[int]:
    return [pid for pid, _ in sorted(scores.items(), key=lambda kv: (-kv[1], -kv[0]))]


def variant_rankings(min_sim: float) -> dict[str, Variant]:
    """Fusion/scoring variants, from the arms of one question (for the report).

    ``relevance`` is one of: ``rrf`` (k = 60, vector + ts_rank arms), ``product`` (the product's
    ``cosine x RRF / max RRF``), ``convex`` (``0.5 cosine + 0.5 lexical / max lexical``, cosine
    of every candidate); ``_bm25`` uses BM25 instead of ts_rank for the lexical arm, ``_cw`` the
    query's content words (memory.retrieval.query_text) for the query vector. The typed weight is
    then applied with recency at strength ``beta``: ``relevance x (1 - beta + beta x recency)``
    (beta 1 = the seed's formula, 0 = no recency; memory and confidence are constant here).
    """

    def soft(a: Arms, pid: int, beta: float) -> float:
        return 1.0 - beta + beta * recency(KIND, a.days[pid])

    def rrf_rel(a: Arms, bm25: bool = False) -> dict[int, float]:
        return _rrf_ids(a, bm25=bm25)

    def product_rel(a: Arms, bm25: bool = False) -> dict[int, float]:
        fused = _rrf_ids(a, bm25=bm25)
        top = max(fused.values(), default=1.0)
        return {
            pid: a.allsims[pid] * f / top
            for pid, f in fused.items()
            if a.allsims.get(pid, 0.0) >= min_sim
        }

    def convex_rel(
        a: Arms,
        bm25: bool | str = False,
        cw: bool = False,
        alpha: float = 0.5,
        override: dict[int, float] | None = None,
    ) -> dict[int, float]:
        sims = override or (a.allsims_cw if cw else a.allsims)
        lexical = {True: a.bm25, "sql": a.bm25_sql, "rescored": a.bm25_rescored, False: a.fts}[bm25]
        fmax = max((v for _, v in lexical), default=0.0) or 1.0
        lex = {pid: v / fmax for pid, v in lexical}
        vec_ids = [pid for pid, _ in (a.vec_cw if cw else a.vec)]
        if override:
            vec_ids = sorted(sims, key=lambda pid: -sims[pid])[:CANDIDATES]
        ids = set(vec_ids) | set(lex)
        return {pid: (1 - alpha) * sims[pid] + alpha * lex.get(pid, 0.0) for pid in ids}

    def prf_rel(a: Arms, m: int = 3, gamma: float = 0.5) -> dict[int, float]:
        """Rocchio pseudo-relevance feedback: the query vector plus ``gamma`` x the mean of the
        first pass's top ``m`` pattern vectors, then ``convex_bm25`` with the new cosines."""
        first = _best(convex_rel(a, bm25=True))[:m]
        row = {pid: i for i, pid in enumerate(a.ids)}
        q2 = np.asarray(a.qvec, np.float64) + gamma * a.mat[[row[pid] for pid in first]].mean(0)
        q2 /= np.linalg.norm(q2)
        sims2 = dict(zip(a.ids, (a.mat @ q2).tolist(), strict=True))
        return convex_rel(a, bm25=True, override=sims2)

    def centered(a: Arms, cw: bool = False) -> dict[int, float]:
        """Cosine after removing the chat's mean pattern vector from both sides (the common
        component: "User ..." / the speaker's name in every claim)."""
        mu = a.mat.mean(0)
        m = a.mat - mu
        m /= np.linalg.norm(m, axis=1, keepdims=True)
        q = np.asarray(a.qvec_cw if cw else a.qvec, np.float64) - mu
        q /= np.linalg.norm(q)
        return dict(zip(a.ids, (m @ q).tolist(), strict=True))

    def ranked(rel: dict[int, float], a: Arms, beta: float) -> list[int]:
        return _best({pid: r * soft(a, pid, beta) for pid, r in rel.items()})

    out: dict[str, Variant] = {
        "vector_cw": lambda a: [pid for pid, _ in a.vec_cw],
        "bm25": lambda a: [pid for pid, _ in a.bm25],
        "bm25_sql": lambda a: [pid for pid, _ in a.bm25_sql],
        "vector_centered": lambda a: _best(centered(a)),
        "vector_centered_cw": lambda a: _best(centered(a, cw=True)),
    }
    relevances: dict[str, Callable[[Arms], dict[int, float]]] = {
        "rrf": rrf_rel,
        "rrf_bm25": lambda a: rrf_rel(a, bm25=True),
        "product": product_rel,
        "product_bm25": lambda a: product_rel(a, bm25=True),
        "convex": convex_rel,
        "convex_bm25": lambda a: convex_rel(a, bm25=True),
        "convex_bm25_cw": lambda a: convex_rel(a, bm25=True, cw=True),
        "convex_bm25sql": lambda a: convex_rel(a, bm25="sql"),
        "convex_bm25rescored": lambda a: convex_rel(a, bm25="rescored"),
        "convex_bm25_a0.3": lambda a: convex_rel(a, bm25=True, alpha=0.3),
        "convex_bm25_prf": prf_rel,
        "convex_bm25_centered": lambda a: convex_rel(a, bm25=True, override=centered(a)),
        "convex_bm25_centered_cw": lambda a: convex_rel(
            a, bm25=True, override=centered(a, cw=True)
        ),
    }
    for name, rel in relevances.items():
        for beta in (0.0, 0.25, 1.0):
            out[f"{name} b={beta:g}"] = (
                lambda a, rel=rel, beta=beta: ranked(rel(a), a, beta)  # type: ignore[misc]
            )
    return out


# --- run ----------------------------------------------------------------------------------------


async def evaluate(
    db: dbmod.Database,
    embedder: LocalEmbedder,
    conversations: Sequence[Conversation],
    experiments: bool,
    min_sim: float,
) -> tuple[Recall, bool]:
    """Recall of every arm (and variant) over the conversations; whether hybrid ran."""
    recall = Recall()
    variants = variant_rankings(min_sim) if experiments else {}
    have_hybrid = True
    for conv in conversations:
        started = time.perf_counter()
        evidence = await load_chat(db, embedder, conv)
        days = {pid: (conv.now - o.at).total_seconds() / 86400 for pid, o in evidence.items()}
        vectors = await embedder.embed([q.text for q in conv.questions], purpose="bench")
        lex = await lexicon(db, conv.chat_id) if experiments else Lexicon({}, {}, 1.0)
        ids = tuple(evidence)
        mat = (
            np.stack(await embedder.embed([evidence[i].content for i in ids], purpose="bench"))
            if experiments
            else None
        )
        for q, vector in zip(conv.questions, vectors, strict=True):
            recall.count(q)
            vec = await vector_arm(db, embedder.model, conv.chat_id, vector, CANDIDATES)
            fts = await fulltext_arm(db, conv.chat_id, or_tsquery(q.text), CANDIDATES)
            recall.add("vector", [i for i, _ in vec], evidence, q)
            recall.add("fulltext", [i for i, _ in fts], evidence, q)
            hybrid = await hybrid_arm(db, embedder, conv.chat_id, q.text, conv.now)
            if hybrid is None:
                have_hybrid = False
            else:
                recall.add("hybrid", hybrid[0], evidence, q)
                recall.add("hybrid+mmr", hybrid[1], evidence, q)
            if variants and hybrid is not None:
                seed = await hybrid_arm(db, embedder, conv.chat_id, q.text, conv.now, SEED)
                recall.add("hybrid, seed thresholds", seed[0] if seed else [], evidence, q)
            if variants:
                terms = await query_lexemes(db, or_tsquery(q.text))
                bm25 = lex.bm25(terms)
                rescored = lex.bm25(terms, only={i for i, _ in fts} | {i for i, _ in vec})
                bm25_sql = await bm25_arm(db, conv.chat_id, q.text, CANDIDATES)
                every = await vector_arm(db, embedder.model, conv.chat_id, vector, 100_000)
                [cw] = await embedder.embed(
                    [" ".join(content_words(q.text)) or q.text], purpose="bench"
                )
                every_cw = await vector_arm(db, embedder.model, conv.chat_id, cw, 100_000)
                arms = Arms(
                    vec,
                    fts,
                    days,
                    bm25,
                    dict(every),
                    every_cw[:CANDIDATES],
                    dict(every_cw),
                    vector,
                    cw,
                    ids,
                    mat,
                    bm25_sql,
                    rescored,
                )
            else:
                arms = Arms(vec, fts, days)
            for name, rank in variants.items():
                recall.add(name, rank(arms), evidence, q)
        print(
            f"  {conv.name}: {len(conv.observations)} patterns, {len(conv.questions)} questions,"
            f" {time.perf_counter() - started:.1f} s",
            flush=True,
        )
    return recall, have_hybrid


def print_table(title: str, recall: Recall, arms: Sequence[str]) -> None:
    cats = sorted(c for c in recall.per_category if c)
    print(f"\n{title} ({recall.questions} questions)")
    print(
        f"{'arm':<26}"
        + "".join(f"{'@' + str(k):>8}" for k in KS)
        + "".join(f"{f'c{c}@5':>8}" for c in cats)
    )
    for arm in arms:
        print(
            f"{arm:<26}"
            + "".join(f"{recall.value(arm, k):>8.3f}" for k in KS)
            + "".join(f"{recall.value(arm, 5, c):>8.3f}" for c in cats)
        )
    if cats:
        counts = ", ".join(f"c{c} {recall.per_category[c]}" for c in cats)
        print(f"questions per category: {counts}")


async def run(url: str, args: argparse.Namespace) -> None:
    from memory.embeddings.thresholds import default_thresholds

    embedder = LocalEmbedder()
    min_sim = default_thresholds(embedder.model).min_similarity
    arms = ["hybrid", "hybrid+mmr", "vector", "fulltext"]
    if args.experiments:
        arms += ["hybrid, seed thresholds", *variant_rankings(min_sim)]
    async with dbmod.asyncio_loop(), dbmod.open_database(url, max_size=4) as db:
        await apply_migrations(db)
        if args.synthetic:
            for title, conv in (
                ("synthetic: bench/data/paraphrases.jsonl", load_synthetic()),
                ("synthetic: bench/data/dialog_recall.json", load_dialog_set()),
            ):
                syn, _ = await evaluate(db, embedder, [conv], args.experiments, min_sim)
                print_table(title, syn, arms)
        if args.path is None and not args.smoke:
            return
        load = smoke_conversations if args.smoke else load_locomo
        conversations, dropped = load(args.path)
        print(
            f"LoCoMo: {len(conversations)} conversations ({dropped} questions without"
            " evidence ids skipped)",
            flush=True,
        )
        recall, have_hybrid = await evaluate(db, embedder, conversations, args.experiments, min_sim)
    print_table("LoCoMo evidence recall, categories 1-4", recall, arms)
    hybrid5 = f"{recall.value('hybrid', 5):.3f}" if have_hybrid else "n/a"
    hybrid10 = f"{recall.value('hybrid', 10):.3f}" if have_hybrid else "n/a"
    print(
        f"locomo recall@5 hybrid={hybrid5} vector={recall.value('vector', 5):.3f}"
        f" fulltext={recall.value('fulltext', 5):.3f} recall@10 hybrid={hybrid10}"
        f" questions={recall.questions}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("path", type=Path, nargs="?", help="LoCoMo JSON (locomo10-style list)")
    parser.add_argument("--url", default="", help="PostgreSQL URL (default: embedded, temporary)")
    parser.add_argument("--experiments", action="store_true", help="also fusion variants")
    parser.add_argument("--synthetic", action="store_true", help="also the paraphrase set")
    add_smoke_flag(parser)
    args = parser.parse_args()
    if args.path is None and not args.synthetic and not args.smoke:
        parser.error("a LoCoMo path (or --synthetic) is required")

    async def start() -> None:
        if args.url:
            await run(args.url, args)
            return
        with tempfile.TemporaryDirectory(prefix="engram-bench-locomo-") as tmp:
            async with embedded_postgres(Path(tmp), "locomo") as url:
                await run(url, args)

    trio.run(start)


if __name__ == "__main__":
    main()
