"""Pattern retrieval (memory.retrieval.retriever) against the real (embedded) PostgreSQL."""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any

import attrs
import numpy as np
import pytest

from actors.agent.context import patterns_section
from memory.embeddings.store import ensure_vector_index, store_vectors
from memory.embeddings.thresholds import SEED, Thresholds
from memory.errors import EmbeddingError
from memory.retrieval import ranking
from memory.retrieval.ranking import relevance
from memory.retrieval.retriever import (
    DEGRADED_MARK,
    RankedPattern,
    SqlPatternRetriever,
    pattern_line,
    rank_patterns,
)
from memory.retrieval.sql import (
    Lexicon,
    LexiconCache,
    VectorPlanner,
    chat_index_name,
    choose_plan,
    ensure_chat_indexes,
)
from runtime.db import Database

DIMS = 16
MODEL = "test-retrieval-16"
NOW = datetime(2026, 10, 3, 12, 0, tzinfo=UTC)
CHAT, OTHER = 101, 202


def axis(i: int) -> np.ndarray:
    v = np.zeros(DIMS, dtype=np.float32)
    v[i] = 1.0
    return v


def at_cos(c: float, other_axis: int) -> np.ndarray:
    """A unit vector at cosine ``c`` to axis 0 (the queries' direction), leaning to another."""
    return (c * axis(0) + math.sqrt(max(0.0, 1 - c * c)) * axis(other_axis)).astype(np.float32)


def hashed(text: str) -> np.ndarray:
    v = np.zeros(DIMS, dtype=np.float32)
    for word in re.findall(r"[a-z]+", text.lower()):
        v[int(hashlib.sha256(word.encode()).hexdigest(), 16) % DIMS] += 1.0
    n = float(np.linalg.norm(v))
    return v / n if n else axis(1)


@attrs.define
class KeyedEmbedder:
    """Fixed vectors for known texts, a hashing bag of words for the rest."""

    vectors: dict[str, np.ndarray] = attrs.field(factory=dict)
    model: str = MODEL
    dims: int = DIMS
    calls: int = 0

    async def embed(
        self, texts: Sequence[str], *, purpose: str, chat_id: int | None = None
    ) -> list[np.ndarray]:
        self.calls += 1
        return [self.vectors.get(t, hashed(t)) for t in texts]


@attrs.define
class FailingEmbedder:
    model: str = MODEL
    dims: int = DIMS

    async def embed(
        self, texts: Sequence[str], *, purpose: str, chat_id: int | None = None
    ) -> list[np.ndarray]:
        raise EmbeddingError("rate limited", retryable=True)


def query_embedder(**more: np.ndarray) -> KeyedEmbedder:
    return KeyedEmbedder(vectors={"q": axis(0), **more})


async def add_pattern(
    db: Database,
    content: str,
    vector: np.ndarray | None,
    *,
    chat_id: int = CHAT,
    kind: str = "behavior",
    confidence: float = 0.8,
    strength: float = 1.0,
    status: str = "active",
    days_ago: float = 0.0,
    times_seen: int = 1,
    occurs_on: date | None = None,
    core: bool = False,
    temporal: str | None = None,
) -> int:
    seen = NOW - timedelta(days=days_ago)
    pid: int = await db.fetchval(
        "INSERT INTO patterns (chat_id, content, kind, confidence, strength, status, "
        "canonical_hash, first_seen, last_seen, times_seen, occurs_on, is_core_tenet, temporal) "
        "VALUES ($1, $2, $3, $4, $5, $6, md5($2), $7, $7, $8, $9, $10, $11::jsonb) RETURNING id",
        chat_id,
        content,
        kind,
        confidence,
        strength,
        status,
        seen,
        times_seen,
        occurs_on,
        core,
        temporal,
    )
    if vector is not None:
        await store_vectors(db, "pattern_embeddings", "pattern_id", [(pid, vector)], MODEL)
    return pid


async def rank(
    db: Database, query: str, embedder: Any, chat_id: int = CHAT, **kw: Any
) -> tuple[list[RankedPattern], bool]:
    return await rank_patterns(db, embedder, chat_id, query, now=NOW, **kw)


