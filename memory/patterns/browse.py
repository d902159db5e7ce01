"""Browsing a chat's patterns by kind and status (the dashboard's memory page): the newest
first, a page at a time, and how many there are of each status."""

from __future__ import annotations

from typing import Any

import attrs

from memory.patterns.views import STATUSES, Item
from runtime.db import Queries

PAGE = 50

_BROWSE = """
SELECT id, kind, content, status, is_core_tenet, occurs_on, occurs_at, strength * confidence AS w
FROM patterns
WHERE chat_id = $1 AND ($2::text IS NULL OR kind = $2) AND ($3::text IS NULL OR status = $3)
ORDER BY last_seen DESC, id DESC
LIMIT $4 OFFSET $5
"""
_COUNTS = """
SELECT status, count(*) AS n FROM patterns
WHERE chat_id = $1 AND ($2::text IS NULL OR kind = $2)
GROUP BY status
"""


@attrs.frozen
class Browse:
    """One page of patterns and the counts by status (of the kind asked, if any)."""

    items: tuple[Item, ...]
    counts: dict[str, int]
    offset: int
    more: bool


def _item(r: Any) -> Item:
    return Item(
        int(r["id"]),
        str(r["kind"]),
        str(r["content"]),
        str(r["status"]),
        bool(r["is_core_tenet"]),
        r["occurs_on"],
        r["occurs_at"],
        float(r["w"]),
    )


async def browse_patterns(
    db: Queries,
    chat_id: int,
    *,
    kind: str | None = None,
    status: str | None = None,
    offset: int = 0,
    limit: int = PAGE,
) -> Browse:
    """A page of the chat's patterns (``kind``/``status``: only those), most recently seen
    first, each with its weight (strength x confidence) as the score."""
    if status is not None and status not in STATUSES:
        raise ValueError(f"unknown status {status!r}")
    rows = await db.fetch(_BROWSE, chat_id, kind, status, limit + 1, max(0, offset))
    counts = {str(r["status"]): int(r["n"]) for r in await db.fetch(_COUNTS, chat_id, kind)}
    return Browse(tuple(_item(r) for r in rows[:limit]), counts, max(0, offset), len(rows) > limit)
