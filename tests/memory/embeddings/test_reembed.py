"""``memory.embeddings.reembed`` against the real PostgreSQL with the local model really loaded:
every side
table embedded, resumable after an outage, ``all_rows`` re-embeds, indexes built afterwards,
permanent failures skipped; and ``engram memory reembed`` through ``actors.cli.main.main``."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from memory.embeddings.providers import LocalEmbedder
from memory.embeddings.reembed import count_pending, reembed
from memory.embeddings.store import index_name
from memory.errors import EmbeddingError
from memory.patterns.canonical import canonical_hash
from runtime.db import Database
from runtime.progress import Progress

MODEL = "wordllama-l2-supercat-256"
TABLES = ("entry_embeddings", "pattern_embeddings", "alias_embeddings", "episode_embeddings")


class Counting:
    """Wraps the local model: counts texts; can go down (retryable) after ``ok_calls`` calls,
    or reject any batch containing ``poison`` (permanently)."""

    def __init__(self, inner: LocalEmbedder, *, ok_calls: int | None = None, poison: str = ""):
        self.inner, self.ok_calls, self.poison = inner, ok_calls, poison
        self.model, self.dims = inner.model, inner.dims
        self.texts: list[str] = []
        self.calls = 0

    async def embed(
        self, texts: Sequence[str], *, purpose: str, chat_id: int | None = None
    ) -> list[np.ndarray]:
        if self.ok_calls is not None and self.calls >= self.ok_calls:
            raise EmbeddingError("provider down", retryable=True)
        self.calls += 1
        if self.poison and any(self.poison in t for t in texts):
            raise EmbeddingError("input rejected", retryable=False)
        self.texts.extend(texts)
        return await self.inner.embed(texts, purpose=purpose, chat_id=chat_id)


async def seed(db: Database, n: int = 10) -> None:
    """``n`` entries, ``n`` patterns (chats 1 and 2), one alias per pattern, ``n`` episodes."""
    for i in range(n):
        await db.execute(
            "INSERT INTO entries (uuid, created_at, text) VALUES ($1, now(), $2)",
            f"u{i}",
            f"journal entry number {i} about hiking and coffee",
        )
        content = f"User likes activity number {i}"
        pid = await db.fetchval(
            "INSERT INTO patterns (chat_id, content, canonical_hash, first_seen, last_seen) "
            "VALUES ($1, $2, $3, now(), now()) RETURNING id",
            1 + i % 2,
            content,
            canonical_hash(content),
        )
        await db.execute(
            "INSERT INTO pattern_aliases (pattern_id, chat_id, content) VALUES ($1, $2, $3)",
            pid,
            1 + i % 2,
            f"user enjoys activity {i}",
        )
        await db.execute(
            "INSERT INTO episodes (chat_id, summary, started_at, ended_at, message_count) "
            "VALUES ($1, $2, now(), now(), 3)",
            1,
            f"talked about week {i}",
        )


async def vector_counts(db: Database) -> dict[str, int]:
    return {
        t: int(await db.fetchval(f"SELECT count(*) FROM {t} WHERE model = $1", MODEL))
        for t in TABLES
    }


async def has_index(db: Database, table: str) -> bool:
    return bool(
        await db.fetchval(
            "SELECT count(*) FROM pg_indexes WHERE indexname = $1", index_name(table, MODEL, 256)
        )
    )


async def test_reembed_everything_then_nothing(db: Database, local: LocalEmbedder) -> None:
    await seed(db)
    assert await count_pending(db, MODEL) == dict.fromkeys(TABLES, 10)
    assert not await has_index(db, "pattern_embeddings")
    emb = Counting(local)
    out = io.StringIO()
    with Progress(label="re", stream=out, tty=False) as bar:
        report = await reembed(db, emb, batch=4, progress=bar)
    assert report.embedded == dict.fromkeys(TABLES, 10) and report.total == 40
    assert emb.calls == 4 * 3  # 10 rows per table in batches of 4
    assert await vector_counts(db) == dict.fromkeys(TABLES, 10)
    assert set(report.indexes_created) == set(TABLES)
    for table in TABLES:
        assert await has_index(db, table)
    # vectors carry the owner's chat and are the model's real vectors of the owner text
    row = await db.fetchrow(
        "SELECT p.content, p.chat_id, pe.chat_id AS vchat, pe.dims, pe.embedding "
        "FROM patterns p JOIN pattern_embeddings pe ON pe.pattern_id = p.id "
        "WHERE p.content = 'User likes activity number 3'"
    )
    assert row is not None
    assert row["vchat"] == row["chat_id"] == 2 and row["dims"] == 256
    [expected] = await local.embed([row["content"]], purpose="embedding")
    raw = row["embedding"]
    stored = np.asarray(getattr(raw, "to_numpy", lambda: raw)(), dtype=np.float32)
    assert float(np.dot(stored, expected)) > 0.999
    assert "re: 40/40 in " in out.getvalue()

    again = Counting(local)
    second = await reembed(db, again)
    assert second.total == 0 and again.calls == 0 and second.indexes_created == ()


async def test_resumes_after_an_outage(db: Database, local: LocalEmbedder) -> None:
    await seed(db)
    down = Counting(local, ok_calls=3)
    with pytest.raises(EmbeddingError, match="stopped after 9 vector"):
        await reembed(db, down, batch=3)
    assert sum((await vector_counts(db)).values()) == 9
    rest = Counting(local)
    report = await reembed(db, rest, batch=3)
    assert report.total == 31
    assert len(rest.texts) == 31  # nothing embedded twice
    assert await vector_counts(db) == dict.fromkeys(TABLES, 10)


async def test_all_rows_re_embeds_once(db: Database, local: LocalEmbedder) -> None:
    await seed(db, 3)
    await reembed(db, local, tables=["pattern_embeddings"])
    before = await db.fetchval("SELECT max(created_at) FROM pattern_embeddings")
    emb = Counting(local)
    report = await reembed(db, emb, tables=["pattern_embeddings"], all_rows=True, batch=2)
    assert report.embedded == {"pattern_embeddings": 3} and len(emb.texts) == 3
    assert await db.fetchval("SELECT min(created_at) FROM pattern_embeddings") > before
    assert await vector_counts(db) == {**dict.fromkeys(TABLES, 0), "pattern_embeddings": 3}


async def test_permanent_failures_are_skipped_and_reported(
    db: Database, local: LocalEmbedder
) -> None:
    await seed(db, 4)
    emb = Counting(local, poison="activity 2")
    report = await reembed(db, emb, tables=["alias_embeddings"], batch=4)
    assert report.embedded == {"alias_embeddings": 3}
    [bad] = report.failed
    assert bad.startswith("alias_embeddings:")
    missing = await db.fetchval(
        "SELECT a.content FROM pattern_aliases a WHERE NOT EXISTS "
        "(SELECT 1 FROM alias_embeddings v WHERE v.alias_id = a.id)"
    )
    assert missing == "user enjoys activity 2"


def test_cli_memory_reembed(
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    restore_logging: None,
) -> None:
    import trio

    from actors.cli.main import main
    from runtime import db as dbmod

    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "EMBEDDING_PROVIDER", "DATABASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setenv("ENGRAM_HOME", str(tmp_path))

    async def prepare() -> None:
        async with dbmod.asyncio_loop(), dbmod.open_database(database_url) as d:
            from runtime.migrate import apply_migrations

            await apply_migrations(d)
            await seed(d, 5)

    trio.run(prepare)
    assert main(["memory", "reembed", "--embeddings", "local"]) == 0
    captured = capsys.readouterr()
    assert f"re-embedded 20 row(s) with {MODEL}" in captured.out
    assert "patterns 5" in captured.out and "entries 5" in captured.out
    assert "re-embedding: 20/20 in " in captured.err
    assert main(["memory", "reembed", "--embeddings", "local"]) == 0
    assert f"re-embedded 0 row(s) with {MODEL}" in capsys.readouterr().out
    assert main(["memory", "reembed", "--embeddings", "local", "--all"]) == 0
    assert f"re-embedded 20 row(s) with {MODEL}" in capsys.readouterr().out