# --- pure -------------------------------------------------------------------------------------


def test_choose_plan() -> None:
    assert choose_plan(0, 100, 60) == ("none", 0)
    assert choose_plan(2_000, 1_000_000, 60) == ("exact", 0)  # small chat: always exact
    assert choose_plan(100_000, 100_000, 60) == ("hnsw", 90)  # the whole index: ef = 60 * 1.5
    assert choose_plan(100_000, 1_000_000, 60) == ("exact", 0)  # ef 900: too dear, no own index
    assert choose_plan(100_000, 1_000_000, 60, chat_index=True) == ("chat_index", 90)
    assert choose_plan(30_000, 100_000, 60) == ("hnsw", 300)
    assert choose_plan(50, 100, 60, exact_max=0, ef_max=10**6) == ("hnsw", 180)
    assert choose_plan(50, 10**6, 60, exact_max=0, ef_max=10**6) == ("exact", 0)  # pgvector cap
    assert len(chat_index_name(-1001234567890123, "x" * 100, 1536)) <= 63


def test_pattern_line() -> None:
    p = RankedPattern(
        id=7,
        content="Sleeps badly  after late caffeine",
        kind="behavior",
        score=0.5,
        similarity=0.8,
        confidence=0.9,
        strength=2.0,
        status="disputed",
        last_seen=datetime(2026, 10, 3, 23, 0, tzinfo=UTC),
        vector=axis(0),
        times_seen=4,
    )
    assert pattern_line(p) == (
        "- [behavior, disputed] Sleeps badly after late caffeine (id 7, seen 4×, last 2026-10-03)"
    )


# --- scoring in SQL ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(ranking.DECAY_BY_KIND))
async def test_sql_score_is_the_typed_decay_formula(db: Database, kind: str) -> None:
    """One candidate per chat, the best keyword match (lexical / max = 1): relevance =
    0.5 × 0.8 + 0.5 = 0.9 and score = ranking.score(relevance, ...), recency at full strength."""
    half = ranking.DECAY_BY_KIND[kind].half_life_days
    for n, halves in enumerate((0, 1, 3, 20)):
        chat = 1000 + n
        # an event's days run from its day (last seen long before), the others' from last seen
        day = (NOW - timedelta(days=halves * half)).date() if kind == "event" else None
        await add_pattern(
            db,
            "User drinks coffee",
            at_cos(0.8, 2),
            chat_id=chat,
            kind=kind,
            confidence=0.7,
            strength=3.0,
            days_ago=halves * half if day is None else 1000,
            occurs_on=day,
        )
        [got], degraded = await rank(db, "coffee q", KeyedEmbedder({"coffee q": axis(0)}), chat)
        assert not degraded
        assert got.similarity == pytest.approx(0.8, abs=1e-5)
        assert got.relevance == pytest.approx(0.9, abs=1e-5)
        boost = ranking.event_boost(int(halves * half)) if day is not None else 1.0
        expected = ranking.score(
            got.relevance, kind, halves * half, 3.0, 0.7, "active", boost=boost
        )
        assert got.score == pytest.approx(expected, rel=1e-4)
        if halves == 20:  # far past: the floor holds it up
            floor = ranking.DECAY_BY_KIND[kind].floor
            assert got.score == pytest.approx(
                0.9 * floor * ranking.memory_factor(3.0) * 0.7, rel=2e-2
            )


async def test_decay_orders_by_kind_and_age_with_floor(db: Database) -> None:
    emb = query_embedder()
    fresh = await add_pattern(db, "fresh emotion", at_cos(0.7, 1), kind="emotion")
    old_habit = await add_pattern(db, "old habit", at_cos(0.7, 2), kind="behavior", days_ago=180)
    old_mood = await add_pattern(db, "old mood", at_cos(0.7, 3), kind="emotion", days_ago=180)
    ranked, _ = await rank(db, "q", emb)
    assert [p.id for p in ranked] == [fresh, old_habit, old_mood]
    # 180 days is ~13 emotion half-lives: the mood sits at its floor, it does not vanish
    mood = ranked[-1]
    assert mood.score > 0
    assert mood.score / ranked[0].score == pytest.approx(
        ranking.recency("emotion", 180) * mood.relevance / ranked[0].relevance, rel=1e-3
    )


