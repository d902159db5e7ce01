"""The vault writer's incremental writes on a real PostgreSQL: after every step of a randomized
script interleaving changes (messages on several days, tool rows, new, reinforced, pinned,
superseded, disputed, merged, forgotten patterns, evidence, relations, episodes, a /forget of a
message), the folder equals a fresh ``engram vault rebuild`` byte for byte; a turn's write
touches only the days that got messages; a failed write is caught up by the next one; the
sweep's whole write catches a change made in place."""

from __future__ import annotations

import random
import shutil
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from vault_chat import CHAT, SECRET, TZ, add_message, at, scripted_chat

from memory.patterns.audit import change_status, set_pin
from memory.patterns.controls import forget_patterns, merge_two
from memory.patterns.forgetting import delete_messages_mentioning
from memory.patterns.relations import add_relation, supersede_pattern
from memory.vault.incremental import ChatState, write_chat_incremental
from memory.vault.render import local_day
from memory.vault.settings import chat_folder
from memory.vault.write import write_chat
from runtime.db import Database

Step = Callable[[Database, random.Random], Awaitable[str]]


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by relative path (hidden ones too)."""
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


WORDS = [
    "tea",
    "coffee",
    "walk",
    "sister",
    "Ana",
    "Lisbon",
    "sleep",
    "book",
    "garden",
    "run",
    "train",
    "dinner",
]


class Ids:
    """Fixed ids above the scripted chat's."""

    message = 2000
    pattern = 800
    audit = 9100


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))).capitalize() + "."


async def _patterns(db: Database, status: str = "active") -> list[int]:
    rows = await db.fetch(
        "SELECT id FROM patterns WHERE chat_id = $1 AND status = $2 ORDER BY id", CHAT, status
    )
    return [r["id"] for r in rows]


async def messages(db: Database, rng: random.Random) -> str:
    """A turn: user and assistant rows (some with a tool call and its result) on 1-3 days,
    old ones included."""
    for _ in range(rng.randint(1, 3)):
        when = at(rng.randint(1, 5), rng.randint(0, 23), rng.randint(0, 59))
        Ids.message += 3
        await add_message(db, Ids.message, "user", _text(rng), when)
        if rng.random() < 0.3:
            call: dict[str, object] = {"id": "call-1", "name": "recall", "input": {"q": "tea"}}
            await add_message(db, Ids.message + 1, "assistant", "", when, calls=[call])
            await add_message(db, Ids.message + 2, "tool_result", "{}", when)
        else:
            await add_message(db, Ids.message + 1, "assistant", _text(rng), when)
    return "messages"


async def new_pattern(db: Database, rng: random.Random) -> str:
    Ids.pattern += 1
    when = at(rng.randint(1, 5), 12, 0)
    await db.execute(
        "INSERT INTO patterns (id, chat_id, content, kind, confidence, strength, status, "
        "canonical_hash, first_seen, last_seen, created_at) "
        "VALUES ($1, $2, $3, $4, 0.6, 1.0, 'active', $5, $6, $6, $6)",
        Ids.pattern,
        CHAT,
        _text(rng),
        rng.choice(["fact", "preference", "goal", "belief"]),
        f"h{Ids.pattern}",
        when,
    )
    await db.execute(
        "INSERT INTO pattern_observations (pattern_id, chat_id, evidence, observed_at) "
        "VALUES ($1, $2, $3, $4)",
        Ids.pattern,
        CHAT,
        _text(rng),
        when,
    )
    return "pattern"


async def reinforce(db: Database, rng: random.Random) -> str:
    ids = await _patterns(db)
    if not ids:
        return "none"
    pid, when = rng.choice(ids), at(rng.randint(1, 5), 15, 30)
    await db.execute(
        "INSERT INTO pattern_observations (pattern_id, chat_id, evidence, observed_at) "
        "VALUES ($1, $2, $3, $4)",
        pid,
        CHAT,
        _text(rng),
        when,
    )
    await db.execute(
        "UPDATE patterns SET strength = strength + 0.1, times_seen = times_seen + 1, "
        "last_seen = greatest(last_seen, $3), updated_at = now() WHERE chat_id = $1 AND id = $2",
        CHAT,
        pid,
        when,
    )
    return "reinforce"


