"""Each chat owns its journal (issue 20, row 4): every journal tool in chat B sees none of chat
A's entries; imports go to one chat; entries from before migration 012 go to the first allowed
chat, which is logged. On the real PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from fakes.journal import add_entry, call, call_error, make_ctx
from fakes.memory import DIMS, MODEL, FakeEmbedder, bag_of_words
from structlog.testing import capture_logs

from actors.journal_owner import (
    JournalChatError,
    assign_unowned_entries,
    chat_order,
    import_chat,
)
from actors.telegram.access import allow_chat
from memory.embeddings.reembed import reembed
from memory.embeddings.store import backfill_once
from memory.journal.dayone import import_dayone
from memory.journal.tools import JOURNAL_TOOLS
from memory.llm.usage import log_api_usage
from memory.patterns.entry_links import record_tool_loop_links
from memory.patterns.why import explain
from runtime.db import Database
from runtime.migrate import apply_migrations, load_migrations
from runtime.schema_layout import NO_CHAT

A, B = 1001, 1002
SECRET = "lighthouse"  # a word only chat A's journal holds
NOW = datetime(2024, 6, 15, 10, 0, tzinfo=UTC)


def rows_of(records: Any) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in records]


def texts(result: Any) -> str:
    return repr(result).lower()


async def two_journals(db: Database) -> None:
    """Chat A: two entries on 10 March (tag ``secret``, city Oslo) about the lighthouse; chat B:
    one entry on 10 March about the park. Each with its vector."""
    await add_entry(
        db,
        "A-1",
        "2024-03-10T09:00",
        f"The {SECRET} keeper told me the blue door code",
        tags=["secret"],
        city="Oslo",
        chat_id=A,
    )
    await add_entry(
        db,
        "A-2",
        "2023-03-10T09:00",
        f"Visited the old {SECRET} by the fjord again",
        tags=["secret", "travel"],
        city="Oslo",
        chat_id=A,
    )
    await add_entry(
        db,
        "B-1",
        "2024-03-10T08:00",
        "Walked the dog in the park, sunny morning",
        tags=["dog"],
        city="Madrid",
        chat_id=B,
    )


# --- the rules ---------------------------------------------------------------------------------


def test_first_allowed_chat_is_the_settings_private_chat_then_the_earliest_stored() -> None:
    assert chat_order({-100500, 42, 7}, [9, 42, 3]) == [7, 42, -100500, 9, 3]
    assert chat_order(set(), [9, 3, 9]) == [9, 3]
    assert chat_order(set(), []) == []


def test_import_chat_rule() -> None:
    assert import_chat(None, [5]) == 5
    assert import_chat(6, [5, 6]) == 6
    with pytest.raises(JournalChatError, match=r"several chats are allowed \(5, 6\).*--chat"):
        import_chat(None, [6, 5])
    with pytest.raises(JournalChatError, match="chat 7 is not allowed"):
        import_chat(7, [5, 6])
    with pytest.raises(JournalChatError, match="no chat is allowed yet"):
        import_chat(None, [])


# --- every tool, from chat B -------------------------------------------------------------------

#: every journal tool, each exercised below in chat B against chat A's journal
CHECKED = {
    "search_entries",
    "get_entry",
    "get_entries_by_date",
    "on_this_day",
    "find_similar",
    "list_tags",
    "entry_stats",
    "log_weight",
    "weight_history",
    "get_usage",
}


def test_every_journal_tool_is_checked_across_chats() -> None:
    assert {t.name for t in JOURNAL_TOOLS} == CHECKED


async def test_chat_b_sees_none_of_chat_as_journal_through_any_tool(db: Database) -> None:
    await two_journals(db)
    a, b = make_ctx(db, chat_id=A), make_ctx(db, chat_id=B)

    # search: by words and meaning (the index arm), with filters (the exact arm), by tag, city
    for raw in (
        {"query": SECRET},
        {"query": f"{SECRET} keeper blue door"},
        {"query": SECRET, "date_from": "2023-01-01", "date_to": "2024-12-31"},
        {"query": SECRET, "tags": ["secret"]},
        {"query": SECRET, "city": "Oslo"},
    ):
        mine = await call(a, "search_entries", **raw)
        assert {r["uuid"] for r in mine["results"]} == {"A-1", "A-2"}, raw
        theirs = await call(b, "search_entries", **raw)
        assert all(r["uuid"] == "B-1" for r in theirs["results"]), (raw, theirs)
        assert SECRET not in texts(theirs["results"]), raw
    walk = await call(b, "search_entries", query="walked the dog")
    assert [r["uuid"] for r in walk["results"]] == ["B-1"]

    # by id
    assert (await call(a, "get_entry", uuid="A-1"))["uuid"] == "A-1"
    err = await call_error(b, "get_entry", {"uuid": "A-1"})
    assert "no entry" in texts(err) and SECRET not in texts(err)

    # by date, on this day
    by_date = await call(b, "get_entries_by_date", date_from="2023-03-10", date_to="2024-03-10")
    assert [e["uuid"] for e in by_date["entries"]] == ["B-1"] and by_date["total"] == 1
    on_day = await call(b, "on_this_day", month_day="03-10")
    assert [e["uuid"] for e in on_day["entries"]] == ["B-1"]
    assert [e["uuid"] for e in (await call(a, "on_this_day", month_day="03-10"))["entries"]] == [
        "A-1",
        "A-2",
    ]

    # similar: A's entry is not a source in B, nor a result of B's own
    err = await call_error(b, "find_similar", {"uuid": "A-1"})
    assert "no entry" in texts(err)
    similar = await call(b, "find_similar", uuid="B-1")
    assert similar["count"] == 0
    assert [r["uuid"] for r in (await call(a, "find_similar", uuid="A-1"))["results"]] == ["A-2"]

    # tags, stats
    tags = await call(b, "list_tags")
    assert tags["tags"] == [{"tag": "dog", "count": 1}]
    stats = await call(b, "entry_stats")
    assert stats["total_entries"] == 1 and stats["total_words"] == 8
    assert (await call(a, "entry_stats"))["total_entries"] == 2

    # metrics: A's weight is not B's previous reading; spend: A's is not in B's report
    await call(a, "log_weight", weight_kg=81.5, date="2024-06-10")
    logged = await call(b, "log_weight", weight_kg=60.0, date="2024-06-14")
    assert logged["previous"] is None
    history_b = await call(b, "weight_history", date_from="2024-06-01", date_to="2024-06-15")
    assert history_b["readings"] == [{"date": "2024-06-14", "weight_kg": 60.0}]
    history_a = await call(a, "weight_history", date_from="2024-06-01", date_to="2024-06-15")
    assert history_a["readings"] == [{"date": "2024-06-10", "weight_kg": 81.5}]
    await log_api_usage(
        db,
        provider="anthropic",
        model="claude-sonnet-4-5",
        purpose="agent",
        chat_id=A,
        input_tokens=1_000_000,
    )
    usage_b = await call(make_ctx(db, chat_id=B, now=datetime.now(UTC)), "get_usage")
    assert usage_b["calls"] == 0
    usage_a = await call(make_ctx(db, chat_id=A, now=datetime.now(UTC)), "get_usage")
    assert usage_a["calls"] == 1


async def test_the_same_uuid_in_two_chats_is_two_entries(db: Database) -> None:
    await add_entry(db, "SAME", "2024-03-10T09:00", f"A's {SECRET} entry", chat_id=A)
    await add_entry(db, "SAME", "2024-03-10T09:00", "B's park entry", chat_id=B)
    assert SECRET in (await call(make_ctx(db, chat_id=A), "get_entry", uuid="SAME"))["text"]
    got = await call(make_ctx(db, chat_id=B), "get_entry", uuid="SAME")
    assert got["text"] == "B's park entry"


async def test_entry_links_and_why_join_the_chats_own_entry(db: Database) -> None:
    await add_entry(db, "A-1", "2024-03-10T09:00", f"{SECRET} day", chat_id=A)
    pattern = await db.fetchval(
        "INSERT INTO patterns (chat_id, content, canonical_hash, first_seen, last_seen)"
        " VALUES ($1, 'p', 'h', now(), now()) RETURNING id",
        B,
    )
    assert await record_tool_loop_links(db, B, [pattern], ["A-1"]) == 0  # not B's entry
    await db.execute(
        "INSERT INTO pattern_entries (pattern_id, entry_uuid, chat_id) VALUES ($1, 'A-1', $2)",
        pattern,
        B,
    )
    detail = await explain(db, B, pattern)
    assert detail is not None
    [link] = detail.entries
    assert link.entry_uuid == "A-1" and link.entry_date is None  # not B's: shown as gone


# --- imports, vectors ----------------------------------------------------------------------------


def export(text: str) -> dict[str, Any]:
    return {
        "entries": [
            {"uuid": "DAYONE-1", "creationDate": "2024-03-10T09:00:00Z", "text": text},
            {"uuid": "DAYONE-2", "creationDate": "2024-03-11T09:00:00Z", "text": "Rainy day."},
        ]
    }


async def test_an_import_fills_one_chats_journal(db: Database) -> None:
    embedder = FakeEmbedder()
    first = await import_dayone(db, export(f"{SECRET} notes"), chat_id=A, embedder=embedder)
    assert (first.imported, first.embedded) == (2, 2)
    assert {c for _, _, c in embedder.calls} == {A}  # the embedding cost is A's
    other = await import_dayone(db, export("park notes"), chat_id=B, embedder=embedder)
    assert (other.imported, other.updated, other.unchanged) == (2, 0, 0)  # uuids are per chat
    again = await import_dayone(db, export(f"{SECRET} notes"), chat_id=A, embedder=embedder)
    assert (again.imported, again.unchanged) == (0, 2)
    rows = await db.fetch(
        "SELECT e.chat_id, e.text, v.chat_id AS vector_chat FROM entries e "
        "JOIN entry_embeddings v ON v.entry_id = e.id WHERE e.uuid = 'DAYONE-1' ORDER BY 1"
    )
    assert [(r["chat_id"], r["text"], r["vector_chat"]) for r in rows] == [
        (A, f"{SECRET} notes", A),
        (B, "park notes", B),
    ]
    found = await call(make_ctx(db, chat_id=B, embedder=embedder), "search_entries", query=SECRET)
    assert found["count"] == 2 and SECRET not in texts(found["results"])  # B's own two


async def test_backfill_and_reembed_keep_each_vectors_chat(db: Database) -> None:
    await add_entry(db, "A-1", "2024-03-10T09:00", f"{SECRET} day", chat_id=A, embed=False)
    await add_entry(db, "B-1", "2024-03-10T09:00", "park day", chat_id=B, embed=False)
    embedder = FakeEmbedder()
    assert await backfill_once(db, embedder, tables=["entry_embeddings"]) == 2
    query = (
        "SELECT e.uuid, v.chat_id FROM entries e JOIN entry_embeddings v ON v.entry_id = e.id "
        "ORDER BY e.uuid"
    )
    assert rows_of(await db.fetch(query)) == [("A-1", A), ("B-1", B)]
    report = await reembed(db, embedder, tables=["entry_embeddings"], all_rows=True)
    assert report.embedded == {"entry_embeddings": 2}
    assert rows_of(await db.fetch(query)) == [("A-1", A), ("B-1", B)]


# --- migration 012 and the entries from before it ----------------------------------------------


async def old_journal(raw_db: Database) -> None:
    """The schema before 012, with two entries (one with its vector) and one allowed chat."""
    before = [m for m in load_migrations() if m.version < 12]
    await apply_migrations(raw_db, before)
    for uuid, text in (("OLD-1", f"{SECRET} before the upgrade"), ("OLD-2", "second")):
        await raw_db.execute(
            "INSERT INTO entries (uuid, created_at, text) VALUES ($1, $2, $3)", uuid, NOW, text
        )
    await raw_db.execute(
        "INSERT INTO entry_embeddings (entry_id, model, dims, embedding) "
        "SELECT id, $1, $2, $3 FROM entries WHERE uuid = 'OLD-1'",
        MODEL,
        DIMS,
        bag_of_words(f"{SECRET} before the upgrade"),
    )


async def test_migration_012_leaves_old_entries_to_no_chat_until_assigned(
    raw_db: Database,
) -> None:
    await old_journal(raw_db)
    await allow_chat(raw_db, B, "pairing", B)
    await apply_migrations(raw_db)
    owners = await raw_db.fetch("SELECT DISTINCT chat_id FROM entries")
    assert [r["chat_id"] for r in owners] == [NO_CHAT]  # 0 since migration 023
    for chat in (A, B):  # visible to no chat yet
        found = await call(make_ctx(raw_db, chat_id=chat), "search_entries", query=SECRET)
        assert found["count"] == 0
    # start-up: the setting names A, B was paired: the setting's chat is the first allowed
    with capture_logs() as logs:
        assert await assign_unowned_entries(raw_db, {A}) == (2, A)
    [said] = [e for e in logs if e["event"] == "journal.entries_assigned"]
    assert said["message"] == f"assigned 2 journal entries to chat {A} (the first allowed chat)"
    rows = await raw_db.fetch(
        "SELECT e.chat_id, v.chat_id AS vector_chat FROM entries e "
        "LEFT JOIN entry_embeddings v ON v.entry_id = e.id ORDER BY e.uuid"
    )
    assert rows_of(rows) == [(A, A), (A, None)]
    found = await call(make_ctx(raw_db, chat_id=A), "search_entries", query=SECRET)
    assert [r["uuid"] for r in found["results"]] == ["OLD-1"]
    assert (await call(make_ctx(raw_db, chat_id=B), "search_entries", query=SECRET))["count"] == 0
    assert await assign_unowned_entries(raw_db, {A}) == (0, None)  # once


async def test_old_entries_go_to_the_first_paired_chat_or_wait_for_one(raw_db: Database) -> None:
    await old_journal(raw_db)
    await apply_migrations(raw_db)
    with capture_logs() as logs:
        assert await assign_unowned_entries(raw_db, set()) == (0, None)
    assert [e["entries"] for e in logs if e["event"] == "journal.entries_unowned"] == [2]
    await allow_chat(raw_db, B, "pairing", B)
    await raw_db.execute("UPDATE allowed_chats SET allowed_at = allowed_at - interval '1 day'")
    await allow_chat(raw_db, A, "cli")
    # a uuid chat B already has (imported again with --chat meanwhile) keeps B's own copy
    await add_entry(raw_db, "OLD-2", "2024-03-10T09:00", "B's copy", chat_id=B, embed=False)
    with capture_logs() as logs:
        assert await assign_unowned_entries(raw_db, set()) == (1, B)
    assert [e["entries"] for e in logs if e["event"] == "journal.entries_left_unowned"] == [1]
    rows = await raw_db.fetch("SELECT uuid, chat_id, text FROM entries ORDER BY uuid, chat_id")
    assert rows_of(rows) == [
        ("OLD-1", B, f"{SECRET} before the upgrade"),
        ("OLD-2", NO_CHAT, "second"),
        ("OLD-2", B, "B's copy"),
    ]