async def test_strength_and_confidence_weigh_in(db: Database) -> None:
    emb = query_embedder()
    weak = await add_pattern(db, "weak", at_cos(0.7, 1), strength=0.0, confidence=0.5)
    strong = await add_pattern(db, "strong", at_cos(0.7, 2), strength=20.0, confidence=0.9)
    ranked, _ = await rank(db, "q", emb)
    assert [p.id for p in ranked] == [strong, weak]


async def test_disputed_counts_at_reduced_validity(db: Database) -> None:
    emb = KeyedEmbedder({"melatonin q": axis(0)})
    await add_pattern(db, "Takes melatonin", at_cos(0.9, 1), chat_id=1)
    await add_pattern(db, "Takes melatonin", at_cos(0.9, 1), chat_id=2, status="disputed")
    [active], _ = await rank(db, "melatonin q", emb, 1)
    [disputed], _ = await rank(db, "melatonin q", emb, 2)
    assert disputed.status == "disputed"
    assert disputed.score == pytest.approx(active.score * ranking.DISPUTED_VALIDITY, rel=1e-6)


async def test_superseded_never_returned_nor_above_its_replacement(db: Database) -> None:
    rng = np.random.default_rng(5)
    old_vec = rng.normal(size=DIMS).astype(np.float32)
    old_vec /= np.linalg.norm(old_vec)
    near = old_vec + 0.1 * rng.normal(size=DIMS).astype(np.float32)
    near /= np.linalg.norm(near)
    old = await add_pattern(
        db,
        "User trains push pull legs split",
        old_vec,
        status="superseded",
        strength=15.0,
        confidence=1.0,
        days_ago=1,
    )
    new = await add_pattern(
        db, "User trains a full body split", near, strength=0.0, confidence=0.6, days_ago=40
    )
    for n in range(3):
        await add_pattern(db, f"filler {n} split", rng.normal(size=DIMS).astype(np.float32))
    for status in ("deprecated", "merged"):
        await add_pattern(db, "User trains push pull legs split", old_vec, status=status)
    low = Thresholds(min_similarity=0.0, dedup=0.9, adjudicate=0.8, merge=0.88)
    seen_new = 0
    for i in range(40):
        q = rng.normal(size=DIMS).astype(np.float32)
        if i % 2:  # half the queries aim at the old pattern itself
            q = old_vec + 0.2 * q
        q /= np.linalg.norm(q)
        text = f"how do I train split legs {i}"
        ranked, _ = await rank(db, text, KeyedEmbedder({text: q}), thresholds=low)
        ids = [p.id for p in ranked]
        assert old not in ids
        assert all(p.status in ("active", "disputed") for p in ranked)
        assert (new in ids) == (float(q @ near) >= 0.0)  # the replacement is there on any match
        seen_new += new in ids
    assert seen_new >= 20


async def test_min_similarity_floor(db: Database) -> None:
    emb = query_embedder()
    above = await add_pattern(db, "above", at_cos(SEED.min_similarity + 0.05, 1))
    await add_pattern(db, "below", at_cos(SEED.min_similarity - 0.05, 2))
    ranked, _ = await rank(db, "q", emb, thresholds=SEED)
    assert [p.id for p in ranked] == [above]
    # a keyword hit below the floor is not let in by the full-text arm either, though it is
    # the best (the only) keyword match
    emb = KeyedEmbedder({"melatonin q": axis(0)})
    await add_pattern(db, "Takes melatonin nightly", at_cos(0.1, 3))
    ranked, _ = await rank(db, "melatonin q", emb, thresholds=SEED)
    assert [p.id for p in ranked] == [above]


