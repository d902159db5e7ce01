"""Embeddings: the local wordllama model (really loaded), vector storage and HNSW indexes on the
real PostgreSQL, the backfill job with a flaky in-memory embedder, and OpenAI through the fake."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import pytest
import trio
import trio.lowlevel

from memory.embeddings import store as embedding_store
from memory.embeddings.providers import (
    EMPTY_TEXT,
    LOCAL_DIMS,
    OPENAI_DIMS,
    OPENAI_MODEL,
    LocalEmbedder,
    OpenAIEmbedder,
    clip_text,
    estimate_tokens,
    make_embedder,
    request_batches,
    unit,
)
from memory.embeddings.store import (
    EmbeddingBackfill,
    backfill_once,
    ensure_vector_index,
    index_name,
    missing_owner_ids,
    store_vectors,
)
from memory.errors import EmbeddingError
from runtime.db import Database
from runtime.errors import SettingsError

LOCAL_MODEL = "wordllama-l2-supercat-256"


class HashEmbedder:
    """Deterministic in-memory embedder; fails the next ``fail`` calls, or on ``poison`` texts."""

    def __init__(
        self, dims: int = 8, *, fail: int = 0, retryable: bool = True, poison: str = ""
    ) -> None:
        self.model, self.dims = f"hash-{dims}", dims
        self.fail, self.retryable, self.poison = fail, retryable, poison
        self.calls: list[list[str]] = []

    async def embed(
        self, texts: Sequence[str], *, purpose: str, chat_id: int | None = None
    ) -> list[np.ndarray]:
        self.calls.append(list(texts))
        await trio.lowlevel.checkpoint()
        if self.fail:
            self.fail -= 1
            raise EmbeddingError("provider down", retryable=self.retryable)
        if self.poison and any(self.poison in t for t in texts):
            raise EmbeddingError("input rejected", retryable=False)
        out = []
        for t in texts:
            seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little")
            out.append(unit(np.random.default_rng(seed).normal(size=self.dims), self.dims))
        return out


def as_array(value: object) -> np.ndarray:
    """A vector read back from the database (pgvector returns ``Vector`` objects)."""
    to_numpy = getattr(value, "to_numpy", None)
    return np.asarray(to_numpy() if to_numpy else value, dtype=np.float32)


async def add_entries(db: Database, texts: Sequence[str]) -> list[int]:
    ids = []
    for i, text in enumerate(texts):
        ids.append(
            await db.fetchval(
                "INSERT INTO entries (uuid, created_at, text) VALUES ($1, now(), $2) RETURNING id",
                f"U{i:04d}-{hashlib.md5(text.encode()).hexdigest()[:8]}",
                text,
            )
        )
    return ids


async def add_pattern(db: Database, chat_id: int, content: str) -> int:
    return int(
        await db.fetchval(
            "INSERT INTO patterns (chat_id, content, canonical_hash, first_seen, last_seen) "
            "VALUES ($1, $2, md5($2), now(), now()) RETURNING id",
            chat_id,
            content,
        )
    )


async def hnsw_indexes(db: Database, table: str, model: str) -> list[str]:
    rows = await db.fetch(
        "SELECT indexname FROM pg_indexes WHERE tablename = $1 AND indexdef LIKE '%hnsw%' "
        "AND indexdef LIKE $2",
        table,
        f"%'{model}'::text%",
    )
    return [r["indexname"] for r in rows]


# --- pure helpers ------------------------------------------------------------------------------


def test_clip_and_batches() -> None:
    assert clip_text("   ", 10) == EMPTY_TEXT
    assert clip_text(" hi ", 10) == "hi"
    long = "word " * 10_000
    clipped = clip_text(long, 1000)
    assert estimate_tokens(clipped) <= 1000 < estimate_tokens(clipped + "word ")
    assert estimate_tokens("日本語") >= 3  # non-ASCII is counted cautiously
    batches = list(request_batches(["a" * 30] * 7, max_inputs=3, max_tokens=1000))
    assert [len(b) for b in batches] == [3, 3, 1]
    batches = list(request_batches(["a" * 300] * 5, max_inputs=100, max_tokens=250))
    assert [len(b) for b in batches] == [2, 2, 1]
    with pytest.raises(EmbeddingError):
        unit(np.zeros(4), 4)
    with pytest.raises(EmbeddingError):
        unit(np.ones(3), 4)


def test_factory_picks_the_provider() -> None:
    assert isinstance(make_embedder("auto", "", None), LocalEmbedder)
    assert isinstance(make_embedder("local", "sk-whatever", None), LocalEmbedder)
    openai_embedder = make_embedder("auto", "sk-test-123456", "http://127.0.0.1:9/v1")
    assert isinstance(openai_embedder, OpenAIEmbedder)
    assert (openai_embedder.model, openai_embedder.dims) == (OPENAI_MODEL, OPENAI_DIMS)
    with pytest.raises(SettingsError, match="OPENAI_API_KEY"):
        make_embedder("openai", "", None)
    with pytest.raises(SettingsError):
        make_embedder("cohere", "", None)


# --- the local model ---------------------------------------------------------------------------


async def test_local_vectors_are_unit_float32_with_the_right_dims() -> None:
    embedder = LocalEmbedder()
    assert (embedder.model, embedder.dims) == (LOCAL_MODEL, LOCAL_DIMS)
    texts = ["A short one.", "", "   ", "A somewhat longer sentence about the weather in Lisbon."]
    vectors = await embedder.embed(texts, purpose="embedding")
    assert len(vectors) == 4
    for v in vectors:
        assert v.dtype == np.float32 and v.shape == (LOCAL_DIMS,)
        assert float(np.linalg.norm(v)) == pytest.approx(1.0, abs=1e-5)
    np.testing.assert_allclose(vectors[1], vectors[2])  # blank texts share the placeholder
    # order is kept although texts are embedded sorted by length
    single = await embedder.embed([texts[3]], purpose="embedding")
    np.testing.assert_allclose(single[0], vectors[3], atol=1e-6)
    assert await embedder.embed([], purpose="embedding") == []


async def test_local_similar_sentences_are_closer_than_unrelated_ones() -> None:
    embedder = LocalEmbedder()
    run, jog, tax, invoice = await embedder.embed(
        [
            "I love running in the park every morning",
            "Jogging outdoors at dawn makes me happy",
            "The quarterly tax return is due to the accountant",
            "Please pay the attached invoice by the end of the month",
        ],
        purpose="embedding",
    )
    assert float(run @ jog) > float(run @ tax) + 0.1
    assert float(run @ jog) > float(jog @ invoice) + 0.1
    assert float(tax @ invoice) > float(tax @ jog)


async def test_truncated_local_model() -> None:
    embedder = LocalEmbedder(dims=64)
    [v] = await embedder.embed(["hello world"], purpose="embedding")
    assert embedder.model == "wordllama-l2-supercat-64" and v.shape == (64,)
    assert float(np.linalg.norm(v)) == pytest.approx(1.0, abs=1e-5)


# --- indexes and storage -----------------------------------------------------------------------


async def test_ensure_vector_index_creates_one_partial_hnsw_index(db: Database) -> None:
    assert await ensure_vector_index(db, "entry_embeddings", LOCAL_MODEL, 256) is True
    embedding_store._ensured.clear()  # force the SQL path again: still idempotent
    assert await ensure_vector_index(db, "entry_embeddings", LOCAL_MODEL, 256) is False
    assert await ensure_vector_index(db, "entry_embeddings", LOCAL_MODEL, 256) is False
    [name] = await hnsw_indexes(db, "entry_embeddings", LOCAL_MODEL)
    assert name == index_name("entry_embeddings", LOCAL_MODEL, 256)
    definition = await db.fetchval("SELECT indexdef FROM pg_indexes WHERE indexname = $1", name)
    assert "vector(256)" in definition and "vector_cosine_ops" in definition
    assert f"WHERE (model = '{LOCAL_MODEL}'::text)" in definition
    # the migration's index for text-embedding-3-small counts: no second one
    assert await ensure_vector_index(db, "entry_embeddings", OPENAI_MODEL, 1536) is False
    assert len(await hnsw_indexes(db, "entry_embeddings", OPENAI_MODEL)) == 1
    # other tables get their own
    assert await ensure_vector_index(db, "episode_embeddings", LOCAL_MODEL, 256) is True
    # LIKE wildcards in model names are escaped when looking for an existing index
    assert await ensure_vector_index(db, "alias_embeddings", "my_model", 8) is True
    embedding_store._ensured.clear()
    assert await ensure_vector_index(db, "alias_embeddings", "myXmodel", 8) is True
    assert await ensure_vector_index(db, "alias_embeddings", "my_model", 8) is False
    with pytest.raises(ValueError):
        await ensure_vector_index(db, "entries; DROP TABLE entries", LOCAL_MODEL, 256)
    with pytest.raises(ValueError):
        await ensure_vector_index(db, "entry_embeddings", "x' OR '1'='1", 256)


async def test_the_planner_uses_the_model_index(db: Database) -> None:
    embedder = LocalEmbedder()
    texts = [f"entry number {i} about running and coffee" for i in range(40)]
    ids = await add_entries(db, texts)
    vectors = await embedder.embed(texts, purpose="embedding")
    await store_vectors(
        db, "entry_embeddings", "entry_id", list(zip(ids, vectors, strict=True)), LOCAL_MODEL
    )
    async with db.transaction() as conn:
        await conn.execute("SET LOCAL enable_seqscan = off")
        plan = await conn.fetch(
            "EXPLAIN SELECT entry_id FROM entry_embeddings WHERE model = $1 "
            "ORDER BY embedding::vector(256) <=> $2::vector(256) LIMIT 5",
            LOCAL_MODEL,
            vectors[0],
        )
    text = "\n".join(r["QUERY PLAN"] for r in plan)
    assert index_name("entry_embeddings", LOCAL_MODEL, 256) in text


async def test_store_and_missing_owner_ids(db: Database) -> None:
    ids = await add_entries(db, ["one", "two", "three", "four"])
    embedder = HashEmbedder()
    assert await missing_owner_ids(db, "entry_embeddings", "entries", embedder.model, 10) == ids
    vectors = await embedder.embed(["one", "three"], purpose="embedding")
    stored = await store_vectors(
        db,
        "entry_embeddings",
        "entry_id",
        [(ids[0], vectors[0]), (ids[2], vectors[1])],
        embedder.model,
    )
    assert stored == 2
    assert await missing_owner_ids(db, "entry_embeddings", "entries", embedder.model, 10) == [
        ids[1],
        ids[3],
    ]
    assert await missing_owner_ids(db, "entry_embeddings", "entries", embedder.model, 1) == [ids[1]]
    assert await missing_owner_ids(
        db, "entry_embeddings", "entries", embedder.model, 10, after_id=ids[1]
    ) == [ids[3]]
    # another model sees everything as missing
    assert await missing_owner_ids(db, "entry_embeddings", "entries", "other-model", 10) == ids
    row = await db.fetchrow(
        "SELECT dims, embedding FROM entry_embeddings WHERE entry_id = $1", ids[0]
    )
    assert row is not None and row["dims"] == 8
    np.testing.assert_allclose(as_array(row["embedding"]), vectors[0], atol=1e-6)
    # upsert: storing again replaces the vector
    await store_vectors(db, "entry_embeddings", "entry_id", [(ids[0], vectors[1])], embedder.model)
    again = await db.fetchval("SELECT embedding FROM entry_embeddings WHERE entry_id=$1", ids[0])
    np.testing.assert_allclose(as_array(again), vectors[1], atol=1e-6)
    assert await db.fetchval("SELECT count(*) FROM entry_embeddings") == 2
    # a deleted owner is skipped, not an error
    await db.execute("DELETE FROM entries WHERE id = $1", ids[3])
    assert (
        await store_vectors(
            db, "entry_embeddings", "entry_id", [(ids[3], vectors[0])], embedder.model
        )
        == 1
    )
    assert await db.fetchval("SELECT count(*) FROM entry_embeddings") == 2
    with pytest.raises(ValueError):
        await store_vectors(db, "entry_embeddings", "pattern_id", [], embedder.model)
    with pytest.raises(ValueError):
        await missing_owner_ids(db, "entry_embeddings", "patterns", embedder.model, 10)


async def test_chat_scoped_tables_take_the_owner_chat(db: Database) -> None:
    first, second = await add_pattern(db, 11, "likes tea"), await add_pattern(db, 22, "runs")
    embedder = HashEmbedder()
    v1, v2 = await embedder.embed(["likes tea", "runs"], purpose="embedding")
    await store_vectors(
        db, "pattern_embeddings", "pattern_id", [(first, v1), (second, v2, 22)], embedder.model
    )
    rows = await db.fetch("SELECT pattern_id, chat_id FROM pattern_embeddings ORDER BY 1")
    assert [(r["pattern_id"], r["chat_id"]) for r in rows] == [(first, 11), (second, 22)]


# --- backfill ----------------------------------------------------------------------------------


async def test_backfill_once_embeds_everything_missing(db: Database) -> None:
    ids = await add_entries(db, [f"entry {i}" for i in range(7)])
    pattern = await add_pattern(db, 5, "walks the dog")
    embedder = HashEmbedder()
    await store_vectors(
        db,
        "entry_embeddings",
        "entry_id",
        [(ids[0], (await embedder.embed(["entry 0"], purpose="embedding"))[0])],
        embedder.model,
    )
    embedder.calls.clear()
    assert await backfill_once(db, embedder, batch=3) == 7
    assert [len(c) for c in embedder.calls] == [3, 3, 1]  # 6 entries, then the pattern
    assert await missing_owner_ids(db, "entry_embeddings", "entries", embedder.model, 99) == []
    chat = await db.fetchval("SELECT chat_id FROM pattern_embeddings WHERE pattern_id=$1", pattern)
    assert chat == 5
    assert await backfill_once(db, embedder) == 0


async def test_backfill_once_skips_poison_rows_and_reports_them(db: Database) -> None:
    ids = await add_entries(db, ["fine", "POISON here", "also fine", "fine again"])
    embedder = HashEmbedder(poison="POISON")
    with pytest.raises(EmbeddingError, match=f"entry_embeddings:{ids[1]}"):
        await backfill_once(db, embedder, tables=["entry_embeddings"])
    missing = await missing_owner_ids(db, "entry_embeddings", "entries", embedder.model, 9)
    assert missing == [ids[1]]


async def test_backfill_once_stops_at_an_outage(db: Database) -> None:
    await add_entries(db, ["a", "b", "c"])
    embedder = HashEmbedder(fail=1)
    with pytest.raises(EmbeddingError) as info:
        await backfill_once(db, embedder, batch=2)
    assert info.value.retryable and len(embedder.calls) == 1


async def test_backfill_job_retries_with_backoff_until_done(db: Database) -> None:
    ids = await add_entries(db, [f"entry {i}" for i in range(5)])
    embedder = HashEmbedder(fail=3)
    job = EmbeddingBackfill(
        db, embedder, tables=["entry_embeddings"], batch=2, retry_base=0.01, retry_cap=0.05
    )
    assert [job.retry_delay(n) for n in (1, 2, 3, 4, 10)] == [0.01, 0.02, 0.04, 0.05, 0.05]
    async with trio.open_nursery() as nursery:
        await nursery.start(job.run)
        with trio.fail_after(10):
            await job.wait_passes(1)
        assert job.embedded == 5 and job.failures == 0
        assert len(embedder.calls) == 3 + 3  # three failed passes, then 2 + 2 + 1
        # new rows are picked up after a wake-up
        more = await add_entries(db, ["late arrival"])
        job.wake()
        with trio.fail_after(10):
            await job.wait_passes(2)
        nursery.cancel_scope.cancel()
    assert job.embedded == 6
    missing = await missing_owner_ids(db, "entry_embeddings", "entries", embedder.model, 9)
    assert missing == [] and more[0] > ids[-1]


# --- OpenAI, through the fake server -----------------------------------------------------------


async def test_openai_embedder_through_the_fake(db: Database) -> None:
    import fakes.openai_api as fake_api

    async with fake_api.run_fake_openai() as fake:
        embedder = OpenAIEmbedder(
            api_key=fake_api.DEFAULT_API_KEY, base_url=fake.base_url, usage_db=db, max_retries=0
        )
        try:
            texts = ["I went running", "", "x" * 100_000, "tea with Mum"]
            vectors = await embedder.embed(texts, purpose="embedding", chat_id=7)
            assert len(vectors) == 4
            for v in vectors:
                assert v.dtype == np.float32 and v.shape == (OPENAI_DIMS,)
                assert float(np.linalg.norm(v)) == pytest.approx(1.0, abs=1e-5)
            [call] = fake.calls_to(fake_api.EMBEDDINGS)
            assert call.model == OPENAI_MODEL
            rows = await db.fetch("SELECT * FROM api_usage")
            [row] = rows
            assert (row["provider"], row["model"], row["purpose"]) == (
                "openai",
                OPENAI_MODEL,
                "embedding",
            )
            assert row["chat_id"] == 7 and row["ok"] and row["input_tokens"] > 0
            assert row["cost_usd"] > 0

            fake.fail_next(fake_api.EMBEDDINGS, fake_api.Failure.server_error())
            with pytest.raises(EmbeddingError) as info:
                await embedder.embed(["again"], purpose="embedding")
            assert info.value.retryable
            failed = await db.fetchrow("SELECT * FROM api_usage WHERE NOT ok")
            assert failed is not None and failed["cost_usd"] == 0
        finally:
            await embedder.aclose()
        wrong = OpenAIEmbedder(
            api_key="sk-wrong-key-0123456789abcdef", base_url=fake.base_url, max_retries=0
        )
        try:
            with pytest.raises(EmbeddingError) as info:
                await wrong.embed(["hello"], purpose="embedding")
        finally:
            await wrong.aclose()
        assert not info.value.retryable
        assert "sk-wrong-key-0123456789abcdef" not in str(info.value)
