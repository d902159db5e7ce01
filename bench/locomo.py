"""LoCoMo evidence recall of pattern retrieval: vector only, full-text only, the product's hybrid.

    .venv/bin/python bench/locomo.py ../shared/data/locomo/locomo_dev5.json [--url URL]
        [--experiments] [--synthetic]

Each conversation's observations (LLM-extracted atomic claims with the dialog ids they rest on)
become the active patterns of one chat (kind ``behavior``, confidence 0.5, strength 1,
``first_seen = last_seen`` = the session's date) in a throwaway database (an embedded
PostgreSQL in a temporary directory unless ``--url`` is given), embedded with the local model.
The evidence ids live in a side map here, never in the database. For every question of
categories 1-4 with evidence ids, each arm retrieves the top 5 and top 10 patterns of the
conversation's chat; a question counts when a retrieved pattern's evidence ids intersect the
question's. ``now`` is the conversation's last session date (the chat's present).

* ``vector``: exact cosine order over the chat's vectors (``pattern_embeddings``);
* ``fulltext``: ``to_tsquery('english', memory.query_text.or_tsquery(q))`` ranked by ``ts_rank``;
* ``hybrid``: :func:`memory.retrieval.rank_patterns` (the product path), in its score order.

``--experiments`` also prints fusion/scoring variants computed here from the two arms
(:func:`variant_rankings`), for the report only.
``--synthetic`` runs the same arms on ``bench/data/paraphrases.jsonl`` (queries -> the claim and
its paraphrases among every claim of the set, hard negatives included) before LoCoMo: that set
is the one to study failures on; LoCoMo is measured, not tuned on.

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
os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())

from memory.canonical import canonical_hash
from memory.embedding_store import store_vectors
from memory.embeddings import LocalEmbedder
from memory.query_text import or_tsquery
from memory.ranking import memory_factor, recency
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
                str(sample.get("sample_id", chat_id)), chat_id, tuple(observations),
                tuple(questions), max(dates),
            )
        )  # fmt: skip
    return conversations, dropped


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
            conv.chat_id, obs.content, KIND, CONFIDENCE, canonical_hash(obs.content), obs.at,
        )  # fmt: skip
        ids[int(pid)] = obs
    vectors = await embedder.embed([o.content for o in ids.values()], purpose="bench")
    await store_vectors(
        db, "pattern_embeddings", "pattern_id", list(zip(ids, vectors, strict=True)),
        embedder.model,
    )  # fmt: skip
    return ids


async def vector_arm(
    db: dbmod.Database, model: str, chat_id: int, vector: np.ndarray, limit: int
) -> list[tuple[int, float]]:
    rows = await db.fetch(
        "SELECT pattern_id, 1 - (embedding <=> $3::vector) AS sim FROM pattern_embeddings"
        " WHERE model = $1 AND chat_id = $2 ORDER BY embedding <=> $3::vector LIMIT $4",
        model, chat_id, vector, limit,
    )  # fmt: skip
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
        chat_id, tsquery, limit,
    )  # fmt: skip
    return [(int(r["id"]), float(r["rank"])) for r in rows]


async def hybrid_arm(
    db: dbmod.Database, embedder: LocalEmbedder, chat_id: int, query: str, now: datetime
) -> list[int] | None:
    """The product path: ``memory.retrieval.rank_patterns`` (None until the module exists)."""
    try:
        from memory.retrieval import rank_patterns
    except ImportError:
        return None
    ranked, _degraded = await rank_patterns(db, embedder, chat_id, query, limit=CANDIDATES, now=now)
    return [p.id for p in ranked]


# --- scoring ------------------------------------------------------------------------------------


@attrs.define
class Recall:
    """Hits per arm and k over the questions seen."""

    hits: dict[tuple[str, int], int] = attrs.field(factory=lambda: defaultdict(int))
    questions: int = 0

    def add(self, arm: str, ranking: Sequence[int], evidence: dict[int, Observation],
            gold: frozenset[str]) -> None:  # fmt: skip
        for k in KS:
            if any(evidence[i].evidence & gold for i in ranking[:k]):
                self.hits[(arm, k)] += 1

    def value(self, arm: str, k: int) -> float:
        return self.hits.get((arm, k), 0) / self.questions if self.questions else 0.0


Variant = Callable[["Arms"], list[int]]


@attrs.frozen
class Arms:
    """One question's candidates: both arms (id, value) best first, and each pattern's age."""

    vec: list[tuple[int, float]]
    fts: list[tuple[int, float]]
    days: dict[int, float]


def _weight(arms: Arms, pid: int, with_recency: bool = True) -> float:
    rec = recency(KIND, arms.days[pid]) if with_recency else 1.0
    return rec * memory_factor(1.0) * CONFIDENCE


def _rrf_ids(arms: Arms, k: int = 60, fts_weight: float = 1.0) -> dict[int, float]:
    out: dict[int, float] = defaultdict(float)
    for r, (pid, _) in enumerate(arms.vec, 1):
        out[pid] += 1.0 / (k + r)
    for r, (pid, _) in enumerate(arms.fts, 1):
        out[pid] += fts_weight / (k + r)
    return out


def _best(scores: dict[int, float]) -> list[int]:
    return [pid for pid, _ in sorted(scores.items(), key=lambda kv: (-kv[1], -kv[0]))]


def variant_rankings(min_sim: float) -> dict[str, Variant]:
    """Fusion/scoring variants, from the arms of one question (for the report)."""

    def sims(a: Arms) -> dict[int, float]:
        return dict(a.vec)

    def product(a: Arms, with_recency: bool) -> list[int]:
        fused = _rrf_ids(a)
        top = max(fused.values(), default=1.0)
        s = sims(a)
        return _best({
            pid: s[pid] * (f / top) * _weight(a, pid, with_recency)
            for pid, f in fused.items() if pid in s and s[pid] >= min_sim
        })  # fmt: skip

    def convex(a: Arms, alpha: float, with_recency: bool = False) -> list[int]:
        s = sims(a)
        fmax = max((v for _, v in a.fts), default=0.0) or 1.0
        f = {pid: v / fmax for pid, v in a.fts}
        ids = set(s) | set(f)
        return _best({
            pid: ((1 - alpha) * s.get(pid, 0.0) + alpha * f.get(pid, 0.0))
            * (_weight(a, pid, True) / _weight(a, pid, False) if with_recency else 1.0)
            for pid in ids
        })  # fmt: skip

    return {
        "rrf": lambda a: _best(_rrf_ids(a)),
        "rrf_fts2": lambda a: _best(_rrf_ids(a, fts_weight=2.0)),
        "rrf_k10": lambda a: _best(_rrf_ids(a, k=10)),
        "product": lambda a: product(a, True),
        "product_no_recency": lambda a: product(a, False),
        "rrf_x_recency": lambda a: _best(
            {pid: f * _weight(a, pid) for pid, f in _rrf_ids(a).items()}
        ),
        "convex_0.3": lambda a: convex(a, 0.3),
        "convex_0.5": lambda a: convex(a, 0.5),
        "convex_0.5_recency": lambda a: convex(a, 0.5, True),
    }


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
        for q, vector in zip(conv.questions, vectors, strict=True):
            recall.questions += 1
            vec = await vector_arm(db, embedder.model, conv.chat_id, vector, CANDIDATES)
            fts = await fulltext_arm(db, conv.chat_id, or_tsquery(q.text), CANDIDATES)
            recall.add("vector", [i for i, _ in vec], evidence, q.evidence)
            recall.add("fulltext", [i for i, _ in fts], evidence, q.evidence)
            hybrid = await hybrid_arm(db, embedder, conv.chat_id, q.text, conv.now)
            if hybrid is None:
                have_hybrid = False
            else:
                recall.add("hybrid", hybrid, evidence, q.evidence)
            arms = Arms(vec, fts, days)
            for name, rank in variants.items():
                recall.add(name, rank(arms), evidence, q.evidence)
        print(
            f"  {conv.name}: {len(conv.observations)} patterns, {len(conv.questions)} questions,"
            f" {time.perf_counter() - started:.1f} s",
            flush=True,
        )
    return recall, have_hybrid


def print_table(title: str, recall: Recall, arms: Sequence[str]) -> None:
    print(f"\n{title} ({recall.questions} questions)")
    print(f"{'arm':<22}" + "".join(f"{'@' + str(k):>8}" for k in KS))
    for arm in arms:
        print(f"{arm:<22}" + "".join(f"{recall.value(arm, k):>8.3f}" for k in KS))


async def run(url: str, args: argparse.Namespace) -> None:
    from memory.thresholds import default_thresholds

    embedder = LocalEmbedder()
    min_sim = default_thresholds(embedder.model).min_similarity
    arms = ["hybrid", "vector", "fulltext", *(variant_rankings(min_sim) if args.experiments
                                               else {})]  # fmt: skip
    async with dbmod.asyncio_loop(), dbmod.open_database(url, max_size=4) as db:
        await apply_migrations(db)
        if args.synthetic:
            syn, _ = await evaluate(db, embedder, [load_synthetic()], args.experiments, min_sim)
            print_table("synthetic (bench/data/paraphrases.jsonl)", syn, arms)
        if args.path is None:
            return
        conversations, dropped = load_locomo(args.path)
        print(f"LoCoMo: {len(conversations)} conversations ({dropped} questions without"
              " evidence ids skipped)", flush=True)  # fmt: skip
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
    args = parser.parse_args()
    if args.path is None and not args.synthetic:
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