async def test_keyword_hit_lifts_a_pattern(db: Database) -> None:
    """Hybrid: at equal similarity the pattern the full-text arm also finds ranks first."""
    emb = KeyedEmbedder({"melatonin before bed": axis(0)})
    plain = await add_pattern(db, "Sleeps with the window open", at_cos(0.75, 1))
    keyword = await add_pattern(db, "Takes melatonin nightly", at_cos(0.7, 2))
    ranked, _ = await rank(db, "melatonin before bed", emb)
    assert [p.id for p in ranked] == [keyword, plain]
    assert ranked[0].relevance == pytest.approx(0.5 * 0.7 + 0.5, abs=1e-5)  # best keyword hit
    assert ranked[1].relevance == pytest.approx(0.5 * 0.75, abs=1e-5)  # no keyword: cosine half


def test_relevance_mix() -> None:
    assert relevance(0.8, 2.0, 4.0) == pytest.approx(0.4 + 0.25)
    assert relevance(-0.3, 4.0, 4.0) == pytest.approx(0.5)  # negative cosine counts as 0
    assert relevance(0.6, 0.0, 0.0) == pytest.approx(0.3)  # no keyword match at all
    assert relevance(None, 1.0, 4.0) == pytest.approx(0.25)  # degraded: lexical alone


def test_bm25_prefers_rare_terms_and_short_patterns() -> None:
    lex = Lexicon({"coffe": 50, "melatonin": 1, "daili": 60}, n=100, avglen=4.0)
    rare = lex.bm25(["coffe", "melatonin"], ["take", "melatonin", "daili"], 3)
    common = lex.bm25(["coffe", "melatonin"], ["drink", "coffe", "daili"], 3)
    assert rare > 4 * common > 0
    assert lex.bm25(["melatonin"], ["melatonin"], 1) > rare  # shorter: higher
    assert lex.bm25(["melatonin"], ["coffe"], 1) == 0.0
    assert lex.bm25(["new"], ["new"], 1) == lex.bm25(["melatonin"], ["melatonin"], 1)  # df 1


async def test_bm25_rescoring_lifts_the_rare_keyword(db: Database) -> None:
    """Through the lexicon cache, a match on a rare word outranks one on a common word."""
    emb = KeyedEmbedder({"coffee or melatonin tonight": axis(0)})
    rare = await add_pattern(db, "Takes melatonin daily", at_cos(0.6, 1))
    common = [
        await add_pattern(db, f"Drinks coffee daily {i}", at_cos(0.6, 2 + i)) for i in range(4)
    ]
    cache = LexiconCache()
    ranked, _ = await rank(db, "coffee or melatonin tonight", emb, lexicons=cache)
    assert ranked[0].id == rare and ranked[0].relevance == pytest.approx(0.8, abs=1e-5)
    assert {p.id for p in ranked[1:]} == set(common)
    assert all(p.relevance < 0.6 for p in ranked[1:])
    lexicon = await cache.get(db, CHAT)
    assert lexicon.n == 5 and lexicon.df["coffe"] == 4 and lexicon.df["melatonin"] == 1
    assert await cache.get(db, CHAT) is lexicon  # cached
    retrieved = await SqlPatternRetriever(db, emb).retrieve(CHAT, "coffee or melatonin tonight")
    assert retrieved.pattern_ids[0] == rare


async def test_keyword_only_candidates_are_graded_by_cosine_too(db: Database) -> None:
    """A pattern only the full-text arm finds still gets its cosine (computed in SQL)."""
    emb = KeyedEmbedder({"melatonin before bed": axis(0)})
    near = [
        await add_pattern(db, f"Near miss {i}", at_cos(0.9 - 0.01 * i, 1 + i)) for i in range(3)
    ]  # the vector arm (1 candidate) takes the closest
    kw = await add_pattern(db, "Takes melatonin nightly", at_cos(0.45, 5))
    ranked, _ = await rank(db, "melatonin before bed", emb, limit=1)
    got = {p.id: p for p in ranked}
    assert [p.id for p in ranked] == [kw, near[0]]  # 0.725 against 0.45
    assert got[kw].similarity == pytest.approx(0.45, abs=1e-5)
    assert got[kw].relevance == pytest.approx(0.5 * 0.45 + 0.5, abs=1e-5)


