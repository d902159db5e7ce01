"""Undo a supersede (issue 20, row 6): ``/memory restore <id>`` puts a pattern superseded less
than :data:`RESTORE_WINDOW` ago back to active and removes the ``supersedes`` relation, audited
(``restore``, by the person). A forgotten pattern is gone: it is never restored.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import attrs

from memory.patterns.audit import change_status
from runtime.db import Queries

RESTORE_WINDOW = timedelta(hours=24)

_LAST_SUPERSEDE = """
SELECT p.status, p.content, a.other_pattern_id, a.at
FROM patterns p
LEFT JOIN LATERAL (
    SELECT other_pattern_id, at FROM pattern_audit
    WHERE chat_id = p.chat_id AND pattern_id = p.id AND action = 'supersede'
    ORDER BY id DESC LIMIT 1
) a ON true
WHERE p.id = $1 AND p.chat_id = $2
FOR UPDATE OF p
"""

#: a forgotten pattern may be gone with only its audit rows left
_FORGOTTEN = """
SELECT EXISTS (SELECT 1 FROM pattern_audit WHERE chat_id = $1 AND pattern_id = $2
               AND action = 'forget')
"""


@attrs.frozen
class Restored:
    """``pattern_id`` is active again (``content``), no longer superseded by ``by``; or why
    not (``problem``: one line for the person)."""

    pattern_id: int
    content: str = ""
    by: int | None = None
    problem: str = ""


async def restore_superseded(
    conn: Queries, chat_id: int, pattern_id: int, *, now: datetime
) -> Restored:
    """Undo the supersede of one of the chat's patterns (give a transaction's connection)."""
    row = await conn.fetchrow(_LAST_SUPERSEDE, pattern_id, chat_id)
    if row is None or row["status"] == "deprecated":
        forgotten = row is not None or await conn.fetchval(_FORGOTTEN, chat_id, pattern_id)
        word = "was forgotten: that is final" if forgotten else "not found"
        return Restored(pattern_id, problem=f"Memory #{pattern_id} {word}.")
    status = str(row["status"])
    if status != "superseded" or row["at"] is None:
        return Restored(
            pattern_id,
            problem=f"Memory #{pattern_id} was not replaced: "
            "only a replaced memory can be restored.",
        )
    if now - row["at"] > RESTORE_WINDOW:
        return Restored(
            pattern_id,
            problem=f"Memory #{pattern_id} was replaced more than "
            "24 hours ago: it can no longer be restored.",
        )
    by = None if row["other_pattern_id"] is None else int(row["other_pattern_id"])
    reason = "restored by the person" + ("" if by is None else f" (undoes the supersede by #{by})")
    await change_status(
        conn,
        chat_id,
        pattern_id,
        "active",
        action="restore",
        actor="person",
        reason=reason,
        allowed_from=("superseded",),
        other_id=by,
    )
    await conn.execute(
        "DELETE FROM pattern_relations WHERE chat_id = $1 AND to_pattern_id = $2 "
        "AND relation = 'supersedes'",
        chat_id,
        pattern_id,
    )
    return Restored(pattern_id, str(row["content"]), by)
