"""A whole chat erased (issue 24 item 5), on a real PostgreSQL: every table with a ``chat_id``
column is read from the catalogue, filled for two chats, one chat erased: none of those tables
holds a row of it, the other chat keeps every row; its vault folder is gone; the order of the
DELETEs suits the foreign keys; a table added later (by a migration) is covered unchanged; a
failed erase changes nothing; a turn committing after the erase writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from erase_fill import fill, message

from actors.queues import erased, outbox
from memory.erase.chat import (
    ForeignKey,
    Step,
    chat_tables,
    count_chat_rows,
    erase_chat,
    erase_order,
    erase_plan,
)
from runtime.db import Connection, Database
from runtime.errors import DatabaseError

CHAT, OTHER = 5501, 5502


async def counts(db: Database, chat: int) -> dict[str, int]:
    return {t: n for t, n in (await count_chat_rows(db, chat)).items()}


async def test_erase_leaves_no_row_of_the_chat_in_any_table_with_chat_id(
    db: Database, tmp_path: Path
) -> None:
    tables = await chat_tables(db)
    assert {"inbox", "outbox", "api_usage", "cron_jobs", "callback_tokens", "allowed_chats"} <= set(
        tables
    )
    await fill(db, CHAT)
    await fill(db, OTHER)
    before, other_before = await counts(db, CHAT), await counts(db, OTHER)
    # the test fills every table the catalogue lists: a new one must be filled here too
    assert sorted(before) == tables
    assert sorted(other_before) == tables
    folder, other_folder = tmp_path / str(CHAT), tmp_path / str(OTHER)
    for f in (folder, other_folder):
        (f / "patterns").mkdir(parents=True)
        (f / "MEMORY.md").write_text("Lisbon")
    done = await erase_chat(db, CHAT, folder=folder)
    assert done is not None and done.folder_removed
    assert done.rows == before  # every row counted, per table
    for table in tables:
        n = await db.fetchval(f'SELECT count(*) FROM "{table}" WHERE chat_id = $1', CHAT)
        assert n == 0, table
    assert await counts(db, OTHER) == other_before
    assert not folder.exists()
    assert (other_folder / "MEMORY.md").read_text() == "Lisbon"
    again = await erase_chat(db, CHAT, folder=folder)  # nothing left: nothing to do
    assert again is not None and again.rows == {} and not again.folder_removed


async def test_a_table_added_later_is_erased_too(db: Database) -> None:
    await db.execute(
        "CREATE TABLE later_notes (id BIGSERIAL PRIMARY KEY, chat_id BIGINT NOT NULL, t TEXT)"
    )
    await db.execute(
        "CREATE TABLE later_marks (note_id BIGINT NOT NULL REFERENCES later_notes(id), m TEXT)"
    )  # no chat_id, and NO ACTION: its rows must go before the notes they point at
    for chat in (CHAT, OTHER):
        nid = await db.fetchval(
            "INSERT INTO later_notes (chat_id, t) VALUES ($1, 'x') RETURNING id", chat
        )
        await db.execute("INSERT INTO later_marks (note_id, m) VALUES ($1, 'y')", nid)
    done = await erase_chat(db, CHAT)
    assert done is not None and done.rows == {"later_marks": 1, "later_notes": 1}
    assert await db.fetchval("SELECT count(*) FROM later_notes") == 1
    assert await db.fetchval("SELECT count(*) FROM later_marks") == 1


async def test_children_go_before_their_parents_and_the_producers_first(db: Database) -> None:
    steps = [s.table for s in await erase_plan(db)]
    assert steps[:2] == ["cron_jobs", "erase_requests"]
    assert steps[-1] == "compaction_runs"
    for child, parent in (
        ("pattern_embeddings", "patterns"),
        ("alias_embeddings", "pattern_aliases"),
        ("pattern_aliases", "patterns"),
        ("episode_embeddings", "episodes"),
        ("entry_embeddings", "entries"),
    ):
        assert steps.index(child) < steps.index(parent), (child, parent)
    fk = ForeignKey("b", "a", ("a_id",), ("id",))
    assert erase_order(["a", "b"], [fk]) == [Step("b"), Step("a")]
    outside = ForeignKey("c", "a", ("a_id",), ("id",))  # c has no chat_id
    assert erase_order(["a"], [outside]) == [Step("c", outside), Step("a")]


async def test_a_failed_erase_changes_nothing(db: Database, tmp_path: Path) -> None:
    await fill(db, CHAT)
    before = await counts(db, CHAT)
    folder = tmp_path / str(CHAT)
    folder.mkdir()

    async def boom(conn: Connection, rows: dict[str, int]) -> None:
        assert rows["chat_messages"] == 1
        raise RuntimeError("after the deletes")

    with pytest.raises(RuntimeError):
        await erase_chat(db, CHAT, folder=folder, then=boom)
    assert await counts(db, CHAT) == before
    assert folder.exists()

    async def no(conn: Connection) -> bool:
        return False

    assert await erase_chat(db, CHAT, folder=folder, check=no) is None
    assert await counts(db, CHAT) == before and folder.exists()


async def test_a_turn_committing_after_the_erase_writes_nothing(db: Database) -> None:
    """A turn in flight when ``engram memory erase`` commits: its commit is refused whole."""
    inbox_id = await message(db, CHAT, 9)
    await erase_chat(db, CHAT)
    late = (
        "INSERT INTO chat_messages (chat_id, role, content) VALUES ($1, 'user', 'late')",
        (CHAT,),
    )
    with pytest.raises(DatabaseError) as caught:
        await outbox.commit_turn(
            db, chat_id=CHAT, text="reply", inbox_ids=[inbox_id], before=[late], claim=True
        )
    assert caught.value.sqlstate == erased.ERASED_SQLSTATE
    async with db.transaction() as conn:
        with pytest.raises(DatabaseError) as again:
            await erased.require_rows(conn, CHAT, [inbox_id])
    assert again.value.sqlstate == erased.ERASED_SQLSTATE
    assert await count_chat_rows(db, CHAT) == {}
    # a live row passes: the fence changes nothing for a chat not erased
    live = await message(db, OTHER, 10)
    row = await outbox.commit_turn(db, chat_id=OTHER, text="ok", inbox_ids=[live], before=[])
    assert row.text == "ok"