async def test_cross_chat_isolation(db: Database) -> None:
    rng = np.random.default_rng(9)
    mine = {await add_pattern(db, f"coffee habit {i}", at_cos(0.6, 1 + i % 10)) for i in range(5)}
    for i in range(30):  # the other chat's patterns match better, by vector and by words
        await add_pattern(db, f"coffee coffee habit {i}", at_cos(0.95, 1 + i % 10), chat_id=OTHER)
    for i in range(10):
        q = rng.normal(size=DIMS).astype(np.float32) * 0.05 + axis(0)
        q /= np.linalg.norm(q)
        text = f"coffee {i}"
        ranked, _ = await rank(db, text, KeyedEmbedder({text: q}))
        assert {p.id for p in ranked} <= mine and ranked
        memory = await SqlPatternRetriever(db, KeyedEmbedder({text: q})).retrieve(CHAT, text)
        assert set(memory.pattern_ids) <= mine
        assert "coffee coffee" not in memory.text_block
    ranked, _ = await rank(db, "coffee", FailingEmbedder())  # full-text only: same isolation
    assert {p.id for p in ranked} == mine


async def test_unembedded_pattern_is_not_ranked_on_the_hybrid_path(db: Database) -> None:
    emb = KeyedEmbedder({"coffee": axis(0)})
    embedded = await add_pattern(db, "drinks coffee", at_cos(0.9, 1))
    await add_pattern(db, "coffee without a vector yet", None)
    ranked, degraded = await rank(db, "coffee", emb)
    assert [p.id for p in ranked] == [embedded] and not degraded


# --- retrieve: MMR, budget, degraded ----------------------------------------------------------


async def test_retrieve_mmr_prefers_diverse_patterns(db: Database) -> None:
    emb = query_embedder()
    dup_dir = at_cos(0.85, 1)
    dups = [
        await add_pattern(db, f"near duplicate {i}", dup_dir, strength=2.0 - i * 0.1)
        for i in range(3)
    ]
    other = await add_pattern(db, "a different aspect", at_cos(0.8, 2))
    retriever = SqlPatternRetriever(db, emb, thresholds=SEED, limit=2)
    memory = await retriever.retrieve(CHAT, "q")
    ranked, _ = await rank(db, "q", emb)
    assert [p.id for p in ranked][:3] == dups  # by score alone the duplicates come first
    assert memory.pattern_ids == (dups[0], other)
    assert not memory.degraded
    lines = memory.text_block.splitlines()
    assert len(lines) == 2 and lines[0].startswith("- [behavior] near duplicate 0 (id ")


async def test_retrieve_caps_at_the_token_budget(db: Database) -> None:
    emb = query_embedder()
    ids = [
        await add_pattern(
            db, f"pattern {i} " + "x" * 380, at_cos(0.9 - i * 0.02, 1 + i % 15), confidence=0.9
        )
        for i in range(20)
    ]
    memory = await SqlPatternRetriever(db, emb, budget_tokens=2000, lam=1.0).retrieve(CHAT, "q")
    assert ranking.estimate_tokens(memory.text_block) <= 2000
    assert 0 < len(memory.pattern_ids) < 20
    kept = len(memory.pattern_ids)
    assert memory.pattern_ids == tuple(ids[:kept])  # the lowest-scored are the ones dropped
    small = await SqlPatternRetriever(db, emb, budget_tokens=250, lam=1.0).retrieve(CHAT, "q")
    assert small.pattern_ids == tuple(ids[:2])
    default = await SqlPatternRetriever(db, emb, lam=1.0).retrieve(CHAT, "q")  # 2,000 tokens
    assert default.pattern_ids == memory.pattern_ids


async def test_embedding_failure_falls_back_to_full_text(db: Database) -> None:
    sleep = await add_pattern(db, "Sleeps badly after late caffeine", at_cos(0.5, 1), times_seen=4)
    await add_pattern(db, "Enjoys long walks", at_cos(0.9, 2))
    old = await add_pattern(db, "Sleeps well with caffeine", at_cos(0.5, 3), status="superseded")
    ranked, degraded = await rank(db, "why do I sleep so badly?", FailingEmbedder())
    assert degraded
    assert [p.id for p in ranked] == [sleep] and ranked[0].similarity is None
    assert ranked[0].relevance == pytest.approx(1.0)  # lexical / max lexical alone
    assert old not in [p.id for p in ranked]
    memory = await SqlPatternRetriever(db, FailingEmbedder()).retrieve(CHAT, "sleep caffeine")
    assert memory.degraded and memory.pattern_ids == (sleep,)
    assert memory.text_block.splitlines()[0].startswith(DEGRADED_MARK)
    assert "Sleeps badly after late caffeine (id" in memory.text_block
    assert "seen 4×, last 2026-10-03" in memory.text_block
    section = patterns_section(memory)
    assert section.count(DEGRADED_MARK) == 1  # the block's own mark, not repeated


