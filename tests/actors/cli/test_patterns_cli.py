"""``engram patterns list|merge|purge`` through ``actors.cli.main.main`` against a test database,
with
the fake Anthropic server adjudicating merges (the CLI runs in a worker thread with its own trio
loop while the fake serves on this one)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trio
from fakes.anthropic_api import FakeAnthropic, run_fake_anthropic

from actors.cli.main import main
from actors.cli.patterns import pair_line, render_table
from memory.embeddings.providers import LocalEmbedder
from memory.embeddings.store import store_vectors
from memory.patterns.canonical import canonical_hash
from memory.patterns.controls import pin_pattern
from memory.patterns.merge import MergePair
from runtime.db import Database

T0 = datetime(2026, 10, 1, 9, 30, tzinfo=UTC)


@pytest.fixture
def cli_env(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restore_logging: None
) -> None:
    for var in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_MODEL",
        "MEMORY_MODEL",
        "MESSAGE_RETENTION_DAYS",
        "PATTERN_MERGE_THRESHOLD",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setenv("ENGRAM_HOME", str(tmp_path))
    monkeypatch.setenv("EMBEDDING_PROVIDER", "local")
    monkeypatch.setenv("LLM_PROVIDER", "anthropic")


@pytest.fixture
async def claude(cli_env: None, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeAnthropic]:
    async with run_fake_anthropic() as fake:
        monkeypatch.setenv("ANTHROPIC_API_KEY", fake.api_key)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
        yield fake


async def run(*argv: str) -> int:
    """``engram ARGV`` in a worker thread (``main`` runs its own trio loop)."""
    return await trio.to_thread.run_sync(main, list(argv))


async def add(
    db: Database,
    chat_id: int,
    content: str,
    *,
    emb: LocalEmbedder | None = None,
    strength: float = 1.0,
    status: str = "active",
    kind: str = "preference",
) -> int:
    pid: int = await db.fetchval(
        "INSERT INTO patterns (chat_id, content, kind, strength, confidence, status, "
        "canonical_hash, first_seen, last_seen) VALUES ($1, $2, $3, $4, 0.7, $5, $6, $7, $7) "
        "RETURNING id",
        chat_id,
        content,
        kind,
        strength,
        status,
        canonical_hash(content),
        T0,
    )
    if emb is not None:
        [vector] = await emb.embed([content], purpose="embedding")
        await store_vectors(db, "pattern_embeddings", "pattern_id", [(pid, vector)], emb.model)
    return pid


def verdict(same: bool, differences: str) -> str:
    return json.dumps(
        {"differences": differences, "core_intent_match": same, "merge_decision": same}
    )


# --- pure ---------------------------------------------------------------------------------------


def test_render_table_aligns_and_clips() -> None:
    text = render_table(
        ("id", "strength", "content"),
        [(1, 2.5, "short"), (12, None, "a much longer content\nwith a newline")],
        last_width=12,
    )
    assert text.splitlines() == [
        "id  strength  content",
        "1   2.50      short",
        "12            a much long…",
    ]


def test_pair_line() -> None:
    pair = MergePair(3, 1, 2, "User likes tea", "User enjoys tea", 0.9312, "merge", 1, 2, "none")
    assert pair_line(pair) == (
        'chat 3: #1 "User likes tea" ~ #2 "User enjoys tea" 0.931 -> merge #2 into #1 — none'
    )


# --- list ---------------------------------------------------------------------------------------


async def test_patterns_list(
    db: Database, cli_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    weak = await add(db, 5, "User drinks green tea every morning", strength=1.0)
    strong = await add(db, 5, "User runs on Sundays", strength=4.0, kind="behavior")
    old = await add(db, 5, "User smokes", status="deprecated")
    await add(db, 6, "Another chat's pattern")
    capsys.readouterr()
    assert await run("patterns", "list", "--chat", "5") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "id",
        "kind",
        "strength",
        "confidence",
        "status",
        "last_seen",
        "content",
    ]
    assert [int(line.split()[0]) for line in lines[1:-1]] == [strong, weak, old]
    assert lines[1].split()[:6] == [str(strong), "behavior", "4.00", "0.70", "active", "2026-10-01"]
    assert lines[1].endswith("User runs on Sundays")
    assert lines[-1] == "3 pattern(s)"
    assert "Another chat" not in "\n".join(lines)

    assert await run("patterns", "list", "--chat", "5", "--status", "deprecated") == 0
    out = capsys.readouterr().out.splitlines()
    assert [int(line.split()[0]) for line in out[1:-1]] == [old]
    assert await run("patterns", "list", "--chat", "77") == 0
    assert capsys.readouterr().out.strip() == "no patterns for chat 77"


# --- merge --------------------------------------------------------------------------------------


async def test_patterns_merge_dry_run_then_merge(
    db: Database, claude: FakeAnthropic, local: LocalEmbedder, capsys: pytest.CaptureFixture[str]
) -> None:
    a = await add(db, 1, "User drinks green tea every morning", emb=local, strength=3.0)
    b = await add(db, 1, "User drinks green tea each morning", emb=local)
    await add(db, 1, "User is allergic to peanuts", emb=local)
    await add(db, 2, "User drinks green tea every morning", emb=local)  # another chat

    claude.queue_text(verdict(True, "only the wording differs"))
    capsys.readouterr()
    assert await run("patterns", "merge", "--dry-run") == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0].startswith(f'chat 1: #{a} "User drinks green tea every morning" ~ #{b} ')
    assert lines[0].endswith(f"-> merge #{b} into #{a} — only the wording differs")
    assert lines[1].startswith("1 pair(s) in 1 chat(s) at similarity >= 0.87 (wordllama")
    assert lines[2] == "dry run: nothing was changed"
    assert "adjudicating: 1/1 in " in captured.err
    assert await db.fetchval("SELECT count(*) FROM patterns WHERE status = 'active'") == 4
    [request] = claude.answered
    assert request.body["model"] == "claude-haiku-4-5"  # the memory model, not the chat model
    prompt = json.dumps(request.messages)
    assert "User drinks green tea each morning" in prompt
    usage = await db.fetchrow("SELECT purpose, chat_id FROM api_usage")
    assert usage is not None and usage["purpose"] == "adjudication" and usage["chat_id"] == 1

    claude.queue_text(verdict(True, "same habit"))
    assert await run("patterns", "merge") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "merged 1 pattern(s)"
    row = await db.fetchrow("SELECT status, status_reason FROM patterns WHERE id = $1", b)
    assert row is not None and row["status"] == "merged"
    assert row["status_reason"] == f"merged into #{a}: same habit"

    assert await run("patterns", "merge") == 0  # nothing left to merge, no LLM call
    assert capsys.readouterr().out.splitlines()[0].startswith("0 pair(s) in 0 chat(s)")
    assert len(claude.answered) == 2


async def test_patterns_merge_keeps_what_the_model_rejects(
    db: Database, claude: FakeAnthropic, local: LocalEmbedder, capsys: pytest.CaptureFixture[str]
) -> None:
    await add(db, 1, "User drinks green tea every morning", emb=local)
    await add(db, 1, "User drinks green tea each morning", emb=local)
    claude.queue_text(verdict(False, "one is daily, one is not"))
    capsys.readouterr()
    assert await run("patterns", "merge") == 0
    out = capsys.readouterr().out
    assert "keep both (different) — one is daily, one is not" in out
    assert "merged 0 pattern(s)" in out
    claude.queue_text("I think they are the same.")  # not the JSON verdict: no answer
    assert await run("patterns", "merge") == 0
    assert "keep both (no adjudication answer)" in capsys.readouterr().out
    assert await db.fetchval("SELECT count(*) FROM patterns WHERE status = 'active'") == 2


async def test_patterns_merge_needs_an_llm(
    cli_env: None, db: Database, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await run("patterns", "merge", "--dry-run") == 2
    assert "ANTHROPIC_API_KEY" in capsys.readouterr().err


# --- purge --------------------------------------------------------------------------------------


async def add_message(db: Database, chat_id: int, text: str, compacted: datetime | None) -> None:
    await db.execute(
        "INSERT INTO chat_messages (chat_id, role, content, compacted_at) "
        "VALUES ($1, 'user', $2, $3)",
        chat_id,
        text,
        compacted,
    )


async def test_patterns_purge(
    db: Database, cli_env: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    now = datetime.now(UTC)
    await add_message(db, 1, "old and compacted", now - timedelta(days=10))
    await add_message(db, 1, "recently compacted", now - timedelta(days=2))
    await add_message(db, 1, "not compacted", None)
    monkeypatch.setenv("MESSAGE_RETENTION_DAYS", "0")
    capsys.readouterr()
    assert await run("patterns", "purge") == 0
    assert "keep forever" in capsys.readouterr().out
    assert await db.fetchval("SELECT count(*) FROM chat_messages") == 3

    monkeypatch.setenv("MESSAGE_RETENTION_DAYS", "7")
    assert await run("patterns", "purge") == 0
    assert capsys.readouterr().out.strip() == ("deleted 1 compacted message(s) older than 7 day(s)")
    left = [r["content"] for r in await db.fetch("SELECT content FROM chat_messages ORDER BY id")]
    assert left == ["recently compacted", "not compacted"]
    assert await run("patterns", "purge", "--days", "1") == 0
    assert "deleted 1 compacted message(s) older than 1 day(s)" in capsys.readouterr().out


# --- patterns show ------------------------------------------------------------------------------


async def test_patterns_show_prints_the_evidence_and_the_audit(
    db: Database, cli_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    pid = await add(db, 5, "User likes tea")
    await db.execute(
        "INSERT INTO pattern_observations (pattern_id, chat_id, evidence, evidence_roles, "
        "observed_at) VALUES ($1, 5, 'I love a cup of tea', '{user}', $2)",
        pid,
        T0,
    )
    assert await pin_pattern(db, 5, pid, True, actor="person") is not None
    capsys.readouterr()
    assert await run("patterns", "show", str(pid)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == ["chat 5", f"#{pid} [preference] User likes tea (active)"]
    assert "  • 2026-10-01 user, explicit: “I love a cup of tea”" in lines
    [history] = [line for line in lines if "pinned by the person" in line]
    assert " pin by you — pinned by the person" in history
    assert await run("patterns", "show", "999999") == 1
    assert capsys.readouterr().err.strip() == "engram: no pattern 999999"
