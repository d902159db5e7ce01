"""Browsing a chat's patterns by kind and status, a page at a time (the dashboard's list)."""

from __future__ import annotations

import pytest

from memory.patterns.browse import browse_patterns
from runtime.db import Database

CHAT, OTHER = 71, 72


async def add(db: Database, chat: int, content: str, kind: str, status: str, day: int) -> int:
    return int(
        await db.fetchval(
            "INSERT INTO patterns (chat_id, content, kind, status, canonical_hash, first_seen,"
            " last_seen) VALUES ($1, $2, $3, $4, md5($2), now(), now() - make_interval(days => $5))"
            " RETURNING id",
            chat,
            content,
            kind,
            status,
            day,
        )
    )


async def test_filters_pages_and_counts(db: Database) -> None:
    ids = [await add(db, CHAT, f"fact {i}", "fact", "active", i) for i in range(5)]
    old = await add(db, CHAT, "old goal", "goal", "superseded", 9)
    await add(db, OTHER, "someone else's", "fact", "active", 0)
    page = await browse_patterns(db, CHAT, limit=3)
    assert [i.id for i in page.items] == ids[:3] and page.more  # most recently seen first
    assert page.counts == {"active": 5, "superseded": 1}
    rest = await browse_patterns(db, CHAT, offset=3, limit=3)
    assert [i.id for i in rest.items] == [ids[3], ids[4], old] and not rest.more
    goals = await browse_patterns(db, CHAT, kind="goal")
    assert [i.id for i in goals.items] == [old] and goals.counts == {"superseded": 1}
    superseded = await browse_patterns(db, CHAT, status="superseded")
    assert [i.status for i in superseded.items] == ["superseded"]
    with pytest.raises(ValueError, match="unknown status"):
        await browse_patterns(db, CHAT, status="gone")
