"""The markdown vault on a real PostgreSQL: a scripted chat (fixed clock, fixed ids) renders
exactly the golden files; incremental writes after each commit equal a rebuild byte for byte;
forgetting leaves the forgotten text in no vault file; only changed files are rewritten.

Regenerate the golden files (after a deliberate change of the format) with
``ENGRAM_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/memory/vault/test_vault_files.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

from vault_chat import CHAT, SECRET, TZ, compaction, day_one, day_two, scripted_chat

from memory.patterns.controls import forget_patterns
from memory.patterns.forgetting import delete_messages_mentioning
from memory.vault.files import sync_folder
from memory.vault.render import render_vault, slug
from memory.vault.settings import chat_folder
from memory.vault.write import read_chat, write_chat
from runtime.db import Database

GOLDEN = Path(__file__).parent / "golden"


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by relative path (hidden ones too)."""
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


async def test_a_scripted_chat_renders_the_golden_files(db: Database, tmp_path: Path) -> None:
    await scripted_chat(db)
    stats = await write_chat(db, tmp_path, CHAT, TZ)
    folder = chat_folder(tmp_path, CHAT)
    got = tree(folder)
    if os.environ.get("ENGRAM_UPDATE_GOLDEN"):
        for old in GOLDEN.rglob("*.md"):
            old.unlink()
        for rel, data in got.items():
            (GOLDEN / rel).parent.mkdir(parents=True, exist_ok=True)
            (GOLDEN / rel).write_bytes(data)
    assert got == tree(GOLDEN)
    assert sorted(got) == [
        "MEMORY.md",
        "daily/2026-03-14.md",
        "daily/2026-03-15.md",
        "patterns/701-prefers-green-tea-over-coffee.md",
        "patterns/702-sister-ana-visits-on-20-march.md",
        "patterns/703-has-a-sister-named-ana.md",
        "patterns/704-drinks-espresso-after-dinner.md",
        "patterns/705-thinks-coffee-helps-focus-really.md",
        "patterns/706-wants-to-sleep-eight-hours-a.md",
    ]
    assert stats.written == len(got) and stats.deleted == 0
    # the untrusted tool result is not shown; the call is a one-line note
    day = got["daily/2026-03-14.md"].decode()
    assert '{"messages": []}' not in day and "tool `recall_conversation`" in day
    # a second write changes nothing
    again = await write_chat(db, tmp_path, CHAT, TZ)
    assert (again.written, again.unchanged, again.deleted) == (0, len(got), 0)


async def test_incremental_writes_after_each_commit_equal_a_rebuild(
    db: Database, tmp_path: Path
) -> None:
    """The writer's path (a digest cache, only changed files written, pages of forgotten
    patterns removed) after each step of the script ends byte-identical to a rebuild."""
    live, rebuilt = tmp_path / "live", tmp_path / "rebuilt"
    known: dict[str, bytes] = {}
    written = []
    for step in (day_one, compaction, day_two):
        await step(db)
        stats = await write_chat(db, live, CHAT, TZ, known=known)
        written.append(stats.written)
    async with db.transaction() as conn:
        await forget_patterns(conn, CHAT, [704], reason="forgotten by the person", actor="person")
    stats = await write_chat(db, live, CHAT, TZ, known=known)
    assert stats.deleted == 1  # 704's page
    assert written[0] == 2 and written[2] < written[1]  # MEMORY.md + day one; then only changes
    await write_chat(db, rebuilt, CHAT, TZ, force=True)
    assert tree(chat_folder(live, CHAT)) == tree(chat_folder(rebuilt, CHAT))
    # the person's own notes in the folder are left alone by a rebuild
    note = chat_folder(rebuilt, CHAT) / "my notes.md"
    note.write_text("mine")
    await write_chat(db, rebuilt, CHAT, TZ, force=True)
    assert note.read_text() == "mine"


async def test_forgetting_removes_the_text_from_every_vault_file(
    db: Database, tmp_path: Path
) -> None:
    await scripted_chat(db)
    known: dict[str, bytes] = {}
    await write_chat(db, tmp_path, CHAT, TZ, known=known)
    folder = chat_folder(tmp_path, CHAT)
    assert any(SECRET in data.decode() for data in tree(folder).values())
    # /forget: the pattern, and (asked) every message that mentions it
    async with db.transaction() as conn:
        await forget_patterns(conn, CHAT, [706], reason="forgotten by the person", actor="person")
        await delete_messages_mentioning(conn, CHAT, SECRET)
    stats = await write_chat(db, tmp_path, CHAT, TZ, known=known)
    files = tree(folder)
    assert stats.deleted == 1 and not any("706-" in rel for rel in files)
    for rel, data in files.items():
        assert SECRET not in data.decode(), rel
        assert "eight hours" not in data.decode(), rel
    # the day of the forget says a memory was forgotten (its audit row), not which
    days = [data.decode() for rel, data in files.items() if rel.startswith("daily/")]
    assert not any("706-" in d for d in days)  # no link to it from its creation's day
    assert sum("#706 (forgotten): forget (active → deprecated)" in d for d in days) == 1


async def test_rendering_is_pure_and_slugs_are_file_safe(db: Database) -> None:
    await scripted_chat(db)
    data = await read_chat(db, CHAT, TZ)
    assert render_vault(data) == render_vault(data)
    assert slug("Ünïcode: café / résumé?!") == "unicode-cafe-resume"
    assert slug("日本語") == "pattern"
    assert slug("../../etc/passwd") == "etc-passwd"


def test_sync_removes_only_vault_files_and_stale_temp_files(tmp_path: Path) -> None:
    sync_folder(
        tmp_path, {"MEMORY.md": "a\n", "patterns/1-x.md": "x\n", "daily/2026-01-01.md": "d\n"}
    )
    (tmp_path / "patterns" / ".1-x.md.tmp-dead").write_text("half")  # a crash's leftover
    (tmp_path / "notes.md").write_text("mine")
    (tmp_path / ".obsidian").mkdir()
    (tmp_path / ".obsidian" / "app.json").write_text("{}")
    assert (tmp_path / "patterns").stat().st_mode & 0o777 == 0o700  # a person's memory
    assert (tmp_path / "MEMORY.md").stat().st_mode & 0o777 == 0o600
    stats = sync_folder(tmp_path, {"MEMORY.md": "b\n"})
    assert (stats.written, stats.deleted) == (1, 2)
    assert tree(tmp_path) == {
        "MEMORY.md": b"b\n",
        "notes.md": b"mine",
        ".obsidian/app.json": b"{}",
    }


async def test_a_chat_with_nothing_left_gets_no_folder_and_loses_its_files(
    db: Database, tmp_path: Path
) -> None:
    """An erased chat (no row left) is not given a folder again by a late write, and a folder
    it still has keeps none of engram's files (the person's own are left)."""
    stats = await write_chat(db, tmp_path, CHAT, TZ)
    assert stats.written == 0 and not chat_folder(tmp_path, CHAT).exists()
    await scripted_chat(db)
    await write_chat(db, tmp_path, CHAT, TZ)
    (chat_folder(tmp_path, CHAT) / "mine.md").write_text("mine")
    for table in ("chat_messages", "episodes", "pattern_audit", "patterns"):
        await db.execute(f"DELETE FROM {table} WHERE chat_id = $1", CHAT)
    await write_chat(db, tmp_path, CHAT, TZ)
    assert tree(chat_folder(tmp_path, CHAT)) == {"mine.md": b"mine"}