async def test_patterns_without_vectors_of_the_model_are_degraded(db: Database) -> None:
    """The query embeds, but the chat's patterns only have vectors of another model (the
    embedding model changed, ``engram memory reembed`` not run yet): keyword search alone,
    and the prompt says so."""
    sleep = await add_pattern(db, "Sleeps badly after late caffeine", None)
    await store_vectors(db, "pattern_embeddings", "pattern_id", [(sleep, axis(1))], "old-model")
    ranked, degraded = await rank(db, "why do I sleep so badly?", query_embedder())
    assert degraded and [p.id for p in ranked] == [sleep] and ranked[0].similarity is None
    memory = await SqlPatternRetriever(db, query_embedder()).retrieve(CHAT, "sleep caffeine")
    assert memory.degraded and memory.pattern_ids == (sleep,)
    assert memory.text_block.splitlines()[0].startswith(DEGRADED_MARK)


async def test_a_chats_first_pattern_is_found_by_meaning_at_once(db: Database) -> None:
    """The planner caches a chat's vector count, but not a zero: a pattern stored just after a
    turn that found none (a ``remember``) is ranked by meaning in the next turn."""
    emb, planner = query_embedder(), VectorPlanner()
    assert await rank(db, "q", emb, planner=planner) == ([], False)
    first = await add_pattern(db, "Goes jogging each Monday at dawn", at_cos(0.8, 1))
    ranked, degraded = await rank(db, "q", emb, planner=planner)  # no shared word with "q"
    assert [p.id for p in ranked] == [first] and not degraded
    assert ranked[0].similarity == pytest.approx(0.8, abs=1e-5)


async def test_nothing_to_retrieve(db: Database) -> None:
    memory = await SqlPatternRetriever(db, query_embedder()).retrieve(CHAT, "q")
    assert memory.text_block == "" and memory.pattern_ids == () and not memory.degraded
    assert await rank(db, "   ", query_embedder()) == ([], False)


# --- scale: a small chat among many, the HNSW plan ------------------------------------------


async def _bulk(
    db: Database, chat_id: int, vectors: Mapping[int, np.ndarray] | np.ndarray, word: str
) -> None:
    n = len(vectors)
    before = await db.fetchval("SELECT coalesce(max(id), 0) FROM patterns")
    await db.copy_records(
        "patterns",
        [
            (chat_id, f"{word} {i}", "behavior", 0.8, 1.0, f"h{chat_id}-{i}", NOW, NOW)
            for i in range(n)
        ],
        [
            "chat_id",
            "content",
            "kind",
            "confidence",
            "strength",
            "canonical_hash",
            "first_seen",
            "last_seen",
        ],
    )
    ids = [
        r["id"]
        for r in await db.fetch(
            "SELECT id FROM patterns WHERE chat_id = $1 AND id > $2 ORDER BY id", chat_id, before
        )
    ]
    await db.copy_records(
        "pattern_embeddings",
        [
            (pid, MODEL, chat_id, DIMS, np.asarray(vectors[i], dtype=np.float32))
            for i, pid in enumerate(ids)
        ],
        ["pattern_id", "model", "chat_id", "dims", "embedding"],
    )


