"""``engram memory export|import`` and ``engram journal export`` through ``actors.cli.main.main``
against a test database (each command in a worker thread with its own trio loop)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
from fakes.snapshot import fill_chat, normalized
from jsonschema import Draft202012Validator

from actors.cli.main import main
from memory.export.document import build_snapshot
from runtime.db import Database

CHAT, OTHER = 9101, 9102
FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "dayone_small.json"
AF_SCHEMA = (
    Path(__file__).resolve().parents[3] / "memory/export/schemas/letta_agent_file.schema.json"
)


@pytest.fixture
def cli_env(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restore_logging: None
) -> None:
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setenv("ENGRAM_HOME", str(tmp_path))
    monkeypatch.setenv("EMBEDDING_PROVIDER", "local")
    monkeypatch.setenv("TELEGRAM_ALLOWED_CHAT_IDS", f"{CHAT},{OTHER}")


async def run(*argv: str) -> int:
    return await trio.to_thread.run_sync(main, list(argv))


async def table_counts(db: Database) -> dict[str, int]:
    names = ["patterns", "chat_messages", "pattern_audit", "entries", "cron_jobs"]
    return {t: int(await db.fetchval(f"SELECT count(*) FROM {t}")) for t in names}


async def test_export_then_import_into_another_chat(
    db: Database, cli_env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await fill_chat(db, CHAT)
    out = tmp_path / "snapshot.json"
    assert await run("memory", "export", "--chat", str(CHAT), "-o", str(out)) == 0
    assert "3 patterns" in capsys.readouterr().err
    exported = json.loads(out.read_text("utf-8"))
    assert exported["chat_id"] == CHAT and exported["vectors"] is None
    assert out.stat().st_mode & 0o777 == 0o600  # a person's memory: its owner's alone

    code = await run("memory", "import", str(out), "--chat", str(OTHER), "--embeddings", "none")
    assert code == 0
    printed = capsys.readouterr().out
    assert f"chat {OTHER}: imported" in printed and "patterns: 3 added" in printed
    again = await build_snapshot(db, OTHER, engram_version="x", embedding_model=None)
    mine = await build_snapshot(db, CHAT, engram_version="x", embedding_model=None)
    assert normalized({**again, "chat_id": CHAT}) == normalized(mine)


async def test_a_truncated_file_is_refused_whole(
    db: Database, cli_env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await fill_chat(db, CHAT)
    out = tmp_path / "snapshot.json"
    assert await run("memory", "export", "--chat", str(CHAT), "-o", str(out)) == 0
    data = out.read_bytes()
    out.write_bytes(data[: len(data) - 200])
    capsys.readouterr()
    before = await table_counts(db)
    assert await run("memory", "import", str(out), "--chat", str(OTHER)) == 1
    err = capsys.readouterr().err
    assert f"{out}: $: not JSON" in err and "truncated" in err
    assert len(err.strip().splitlines()) == 1
    assert await table_counts(db) == before


async def test_letta_agent_file(db: Database, cli_env: None, tmp_path: Path) -> None:
    await fill_chat(db, CHAT)
    out = tmp_path / "engram.af"
    code = await run("memory", "export", "--chat", str(CHAT), "--format", "af", "-o", str(out))
    assert code == 0
    doc: dict[str, Any] = json.loads(out.read_text("utf-8"))
    Draft202012Validator(json.loads(AF_SCHEMA.read_text("utf-8"))).validate(doc)
    blocks = {b["label"]: b["value"] for b in doc["blocks"]}
    assert set(blocks) == {"human", "persona"}
    assert doc["agents"][0]["block_ids"] == [b["id"] for b in doc["blocks"]]
    # the pinned pattern is in the profile; the event too; a superseded one is not
    assert "Runs 5 km most mornings" in blocks["human"]
    assert "Team offsite in Lisbon" in blocks["human"]
    assert "Likes tea" not in blocks["human"]
    assert "engram" in blocks["persona"]


async def test_dayone_export_reads_back_identically(
    db: Database, cli_env: None, tmp_path: Path
) -> None:
    imp = ("journal", "import", "--embeddings", "none")
    assert await run(*imp, str(FIXTURE), "--chat", str(CHAT)) == 0
    first = tmp_path / "journal.json"
    args = ("journal", "export", "--format", "dayone")
    assert await run(*args, "--chat", str(CHAT), "-o", str(first)) == 0
    assert await run(*imp, str(first), "--chat", str(OTHER)) == 0
    second = tmp_path / "journal2.json"
    assert await run(*args, "--chat", str(OTHER), "-o", str(second)) == 0
    assert first.read_text("utf-8") == second.read_text("utf-8")

    query = (
        "SELECT uuid, created_at, modified_at, timezone, text, tags, city, country, place_name, "
        "latitude, longitude, location, weather, photo_count, video_count, audio_count, "
        "word_count FROM entries WHERE chat_id = $1 ORDER BY uuid"
    )
    rows = [dict(r) for r in await db.fetch(query, CHAT)]
    assert len(rows) > 20
    assert rows == [dict(r) for r in await db.fetch(query, OTHER)]
    assert any(r["photo_count"] for r in rows) and any(r["weather"] for r in rows)


async def test_an_unknown_chat_exports_empty_and_says_so(
    db: Database, cli_env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "empty.json"
    (tmp_path / ".empty.json.tmp").write_bytes(b"left by a crash")  # its old mode is not kept
    (tmp_path / ".empty.json.tmp").chmod(0o644)
    assert await run("memory", "export", "--chat", "424242", "-o", str(out)) == 0
    assert "holds nothing of this chat" in capsys.readouterr().err
    assert json.loads(out.read_text("utf-8"))["patterns"] == []
    assert out.stat().st_mode & 0o777 == 0o600
