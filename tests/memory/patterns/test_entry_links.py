"""Tool-loop pattern ↔ entry links (memory.patterns.entry_links): the citation rule and the
upsert."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta

from memory.patterns.entry_links import (
    TOOL_LOOP_CONFIDENCE,
    ToolExchange,
    cited_entries,
    date_forms,
    link_turn,
    record_tool_loop_links,
)
from runtime.db import Database

NOW = datetime(2026, 10, 3, 12, 0, tzinfo=UTC)
U1 = "0a1b2c3d4e5f60718293a4b5c6d7e8f9"
U2 = "1b2c3d4e5f60718293a4b5c6d7e8f90a"
U3 = "2c3d4e5f60718293a4b5c6d7e8f90a1b"


def search(*items: dict[str, object]) -> ToolExchange:
    return ToolExchange("search_entries", {"query": "sleep"}, {"results": list(items)})


def item(uuid: str, day: str, snippet: str) -> dict[str, object]:
    return {"uuid": uuid, "date": day, "time": "08:00", "tags": [], "snippet": snippet}


# --- the citation rule --------------------------------------------------------------------


def test_search_results_are_not_cited_unless_the_answer_uses_them() -> None:
    calls = [
        search(
            item(U1, "2024-03-05", "Slept badly again after the late espresso with Odei"),
            item(U2, "2024-03-09", "Long walk by the river, felt calm all afternoon"),
            item(U3, "2024-04-01", "Meeting notes, nothing personal"),
        )
    ]
    assert cited_entries(calls, "I could not find much about that.") == ()
    quoted = "You wrote that you slept badly again after the late espresso."
    assert cited_entries(calls, quoted) == (U1,)
    by_date = "On 9 March 2024 you took a long walk; and on March 5 you slept badly."
    assert cited_entries(calls, by_date) == (U1, U2)
    assert cited_entries(calls, f"See entry {U3[:8]}.") == (U3,)
    assert cited_entries(calls, "Four words: late espresso with Odei") == ()  # < 5 words


def test_a_date_shared_by_two_results_cites_neither() -> None:
    calls = [search(item(U1, "2024-03-05", "morning run"), item(U2, "2024-03-05", "evening beer"))]
    assert cited_entries(calls, "On 2024-03-05 you wrote twice.") == ()
    assert cited_entries(calls, "On 2024-03-055 ...") == ()


def test_get_entry_is_a_citation_errors_are_not() -> None:
    opened = ToolExchange(
        "get_entry", {"uuid": U2}, json.dumps({"uuid": U2, "date": "2024-03-09", "text": "x"})
    )
    failed = ToolExchange("get_entry", {"uuid": U3}, {"uuid": U3}, is_error=True)
    listing = ToolExchange(
        "get_entries_by_date", {}, {"entries": [{"uuid": U1, "date": "2024-03-05", "text": "y"}]}
    )
    other = ToolExchange("log_weight", {"kg": 80}, {"uuid": U1, "date": "2024-03-05"})
    assert cited_entries([opened, failed, listing, other], "Nothing specific.") == (U2,)
    assert cited_entries([listing, opened], "That was 2024-03-05.") == (U2, U1)
    assert cited_entries([ToolExchange("get_entry", {}, "not json")], "x") == ()


def test_date_forms() -> None:
    assert date_forms(date(2024, 3, 5)) == (
        "2024-03-05",
        "5 march 2024",
        "march 5, 2024",
        "march 5",
        "5 march",
    )


# --- the upsert -----------------------------------------------------------------------------


async def add_entry(db: Database, uuid: str, chat_id: int = 1) -> None:
    await db.execute(
        "INSERT INTO entries (uuid, created_at, text, chat_id) VALUES ($1, $2, 'text', $3)",
        uuid,
        NOW,
        chat_id,
    )


async def add_pattern(db: Database, chat_id: int, status: str = "active") -> int:
    pid: int = await db.fetchval(
        "INSERT INTO patterns (chat_id, content, status, canonical_hash, first_seen, last_seen)"
        " VALUES ($1, 'p', $2, md5(random()::text), $3, $3) RETURNING id",
        chat_id,
        status,
        NOW,
    )
    return pid


async def links(db: Database) -> dict[tuple[int, str], tuple[str, float, int, datetime]]:
    rows = await db.fetch(
        "SELECT pattern_id, entry_uuid, source, confidence, times_linked, last_linked_at, chat_id"
        " FROM pattern_entries"
    )
    return {
        (r["pattern_id"], r["entry_uuid"]): (
            r["source"],
            r["confidence"],
            r["times_linked"],
            r["last_linked_at"],
        )
        for r in rows
    }


async def test_tool_loop_links_insert_then_bump(db: Database) -> None:
    for u in (U1, U2):
        await add_entry(db, u)
    p1, p2 = await add_pattern(db, 1), await add_pattern(db, 1)
    assert await record_tool_loop_links(db, 1, [p1, p2], [U1], now=NOW) == 2
    got = await links(db)
    assert got == {
        (p1, U1): ("tool_loop", TOOL_LOOP_CONFIDENCE, 1, NOW),
        (p2, U1): ("tool_loop", TOOL_LOOP_CONFIDENCE, 1, NOW),
    }
    later = NOW + timedelta(days=2)
    assert await record_tool_loop_links(db, 1, [p1], [U1, U2], now=later) == 2
    got = await links(db)
    assert got[(p1, U1)] == ("tool_loop", TOOL_LOOP_CONFIDENCE, 2, later)
    assert got[(p1, U2)] == ("tool_loop", TOOL_LOOP_CONFIDENCE, 1, later)
    assert got[(p2, U1)][2] == 1  # not part of this turn: untouched
    # an older replay never moves last_linked_at back
    await record_tool_loop_links(db, 1, [p1], [U1], now=NOW)
    assert (await links(db))[(p1, U1)][2:] == (3, later)


async def test_compaction_link_is_never_downgraded(db: Database) -> None:
    await add_entry(db, U1)
    p = await add_pattern(db, 1)
    await db.execute(
        "INSERT INTO pattern_entries (pattern_id, entry_uuid, chat_id, source, confidence,"
        " times_linked, last_linked_at) VALUES ($1, $2, 1, 'compaction', 0.9, 3, $3)",
        p,
        U1,
        NOW,
    )
    later = NOW + timedelta(hours=1)
    assert await record_tool_loop_links(db, 1, [p], [U1], now=later) == 1
    assert (await links(db))[(p, U1)] == ("compaction", 0.9, 4, later)
    # a low-confidence compaction link is not "raised" to a tool-loop one either
    await db.execute("UPDATE pattern_entries SET confidence = 0.1")
    await record_tool_loop_links(db, 1, [p], [U1], now=later)
    assert (await links(db))[(p, U1)][:2] == ("compaction", 0.1)


async def test_links_stay_in_the_chat_and_need_real_entries(db: Database) -> None:
    await add_entry(db, U1)
    await add_entry(db, U2, chat_id=2)  # another chat's entry: never linked from chat 1
    mine = await add_pattern(db, 1)
    theirs = await add_pattern(db, 2)
    dead = await add_pattern(db, 1, status="superseded")
    disputed = await add_pattern(db, 1, status="disputed")
    n = await record_tool_loop_links(db, 1, [mine, theirs, dead, disputed], [U1, U2, "invented"])
    assert n == 2
    assert set(await links(db)) == {(mine, U1), (disputed, U1)}
    chats = await db.fetch("SELECT DISTINCT chat_id FROM pattern_entries")
    assert [r["chat_id"] for r in chats] == [1]
    assert await record_tool_loop_links(db, 1, [], [U1]) == 0
    assert await record_tool_loop_links(db, 1, [mine], []) == 0


async def test_link_turn(db: Database) -> None:
    for u in (U1, U2):
        await add_entry(db, u, chat_id=7)
    p = await add_pattern(db, 7)
    calls = [search(item(U1, "2024-03-05", "a"), item(U2, "2024-03-09", "b"))]
    assert await link_turn(db, 7, [p], calls, "Nothing to do with those.", now=NOW) == 0
    assert await link_turn(db, 7, [p], calls, "On 9 March 2024 you walked.", now=NOW) == 1
    assert set(await links(db)) == {(p, U2)}