@pytest.mark.slow
async def test_small_chat_among_many_still_finds_its_matches(db: Database) -> None:
    rng = np.random.default_rng(1)
    crowd = rng.normal(size=(20_000, DIMS)).astype(np.float32)
    crowd[:, 0] = np.abs(crowd[:, 0]) * 3  # the crowd sits near the query direction too
    crowd /= np.linalg.norm(crowd, axis=1, keepdims=True)
    for c in range(4):
        await _bulk(db, 5000 + c, crowd[c * 5000 : (c + 1) * 5000], "crowd")
    await ensure_vector_index(db, "pattern_embeddings", MODEL, DIMS)
    await db.execute("ANALYZE pattern_embeddings")
    mine = [
        await add_pattern(db, f"tiny chat {i}", at_cos(0.6 - 0.05 * i, 1 + i)) for i in range(3)
    ]
    planner = VectorPlanner()
    ranked, _ = await rank(db, "q", query_embedder(), planner=planner)
    assert [p.id for p in ranked] == mine
    assert planner.plans == {"exact": 1}
    # 300 patterns (the 3 plus 297 pointing away): a planner pushed to the shared graph walk
    # gets nothing of this chat back from it and falls back to the exact scan
    away = -np.abs(rng.normal(size=(297, DIMS))).astype(np.float32)
    away /= np.linalg.norm(away, axis=1, keepdims=True)
    await _bulk(db, CHAT, away, "away")
    await db.execute("ANALYZE pattern_embeddings")
    planner = VectorPlanner(exact_max=0, ef_max=1000)
    ranked, _ = await rank(db, "q", query_embedder(), planner=planner, limit=5)
    assert [p.id for p in ranked] == mine
    assert planner.plans == {"exact": 1}


@pytest.mark.slow
async def test_hnsw_and_chat_index_plans_keep_recall(db: Database) -> None:
    rng = np.random.default_rng(2)
    vecs = rng.normal(size=(3000, DIMS)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    await _bulk(db, CHAT, vecs, "bulk")
    await _bulk(db, OTHER, vecs[:1000], "other")
    await ensure_vector_index(db, "pattern_embeddings", MODEL, DIMS)
    await db.execute("ANALYZE pattern_embeddings")
    # CHAT holds 75% of the index: shared walk (ef 40); OTHER 25%: ef 120 > 50, own index
    made = await ensure_chat_indexes(
        db, MODEL, DIMS, candidates=20, exact_max=500, ef_max=50, concurrently=True
    )
    assert made == [OTHER]
    assert await ensure_chat_indexes(db, MODEL, DIMS, candidates=20, exact_max=500, ef_max=50) == []
    low = Thresholds(min_similarity=0.0, dedup=0.9, adjudicate=0.8, merge=0.88)
    for chat, plan in ((CHAT, "hnsw"), (OTHER, "chat_index")):
        planner = VectorPlanner(exact_max=500, ef_max=50)
        exact_planner = VectorPlanner(exact_max=10**9)
        overlap = []
        for i in range(10):
            q = rng.normal(size=DIMS).astype(np.float32)
            text = f"query {i}"
            emb = KeyedEmbedder({text: q / np.linalg.norm(q)})
            approx, _ = await rank(db, text, emb, chat, thresholds=low, planner=planner, limit=20)
            exact, _ = await rank(
                db, text, emb, chat, thresholds=low, planner=exact_planner, limit=20
            )
            overlap.append(len({p.id for p in approx} & {p.id for p in exact}) / len(exact))
            chats = await db.fetch(
                "SELECT DISTINCT chat_id FROM patterns WHERE id = ANY($1::bigint[])",
                [p.id for p in approx],
            )
            assert [r["chat_id"] for r in chats] == [chat]
        assert planner.plans == {plan: 10} and exact_planner.plans == {"exact": 10}
        assert float(np.mean(overlap)) >= 0.9  # HNSW recall on a 16-d toy set
    # ef_search is raised for the statement itself (the default 40 would come back short and
    # fall back to the exact scan), and not left behind on the pooled connection
    planner = VectorPlanner(exact_max=500, ef_max=400)
    ranked, _ = await rank(
        db,
        "query 0",
        KeyedEmbedder({"query 0": axis(0)}),
        CHAT,
        thresholds=low,
        planner=planner,
        limit=150,
    )
    assert planner.plans == {"hnsw": 1}
    assert sum(p.similarity is not None for p in ranked) >= 150
    assert await db.fetchval("SHOW hnsw.ef_search") == "40"
