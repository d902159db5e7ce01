"""Day One import against the real PostgreSQL with the local model really loaded; the progress
bar; and ``engram journal import`` end to end in a subprocess against a fresh database."""

from __future__ import annotations

import copy
import io
import json
import os
import subprocess
import sys
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakes.memory import DownEmbedder

from memory.embeddings.providers import OPENAI_MODEL, LocalEmbedder, OpenAIEmbedder
from memory.embeddings.store import backfill_once, missing_owner_ids
from memory.errors import JournalFormatError, MalformedEntry
from memory.journal.dayone import (
    import_dayone,
    known_timezone,
    parse_entry,
    read_export,
    word_count,
)
from runtime.db import Database
from runtime.progress import Progress, format_duration, render_line

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "dayone_small.json"
VALID = 28
MODEL = "wordllama-l2-supercat-256"
CHAT, OTHER = 1, 2


def export() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(FIXTURE.read_text())
    return data


def find(doc: dict[str, Any], prefix: str) -> dict[str, Any]:
    [entry] = [e for e in doc["entries"] if str(e.get("text", "")).startswith(prefix)]
    found: dict[str, Any] = entry
    return found


def as_array(value: object) -> np.ndarray:
    to_numpy = getattr(value, "to_numpy", None)
    return np.asarray(to_numpy() if to_numpy else value, dtype=np.float32)


async def entry_row(db: Database, uuid: str) -> dict[str, Any]:
    row = await db.fetchrow("SELECT * FROM entries WHERE uuid = $1", uuid)
    assert row is not None
    return dict(row)


# --- parsing -----------------------------------------------------------------------------------


def test_word_count_ignores_photo_references_and_escapes() -> None:
    assert word_count("") == 0
    assert word_count("Don't stop — well-known 8 km\\.") == 5
    assert word_count("Hi there\n\n![](dayone-moment://ABCDEF0123)") == 2
    assert word_count("日本 語") == 2


def test_parse_entry_validates() -> None:
    base = {"uuid": "A1", "creationDate": "2024-01-02T03:04:05Z"}
    entry = parse_entry(base)
    assert entry.created_at == datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert entry.text == "" and entry.tags == () and entry.modified_at is None
    naive = parse_entry({**base, "creationDate": "2024-01-02T03:04:05"})
    assert naive.created_at.tzinfo is not None
    assert parse_entry({**base, "text": "a\x00b"}).text == "a\ufffdb"
    assert parse_entry({**base, "tags": ["x", "x", " y "]}).tags == ("x", "y")
    for bad, reason in [
        ([], "not an object"),
        ({**base, "uuid": ""}, "uuid"),
        ({**base, "creationDate": "yesterday"}, "creationDate"),
        ({**base, "creationDate": None}, "creationDate"),
        ({**base, "text": 5}, "text"),
        ({**base, "tags": "a,b"}, "tags"),
        ({**base, "location": "Lisbon"}, "location"),
        ({**base, "location": {"latitude": 123.0}}, "latitude"),
        ({**base, "location": {"longitude": "east"}}, "longitude"),
        ({**base, "photos": {"a": 1}}, "photos"),
        ({**base, "weather": [1]}, "weather"),
    ]:
        with pytest.raises(MalformedEntry, match=reason):
            parse_entry(bad)


def test_time_zones_are_checked_on_import() -> None:
    base = {"uuid": "A1", "creationDate": "2024-01-02T03:04:05Z"}
    assert parse_entry({**base, "timeZone": "Europe/Lisbon"}).timezone == "Europe/Lisbon"
    for bad in ("Mars/Base", "PST", "", "localtime", "../etc/passwd", "europe/lisbon"):
        assert parse_entry({**base, "timeZone": bad}).timezone is None, bad
    assert known_timezone(None) is None and known_timezone("UTC") == "UTC"


