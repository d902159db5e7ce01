"""Pattern retrieval latency: SqlPatternRetriever.retrieve (SQL + MMR + budget), p50/p95.

Scenarios, each in its own new database (schema by the migrations, data by COPY, indexes built
after the load, then VACUUM ANALYZE and CHECKPOINT):

* ``10k``:  one chat holding 10,000 patterns;
* ``100k``: one chat holding 100,000 patterns;
* ``1m``:   1,000,000 patterns across ``--chats-1m`` chats (100 x 10,000 by default); queries go
  to random chats. Only with ``--million``: the build (COPY, the model's HNSW index over 1M
  vectors, then each chat's own index, as the maintenance job makes them) takes about half an
  hour on a 2-core VM; without it the last line says ``p95_ms_1m=skipped``.

Data: synthetic but shaped like real memory. There are 1,000 topics; a topic is a random unit
centre in 256-d plus 12 topic words. A pattern picks a topic, its vector is the centre plus
noise (cosine ~0.7 to the centre), its text is 5 of the topic's words and 3 of 2,000 common
words; kind, confidence (0.3..1), strength (0..10), times seen and last seen (up to two years
back) are random; 95% active, 3% disputed, 2% superseded. A query is a topic centre plus noise
(cosine ~0.5 to that topic's patterns, so about half pass the 0.4 floor) and a text of 3 topic
words and 2 common words. The query vectors are computed up front and served by the embedder
double (the model's own time is not part of "retrieval"; ``--wordllama`` prints what the local
model takes to embed a query, for reference).

Measured per query: the whole ``retrieve`` call — planner (cached chat size), the one SQL
statement (both arms, similarity and typed weight; ``hnsw.ef_search`` set within it on the
graph-walk plans), the relevance mix (cosine + BM25 over cached per-chat statistics), MMR
(λ 0.7) and the 2,000-token budget. Every chat is queried once before measuring (warm cache,
chat sizes cached as they are in service).

    python bench/retrieval.py [--url postgresql://...] [--queries 300] [--million] [--explain]
                               [--smoke]

``--url`` must allow CREATE DATABASE (each scenario gets a new database, dropped after); without
it a throwaway embedded PostgreSQL (pgserver) runs in a temp dir. Last line:
``retrieval p95_ms_10k=<a> p95_ms_100k=<b> p95_ms_1m=<c>``.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _db import build_indexes, checkpoint, drop_secondary_indexes, run_on_database
from _smoke import add_smoke_flag, shrink

from memory.embeddings.thresholds import SEED
from memory.retrieval.retriever import SqlPatternRetriever
from memory.retrieval.sql import VectorPlanner, ensure_chat_indexes
from runtime import db as dbmod
from runtime.logs import configure_logging
from runtime.migrate import apply_migrations

DIMS = 256
MODEL = "wordllama-l2-supercat-256"  # the local model's name, so its index and thresholds apply
TOPICS = 1000
TOPIC_WORDS = 12
COMMON_WORDS = 2000
KINDS = ("behavior", "belief", "goal", "preference", "emotion", "temporal", "causal")
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
CHUNK = 50_000
PATTERN_COLUMNS = (
    "chat_id",
    "content",
    "kind",
    "confidence",
    "strength",
    "times_seen",
    "status",
    "canonical_hash",
    "first_seen",
    "last_seen",
)


def now() -> float:
    return time.perf_counter()


# --- data ---------------------------------------------------------------------------------


def _words(rng: np.random.Generator, n: int, taken: set[str]) -> list[str]:
    consonants, vowels = "bcdfghklmnprstvz", "aeiou"
    out: list[str] = []
    while len(out) < n:
        syllables = int(rng.integers(2, 4))
        w = "".join(
            consonants[int(rng.integers(len(consonants)))] + vowels[int(rng.integers(5))]
            for _ in range(syllables)
        )
        if w not in taken:
            taken.add(w)
            out.append(w)
    return out


@attrs.define
class World:
    """Topic centres and vocabularies shared by every scenario."""

    centres: np.ndarray
    topic_words: list[list[str]]
    common: list[str]

    @classmethod
    def make(cls, seed: int) -> World:
        rng = np.random.default_rng(seed)
        centres = rng.normal(size=(TOPICS, DIMS)).astype(np.float32)
        centres /= np.linalg.norm(centres, axis=1, keepdims=True)
        taken: set[str] = set()
        topic_words = [_words(rng, TOPIC_WORDS, taken) for _ in range(TOPICS)]
        return cls(centres, topic_words, _words(rng, COMMON_WORDS, taken))

    def noisy(self, rng: np.random.Generator, topics: np.ndarray, spread: float) -> np.ndarray:
        noise = rng.normal(size=(len(topics), DIMS)).astype(np.float32) * (spread / DIMS**0.5)
        v = self.centres[topics] + noise
        unit: np.ndarray = v / np.linalg.norm(v, axis=1, keepdims=True)
        return unit

    def text(self, rng: np.random.Generator, topic: int, topical: int, common: int) -> str:
        words = list(rng.choice(self.topic_words[topic], topical, replace=False))
        words += [self.common[int(i)] for i in rng.integers(0, COMMON_WORDS, common)]
        return " ".join(words)

    def chunks(
        self, chat_id: int, size: int, rng: np.random.Generator
    ) -> Iterator[tuple[list[tuple[Any, ...]], np.ndarray]]:
        """Pattern rows and their vectors, ``CHUNK`` at a time."""
        for start in range(0, size, CHUNK):
            n = min(CHUNK, size - start)
            topics = rng.integers(0, TOPICS, n)
            vectors = self.noisy(rng, topics, 1.0)
            status = rng.choice(["active", "disputed", "superseded"], n, p=[0.95, 0.03, 0.02])
            ages = rng.uniform(0, 730, n)
            rows = []
            for i in range(n):
                last = NOW - timedelta(days=float(ages[i]))
                rows.append(
                    (
                        chat_id,
                        "User " + self.text(rng, int(topics[i]), 5, 3),
                        KINDS[int(rng.integers(len(KINDS)))],
                        float(rng.uniform(0.3, 1.0)),
                        float(rng.uniform(0, 10)),
                        int(rng.integers(1, 11)),
                        str(status[i]),
                        f"{chat_id}-{start + i}",
                        last - timedelta(days=30),
                        last,
                    )
                )
            yield rows, vectors

    def queries(self, rng: np.random.Generator, n: int) -> list[tuple[str, np.ndarray]]:
        topics = rng.integers(0, TOPICS, n)
        vectors = self.noisy(rng, topics, 1.0)
        texts = [
            f"q{i} " + self.text(rng, int(t), 3, 2) for i, t in enumerate(topics)
        ]  # q{i}: unique keys
        return list(zip(texts, vectors, strict=True))


@attrs.define
class QueryVectors:
    """The embedder double: the precomputed vector of each benchmark query."""

    vectors: dict[str, np.ndarray]
    model: str = MODEL
    dims: int = DIMS

    async def embed(
        self, texts: Sequence[str], *, purpose: str, chat_id: int | None = None
    ) -> list[np.ndarray]:
        return [self.vectors[t] for t in texts]


# --- building -----------------------------------------------------------------------------


async def build(
    db: dbmod.Database, world: World, layout: Sequence[tuple[int, int]], seed: int
) -> dict[str, float]:
    """COPY the patterns of ``layout`` [(chat_id, size)] and their vectors; index afterwards."""
    took: dict[str, float] = {}
    secondary = await drop_secondary_indexes(db, ("patterns", "pattern_embeddings"))
    rng = np.random.default_rng(seed)
    start, next_id, total = now(), 1, sum(size for _, size in layout)
    for chat_id, size in layout:
        for rows, vectors in world.chunks(chat_id, size, rng):
            await db.copy_records("patterns", rows, PATTERN_COLUMNS)
            ids = range(next_id, next_id + len(rows))
            next_id += len(rows)
            await db.copy_records(
                "pattern_embeddings",
                [(pid, MODEL, chat_id, DIMS, v) for pid, v in zip(ids, vectors, strict=True)],
                ("pattern_id", "model", "chat_id", "dims", "embedding"),
            )
            if total >= 200_000 and (next_id - 1) % 200_000 == 0:
                print(f"  loaded {next_id - 1:,}/{total:,}", flush=True)
    if await db.fetchval("SELECT max(id) FROM patterns") != total:
        raise RuntimeError("pattern ids are not the 1..n the vectors were loaded with")
    took["copy"] = now() - start
    async with db.connection() as conn:
        took["btree/gin indexes"], took["HNSW index"] = await build_indexes(
            conn,
            db.url,
            secondary,
            work_mem="2GB",
            vectors="pattern_embeddings",
            model=MODEL,
            dims=DIMS,
        )
        start = now()  # what the maintenance job does for mid-size chats of a shared index
        own = await ensure_chat_indexes(conn, MODEL, DIMS, concurrently=False)
        if own:
            took[f"{len(own)} chat HNSW indexes"] = now() - start
    start = now()
    await db.execute("VACUUM ANALYZE patterns")
    await db.execute("VACUUM ANALYZE pattern_embeddings")
    await checkpoint(db)
    took["vacuum analyze + checkpoint"] = now() - start
    return took


# --- measuring ----------------------------------------------------------------------------


def pct(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def measure(
    db: dbmod.Database, world: World, chats: Sequence[int], n: int, seed: int, explain: bool
) -> dict[str, Any]:
    rng = np.random.default_rng(seed + 1)
    queries = world.queries(rng, n + len(chats))
    embedder = QueryVectors({t: v for t, v in queries})
    planner = VectorPlanner()
    retriever = SqlPatternRetriever(db, embedder, thresholds=SEED, planner=planner)
    for chat, (text, _) in zip(chats, queries, strict=False):  # warm: every chat once
        await retriever.retrieve(chat, text)
    planner.plans.clear()
    samples, injected, tokens = [], [], []
    for text, _ in queries[len(chats) :]:
        chat = chats[int(rng.integers(len(chats)))]
        start = now()
        memory = await retriever.retrieve(chat, text)
        samples.append((now() - start) * 1000)
        injected.append(len(memory.pattern_ids))
        tokens.append(len(memory.text_block) / 4)
    out: dict[str, Any] = {
        "p50": statistics.median(samples),
        "p95": pct(samples, 0.95),
        "max": max(samples),
        "plans": dict(planner.plans),
        "patterns": statistics.mean(injected),
        "tokens": statistics.mean(tokens),
    }
    if explain:
        out["explain"] = await explain_one(db, retriever, chats[0], queries[-1][0])
    return out


async def explain_one(db: dbmod.Database, r: SqlPatternRetriever, chat: int, text: str) -> str:
    """EXPLAIN ANALYZE of the statement ``retrieve`` runs for one query."""
    from memory.retrieval import retriever as retrieval

    captured: list[tuple[str, list[Any], int]] = []
    real = retrieval.fetch_candidates

    async def spy(dbx: Any, sql: str, args: Sequence[Any], ef: int) -> Sequence[Any]:
        captured.append((sql, list(args), ef))
        return await real(dbx, sql, args, ef)

    retrieval.fetch_candidates = spy  # type: ignore[assignment]
    try:
        await r.retrieve(chat, text)
    finally:
        retrieval.fetch_candidates = real  # type: ignore[assignment]
    sql, args, ef = captured[-1]
    extra = [str(ef)] if ef else []
    rows = await db.fetch("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql, *args, *extra)
    return "\n".join(str(r["QUERY PLAN"]) for r in rows)


# --- scenarios ----------------------------------------------------------------------------


def with_database(url: str, name: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


async def scenario(
    url: str, name: str, world: World, layout: list[tuple[int, int]], args: argparse.Namespace
) -> dict[str, Any]:
    dbname = f"bench_retrieval_{name}_{secrets.token_hex(3)}"
    async with dbmod.open_database(url, max_size=2) as admin:
        await admin.execute(f'CREATE DATABASE "{dbname}"')
    try:
        async with dbmod.open_database(with_database(url, dbname), max_size=4) as db:
            await apply_migrations(db)
            total = sum(s for _, s in layout)
            print(f"{name}: building {total:,} patterns in {len(layout)} chat(s)", flush=True)
            took = await build(db, world, layout, args.seed)
            print("  build: " + ", ".join(f"{k} {v:.1f} s" for k, v in took.items()), flush=True)
            result = await measure(
                db, world, [c for c, _ in layout], args.queries, args.seed, args.explain
            )
    finally:
        async with dbmod.open_database(url, max_size=2) as admin:
            await admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
    print(
        f"  retrieve: p50 {result['p50']:.2f} ms  p95 {result['p95']:.2f} ms  max "
        f"{result['max']:.2f} ms  plans {result['plans']}  injected {result['patterns']:.1f} "
        f"patterns (~{result['tokens']:.0f} tokens)",
        flush=True,
    )
    if "explain" in result:
        print("  " + result["explain"].replace("\n", "\n  "))
    return result


async def wordllama_ms(n: int = 50) -> float | None:
    try:
        from memory.embeddings.providers import LocalEmbedder

        emb = LocalEmbedder()
        await emb.load()
    except Exception as exc:  # the local model is optional here
        print(f"(wordllama unavailable: {exc})")
        return None
    samples = []
    for i in range(n):
        start = now()
        await emb.embed([f"why do I sleep so badly after coffee {i}"], purpose="embedding")
        samples.append((now() - start) * 1000)
    return statistics.median(samples)


async def run_all(url: str, args: argparse.Namespace) -> None:
    world = World.make(args.seed)
    p95: dict[str, str] = {}
    # --smoke: the scenarios keep their names, with 500 and 1,000 patterns
    small, large = (500, 1_000) if args.smoke else (10_000, 100_000)
    layouts = {"10k": [(1, small)], "100k": [(1, large)]}
    if args.million:
        per = 1_000_000 // args.chats_1m
        layouts["1m"] = [(1000 + c, per) for c in range(args.chats_1m)]
    for name in ("10k", "100k", "1m"):
        if name in layouts and (not args.only or name in args.only.split(",")):
            p95[name] = f"{(await scenario(url, name, world, layouts[name], args))['p95']:.2f}"
        else:
            p95[name] = "skipped"
    if args.wordllama:
        ms = await wordllama_ms()
        if ms is not None:
            print(f"(for reference: wordllama embeds one query in {ms:.2f} ms, p50)")
    print(f"retrieval p95_ms_10k={p95['10k']} p95_ms_100k={p95['100k']} p95_ms_1m={p95['1m']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="", help="PostgreSQL URL (default: embedded server)")
    parser.add_argument("--queries", type=int, default=300, help="measured queries per scenario")
    parser.add_argument(
        "--million",
        action="store_true",
        help="also run the 1,000,000-pattern scenario (its build takes ~30 min on 2 cores)",
    )
    parser.add_argument("--chats-1m", type=int, default=100, help="chats of the 1M scenario")
    parser.add_argument("--explain", action="store_true", help="EXPLAIN ANALYZE one query")
    parser.add_argument("--wordllama", action="store_true", help="time the local model too")
    parser.add_argument("--only", default="", help="scenarios to run, e.g. 10k,100k")
    parser.add_argument("--seed", type=int, default=11)
    add_smoke_flag(parser)
    args = parser.parse_args()
    shrink(parser, args, queries=20)
    if args.smoke and args.million:
        parser.error("--smoke runs the 10k and 100k scenarios only (tiny)")
    if not 10 <= args.queries <= 100_000 or not 1 <= args.chats_1m <= 10_000:
        parser.error("--queries 10..100000, --chats-1m 1..10000")
    configure_logging("WARNING", "json", [], stream=open("/dev/null", "w"))  # noqa: SIM115

    async def go(url: str) -> None:
        await run_all(url, args)

    run_on_database(args.url, "engram-bench-retrieval-", go)


if __name__ == "__main__":
    main()