async def status(db: Database, rng: random.Random) -> str:
    ids = await _patterns(db)
    if len(ids) < 2:
        return "none"
    a, b = rng.sample(ids, 2)
    async with db.transaction() as conn:
        match rng.choice(["supersede", "dispute", "merge", "pin", "relate"]):
            case "supersede":
                await supersede_pattern(conn, a, b, CHAT, "changed", actor="compaction")
            case "dispute":
                await change_status(
                    conn, CHAT, a, "disputed", action="dispute", actor="person", reason="no"
                )
            case "merge":  # the survivor takes the other's evidence and relations
                await merge_two(conn, CHAT, a, b, actor="person")
            case "pin":
                await set_pin(conn, CHAT, a, True, actor="person", reason="pinned")
            case _:
                await add_relation(conn, CHAT, a, b, rng.choice(["supports", "causes"]))
    return "status"


async def forget(db: Database, rng: random.Random) -> str:
    ids = await _patterns(db) + await _patterns(db, "superseded")
    if not ids:
        return "none"
    async with db.transaction() as conn:
        await forget_patterns(conn, CHAT, [rng.choice(ids)], reason="forgotten", actor="person")
    return "forget"


async def forget_message(db: Database, rng: random.Random) -> str:
    async with db.transaction() as conn:
        await delete_messages_mentioning(conn, CHAT, rng.choice(WORDS))
    return "forget_message"


async def episode(db: Database, rng: random.Random) -> str:
    start = at(rng.randint(1, 5), 20, 0)
    await db.execute(
        "INSERT INTO episodes (chat_id, summary, started_at, ended_at, message_count) "
        "VALUES ($1, $2, $3, $4, 4)",
        CHAT,
        _text(rng),
        start,
        start + timedelta(hours=1),
    )
    return "episode"


STEPS: list[Step] = [
    *[messages] * 5,
    new_pattern,
    reinforce,
    status,
    status,
    forget,
    forget_message,
    episode,
]