def test_read_export_errors(tmp_path: Path) -> None:
    with pytest.raises(JournalFormatError, match="cannot read"):
        read_export(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(JournalFormatError, match="not JSON"):
        read_export(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(JournalFormatError, match="not a Day One export"):
        read_export(tmp_path / "list.json")
    with pytest.raises(JournalFormatError, match="not a Day One export"):
        read_export({"entries": "nope"})
    with pytest.raises(JournalFormatError, match="cannot read"):
        read_export(tmp_path)  # a directory


# --- importing ---------------------------------------------------------------------------------


async def test_import_counts_fields_and_embeddings(db: Database, local: LocalEmbedder) -> None:
    doc = export()
    report = await import_dayone(db, FIXTURE, chat_id=CHAT, embedder=local)
    assert (report.total, report.imported, report.updated, report.unchanged) == (30, VALID, 0, 0)
    assert report.embedded == VALID and report.embedding_error is None
    skipped = dict(report.skipped)
    assert len(skipped) == 2
    bad_date = doc["entries"][10]["uuid"]
    assert "creationDate" in skipped[bad_date]
    assert 20 in skipped and "uuid" in skipped[20]  # no uuid: reported by index
    assert await db.fetchval("SELECT count(*) FROM entries") == VALID

    run = find(doc, "Ran along the river")
    row = await entry_row(db, run["uuid"])
    assert row["tags"] == ["running", "morning"]
    assert (row["city"], row["country"], row["place_name"]) == (
        "Lisbon",
        "Portugal",
        "Café A Brasileira",
    )
    assert row["latitude"] == pytest.approx(38.7107) and row["longitude"] == pytest.approx(-9.1424)
    assert row["timezone"] == "Europe/Lisbon"
    assert row["created_at"] == datetime(2019, 6, 14, 7, 30, tzinfo=UTC)
    assert row["modified_at"] == datetime(2019, 6, 14, 7, 37, tzinfo=UTC)
    assert (row["photo_count"], row["video_count"], row["audio_count"]) == (1, 0, 0)
    assert row["word_count"] == 20  # the photo reference is not counted
    assert json.loads(row["weather"])["temperatureCelsius"] == pytest.approx(18.3)
    assert json.loads(row["location"])["administrativeArea"] == "Lisbon"

    xmas = await entry_row(db, find(doc, "Christmas Eve")["uuid"])
    assert (xmas["city"], xmas["photo_count"], xmas["video_count"]) == ("Porto", 3, 1)
    fireworks = await entry_row(db, find(doc, "Fireworks")["uuid"])
    assert fireworks["created_at"] == datetime(2021, 7, 5, 2, 0, tzinfo=UTC)  # July 4th in NY
    sleepless = await entry_row(db, find(doc, "Can't sleep")["uuid"])
    assert sleepless["modified_at"] is None
    photo_only = await entry_row(db, doc["entries"][-1]["uuid"])
    assert photo_only["word_count"] == 0 and photo_only["city"] is None
    assert photo_only["tags"] == [] and photo_only["photo_count"] == 2

    # every entry has one unit vector for the local model, found by similarity
    assert (
        await db.fetchval(
            "SELECT count(*) FROM entry_embeddings WHERE model = $1 AND dims = 256", MODEL
        )
        == VALID
    )
    [query] = await local.embed(["jogging and marathon training"], purpose="embedding")
    top = await db.fetch(
        "SELECT e.tags FROM entry_embeddings v JOIN entries e ON e.id = v.entry_id "
        "WHERE v.model = $1 ORDER BY v.embedding::vector(256) <=> $2::vector(256) LIMIT 5",
        MODEL,
        query,
    )
    assert sum("running" in r["tags"] for r in top) >= 3
    assert await db.fetchval("SELECT count(*) FROM api_usage") == 0  # local: free, no rows


async def test_reimport_is_idempotent(db: Database, local: LocalEmbedder) -> None:
    await import_dayone(db, FIXTURE, chat_id=CHAT, embedder=local)
    before = await db.fetch("SELECT entry_id, created_at FROM entry_embeddings ORDER BY 1")
    report = await import_dayone(db, FIXTURE, chat_id=CHAT, embedder=local)
    assert (report.imported, report.updated, report.unchanged) == (0, 0, VALID)
    assert report.embedded == 0 and len(report.skipped) == 2
    after = await db.fetch("SELECT entry_id, created_at FROM entry_embeddings ORDER BY 1")
    assert [tuple(r) for r in after] == [tuple(r) for r in before]
    assert await db.fetchval("SELECT count(*) FROM entries") == VALID


async def test_modified_entry_is_updated_and_re_embedded(
    db: Database, local: LocalEmbedder
) -> None:
    doc = export()
    await import_dayone(db, doc, chat_id=CHAT, embedder=local)
    edited = copy.deepcopy(doc)
    entry = find(edited, "Leap day")
    entry["text"] = "Leap day. Swam in the lake with Sofia and ate ice cream afterwards."
    entry["modifiedDate"] = "2024-03-01T09:00:00Z"
    entry["tags"] = ["leap day", "swimming"]
    tagged = find(edited, "Promotion came through")  # modified, same text
    tagged["modifiedDate"] = "2024-02-01T09:00:00Z"
    tagged["tags"] = ["work", "sleep", "milestone"]
    old_row = await entry_row(db, entry["uuid"])
    old_vec = as_array(
        await db.fetchval("SELECT embedding FROM entry_embeddings WHERE entry_id=$1", old_row["id"])
    )
    report = await import_dayone(db, edited, chat_id=CHAT, embedder=local)
    assert (report.imported, report.updated, report.unchanged) == (0, 2, VALID - 2)
    assert report.embedded == 1  # only the entry whose text changed
    row = await entry_row(db, entry["uuid"])
    assert row["id"] == old_row["id"] and row["tags"] == ["leap day", "swimming"]
    assert row["word_count"] == 13
    assert row["modified_at"] == datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
    new_vec = as_array(
        await db.fetchval("SELECT embedding FROM entry_embeddings WHERE entry_id=$1", row["id"])
    )
    assert float(new_vec @ old_vec) < 0.999
    assert (await entry_row(db, tagged["uuid"]))["tags"] == ["work", "sleep", "milestone"]

    # an older export does not overwrite newer edits
    report = await import_dayone(db, doc, chat_id=CHAT, embedder=local)
    assert (report.imported, report.updated, report.unchanged) == (0, 0, VALID)
    assert (await entry_row(db, entry["uuid"]))["tags"] == ["leap day", "swimming"]


async def test_embedding_outage_imports_then_backfills(db: Database, local: LocalEmbedder) -> None:
    down = DownEmbedder()
    report = await import_dayone(db, FIXTURE, chat_id=CHAT, embedder=down, batch_size=10)
    assert report.imported == VALID and report.embedded == 0
    assert report.embedding_error is not None and "provider down" in report.embedding_error
    assert down.calls == 1  # no more attempts after the first failure
    missing = await missing_owner_ids(db, "entry_embeddings", "entries", MODEL, 100)
    assert len(missing) == VALID
    assert await backfill_once(db, local, tables=["entry_embeddings"]) == VALID
    assert await missing_owner_ids(db, "entry_embeddings", "entries", MODEL, 100) == []
    # a re-import with a working embedder would also have filled the gaps
    report = await import_dayone(db, FIXTURE, chat_id=CHAT, embedder=local)
    assert report.unchanged == VALID and report.embedded == 0


async def test_import_with_openai_embeddings_through_the_fake(db: Database) -> None:
    from fakes.openai_api import DEFAULT_API_KEY, EMBEDDINGS, run_fake_openai

    async with run_fake_openai() as fake:
        embedder = OpenAIEmbedder(
            api_key=DEFAULT_API_KEY, base_url=fake.base_url, usage_db=db, batch_size=16
        )
        try:
            report = await import_dayone(
                db, FIXTURE, chat_id=CHAT, embedder=embedder, batch_size=20
            )
        finally:
            await embedder.aclose()
        assert report.imported == VALID and report.embedded == VALID
        assert len(fake.calls_to(EMBEDDINGS)) == 3  # batches of 20 + 8 -> 16 + 4 + 8
    assert (
        await db.fetchval(
            "SELECT count(*) FROM entry_embeddings WHERE model = $1 AND dims = 1536", OPENAI_MODEL
        )
        == VALID
    )
    usage = await db.fetch("SELECT purpose, provider, ok, input_tokens FROM api_usage")
    assert len(usage) == 3
    assert all(r["purpose"] == "embedding" and r["ok"] and r["input_tokens"] > 0 for r in usage)
    indexes = await db.fetchval(
        "SELECT count(*) FROM pg_indexes WHERE tablename = 'entry_embeddings' "
        "AND indexdef LIKE '%hnsw%'"
    )
    assert indexes == 1  # the migration's index serves text-embedding-3-small


async def test_reimport_embeds_what_an_outage_left(db: Database, local: LocalEmbedder) -> None:
    await import_dayone(db, FIXTURE, chat_id=CHAT, embedder=None)
    assert await db.fetchval("SELECT count(*) FROM entry_embeddings") == 0
    report = await import_dayone(db, FIXTURE, chat_id=CHAT, embedder=local)
    assert report.unchanged == VALID and report.embedded == VALID


async def test_zip_export_and_progress(db: Database, tmp_path: Path) -> None:
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.write(FIXTURE, "Journal.json")
        z.writestr("photos/readme.txt", "not json")
    out = io.StringIO()
    progress = Progress(label="importing", stream=out, tty=False)
    report = await import_dayone(db, archive, chat_id=CHAT, embedder=None, progress=progress)
    assert report.imported == VALID
    [line] = out.getvalue().splitlines()
    assert line.startswith("importing: 30/30 in ")


# --- the progress bar --------------------------------------------------------------------------


def test_progress_on_a_terminal_and_elsewhere() -> None:
    now = [0.0]
    tty = io.StringIO()
    bar = Progress(10, label="job", stream=tty, tty=True, min_interval=0.5, clock=lambda: now[0])
    bar.start()
    now[0] = 1.0
    bar.advance(2)
    now[0] = 1.2
    bar.advance()  # within min_interval: not redrawn
    now[0] = 2.0
    bar.advance(2)
    bar.finish()
    frames = tty.getvalue().split("\r")
    assert "job [------------------------] 0/10" in frames[1]
    assert "job [####--------------------] 2/10 20% 2.0/s ETA 0:04" in frames[2]
    assert "5/10" in frames[3] and "2.5/s" in frames[3] and "ETA 0:02" in frames[3]
    assert not any("3/10" in f for f in frames)
    assert frames[-1].endswith("job: 5/10 in 2.0s (2.5/s)\n")

    pipe = io.StringIO()
    with Progress(3, label="quiet", stream=pipe, tty=False) as quiet:
        quiet.advance(3)
    assert pipe.getvalue().count("\n") == 1 and pipe.getvalue().startswith("quiet: 3/3 in ")
    assert format_duration(3725) == "1:02:05" and format_duration(float("inf")) == "0:00"
    assert "7 done" in render_line("", 7, None, 1.0)


# --- the CLI, end to end -----------------------------------------------------------------------

_CLI = (
    "import sys\n"
    "from actors.settings import load_settings\n"
    "from runtime.cli import base_parser, run_cli\n"
    "from actors.cli.journal import register\n"
    "parser, sub = base_parser()\n"
    "register(sub)\n"
    "sys.exit(run_cli(parser, sys.argv[1:], load=load_settings))\n"
)


def _cli(
    args: list[str], database_url: str, home: Path, chats: str = "1"
) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ENGRAM_", "TELEGRAM_", "DATABASE_URL", "OPENAI_"))
    }
    env.update(
        DATABASE_URL=database_url,
        ENGRAM_HOME=str(home),
        LOG_FORMAT="json",
        TELEGRAM_ALLOWED_CHAT_IDS=chats,
    )
    return subprocess.run(
        [sys.executable, "-c", _CLI, *args],
        env=env,
        cwd=Path(__file__).resolve().parents[3],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_cli_journal_import_end_to_end(database_url: str, tmp_path: Path) -> None:
    first = _cli(["journal", "import", str(FIXTURE)], database_url, tmp_path)
    assert first.returncode == 0, first.stderr
    out = first.stdout
    assert f"30 entries: {VALID} imported, 0 updated, 0 unchanged, 2 skipped" in out
    assert "skipped entry #20: uuid" in out
    assert f"skipped {export()['entries'][10]['uuid']}: creationDate" in out
    assert f"embeddings ({MODEL}): {VALID} stored" in out
    assert "importing: 30/30 in " in first.stderr  # not a TTY: only the final line

    again = _cli(
        ["journal", "import", str(FIXTURE), "--embeddings", "none"], database_url, tmp_path
    )
    assert again.returncode == 0, again.stderr
    assert f"0 imported, 0 updated, {VALID} unchanged, 2 skipped" in again.stdout

    missing = _cli(["journal", "import", str(tmp_path / "nope.json")], database_url, tmp_path)
    assert missing.returncode == 1
    errors = [line for line in missing.stderr.splitlines() if line.startswith("engram:")]
    assert len(errors) == 1 and "cannot read" in errors[0]
    (tmp_path / "other.json").write_text('{"posts": []}')
    wrong = _cli(["journal", "import", str(tmp_path / "other.json")], database_url, tmp_path)
    assert wrong.returncode == 1 and "not a Day One export" in wrong.stderr


@pytest.mark.slow
def test_cli_journal_import_chat(database_url: str, tmp_path: Path) -> None:
    def one_error(run: subprocess.CompletedProcess[str]) -> str:
        assert run.returncode == 2, run.stderr
        [line] = [line for line in run.stderr.splitlines() if line.strip()]
        return line

    args = ["journal", "import", str(FIXTURE), "--embeddings", "none"]
    nobody = one_error(_cli(args, database_url, tmp_path, chats=""))
    assert nobody.startswith("engram: no chat is allowed yet")
    both = one_error(_cli(args, database_url, tmp_path, chats="5,6"))
    assert both == "engram: several chats are allowed (5, 6): say whose journal with --chat ID"
    stranger = one_error(_cli([*args, "--chat", "7"], database_url, tmp_path, chats="5,6"))
    assert stranger.startswith("engram: chat 7 is not allowed")
    usage = _cli(["journal", "import", "--help"], database_url, tmp_path)
    assert usage.returncode == 0 and "--chat ID" in usage.stdout

    into_6 = _cli([*args, "--chat", "6"], database_url, tmp_path, chats="5,6")
    assert into_6.returncode == 0, into_6.stderr
    assert into_6.stdout.startswith("chat 6's journal:\n")
    assert f"{VALID} imported" in into_6.stdout
    into_5 = _cli([*args, "--chat", "5"], database_url, tmp_path, chats="5,6")
    assert f"{VALID} imported" in into_5.stdout  # chat 5's own copy, not "unchanged"
    only = _cli(args, database_url, tmp_path, chats="6")  # the only allowed chat
    assert f"{VALID} unchanged" in only.stdout and only.stdout.startswith("chat 6's journal:")