def _days_of_last_messages(rows: Iterable[datetime]) -> set[str]:
    return {f"daily/{local_day(TZ, r).isoformat()}.md" for r in rows}


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_interleaved_changes_written_incrementally_equal_a_rebuild(
    db: Database, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    await scripted_chat(db)
    live = tmp_path / "live"
    state = ChatState()
    await write_chat_incremental(db, live, CHAT, TZ, state)
    folder = chat_folder(live, CHAT)
    script = [*STEPS, *STEPS] + [rng.choice(STEPS) for _ in range(10)]
    rng.shuffle(script)  # every kind of change, twice at least, in a random order
    kinds = []
    for n, step in enumerate(script):
        memory_inode = (folder / "MEMORY.md").stat().st_ino
        before = tree(folder)
        last = Ids.message
        kind = await step(db, rng)
        kinds.append(kind)
        await write_chat_incremental(db, live, CHAT, TZ, state)
        rebuilt = tmp_path / f"rebuilt-{n}"
        await write_chat(db, rebuilt, CHAT, TZ, force=True)
        assert tree(folder) == tree(chat_folder(rebuilt, CHAT)), (n, kind)
        assert state.whole_writes == 1, (n, kind)  # every step after the first: incremental
        if kind == "messages":  # a turn: only its days' pages were written
            rows = await db.fetch(
                "SELECT created_at FROM chat_messages WHERE chat_id = $1 AND id > $2", CHAT, last
            )
            days = _days_of_last_messages([r["created_at"] for r in rows])
            after = tree(folder)
            changed = {rel for rel in after if before.get(rel) != after[rel]}
            assert changed and changed <= days, n
            assert (folder / "MEMORY.md").stat().st_ino == memory_inode
        if kind == "reinforce":  # MEMORY.md, the pattern's page, the days that show it
            after = tree(folder)
            changed = {rel for rel in after if before.get(rel) != after[rel]}
            pages = {rel for rel in changed if rel.startswith("patterns/")}
            assert "MEMORY.md" in changed and len(pages) == 1, n
            assert changed <= {"MEMORY.md", *pages} | {r for r in after if "daily/" in r}
    assert {"messages", "pattern", "reinforce", "forget", "forget_message", "status"} <= set(kinds)


async def test_forgetting_reaches_the_incremental_vault(db: Database, tmp_path: Path) -> None:
    await scripted_chat(db)
    state = ChatState()
    await write_chat_incremental(db, tmp_path, CHAT, TZ, state)
    await add_message(db, 3001, "user", "Still want to sleep eight hours.", at(3, 9, 0))
    await write_chat_incremental(db, tmp_path, CHAT, TZ, state)  # a turn: the fast path
    folder = chat_folder(tmp_path, CHAT)
    assert SECRET in (folder / "daily/2026-03-16.md").read_text()
    async with db.transaction() as conn:
        await forget_patterns(conn, CHAT, [706], reason="forgotten", actor="person")
        await delete_messages_mentioning(conn, CHAT, SECRET)
    await write_chat_incremental(db, tmp_path, CHAT, TZ, state)
    for rel, data in tree(folder).items():
        assert SECRET not in data.decode() and "eight hours" not in data.decode(), rel


async def test_a_failed_write_is_caught_up_by_the_next(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await scripted_chat(db)
    state = ChatState()
    await write_chat_incremental(db, tmp_path / "live", CHAT, TZ, state)

    def full_disk(*args: object, **kwargs: object) -> object:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("memory.vault.incremental.write_files", full_disk)
    await add_message(db, 3001, "user", "A new day.", at(4, 9, 0))
    with pytest.raises(OSError):
        await write_chat_incremental(db, tmp_path / "live", CHAT, TZ, state)
    assert state.signature is None  # the next write is a whole one
    monkeypatch.undo()
    await add_message(db, 3002, "user", "Another one.", at(5, 9, 0))
    stats = await write_chat_incremental(db, tmp_path / "live", CHAT, TZ, state)
    assert stats.unchanged > 0  # the whole chat was compared, not only the new day
    await write_chat(db, tmp_path / "rebuilt", CHAT, TZ, force=True)
    live, rebuilt = (
        tree(chat_folder(tmp_path / "live", CHAT)),
        tree(chat_folder(tmp_path / "rebuilt", CHAT)),
    )
    assert live == rebuilt and "daily/2026-03-17.md" in live


async def test_the_sweeps_whole_write_catches_a_change_made_in_place(
    db: Database, tmp_path: Path
) -> None:
    """A photo's description is added to its message after the turn's commit (no new row):
    the sweep's whole write (``full_due``) shows it."""
    await scripted_chat(db)
    state = ChatState()
    await write_chat_incremental(db, tmp_path, CHAT, TZ, state)
    await db.execute(
        "UPDATE chat_messages SET content = content || ' — a cup of green tea' "
        "WHERE chat_id = $1 AND id = 1007",
        CHAT,
    )
    state.full_due = True
    stats = await write_chat_incremental(db, tmp_path, CHAT, TZ, state)
    assert stats.written == 1 and not state.full_due
    day = (chat_folder(tmp_path, CHAT) / "daily/2026-03-15.md").read_text()
    assert "a cup of green tea" in day


async def test_an_erased_chat_gets_no_folder_again(db: Database, tmp_path: Path) -> None:
    """The chat erased (every row, then its folder): the writer's next write makes nothing."""
    await scripted_chat(db)
    state = ChatState()
    await write_chat_incremental(db, tmp_path, CHAT, TZ, state)
    folder = chat_folder(tmp_path, CHAT)
    assert (folder / "MEMORY.md").exists()
    for table in ("chat_messages", "episodes", "pattern_audit", "patterns"):
        await db.execute(f"DELETE FROM {table} WHERE chat_id = $1", CHAT)
    (folder / "mine.md").write_text("mine")
    await write_chat_incremental(db, tmp_path, CHAT, TZ, state)
    assert tree(folder) == {"mine.md": b"mine"}  # engram's files gone, the person's kept
    shutil.rmtree(folder)
    await write_chat_incremental(db, tmp_path, CHAT, TZ, state)
    assert not folder.exists()
