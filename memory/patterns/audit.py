"""The audit trail of patterns (seed 000 "Privacy and retention controls"; issue 16 item 4).

Every status change and every pin of a pattern goes through this module, which writes the
change and its ``pattern_audit`` row in one statement (so in the caller's transaction, never
one without the other):

* :func:`change_status` — forget (``deprecated``), merge (``merged``), supersede
  (``superseded``), dispute (``disputed``) and TTL expiry (``deprecated``); only from the
  statuses the caller allows (a merged pattern is never forgotten, a forgotten one never
  forgotten twice: no change, no row);
* :func:`set_pin` — a core tenet pinned or unpinned (``is_core_tenet``, ``pinned_at`` kept from
  the first time); a no-op (already so) writes nothing.

Each row says what (``action``), the status before and after, why (``reason``), who
(``actor``: the person through a command, the model through a tool, compaction, the merge job,
maintenance) and when; ``other_pattern_id`` is the survivor of a merge or the pattern that
superseded this one. :func:`history` reads a pattern's rows, oldest first (``/memory why``,
``engram patterns show``). Everything is scoped to one chat: another chat's id is not found.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

import attrs

from runtime.db import Queries

Actor = Literal["person", "model", "compaction", "merge_job", "maintenance"]
Action = Literal["forget", "merge", "supersede", "dispute", "pin", "unpin", "expire", "restore"]
ACTORS: tuple[Actor, ...] = ("person", "model", "compaction", "merge_job", "maintenance")
#: statuses a pattern may be forgotten, superseded or disputed from
LIVE: tuple[str, ...] = ("active", "disputed")
MAX_REASON_CHARS = 500


@attrs.frozen
class StatusChange:
    """What :func:`change_status` found: the pattern's status before, its text, whether it
    changed (False: it was not in an allowed status)."""

    pattern_id: int
    old_status: str
    content: str
    changed: bool


@attrs.frozen
class AuditRow:
    """One ``pattern_audit`` row."""

    id: int
    pattern_id: int
    action: str
    old_status: str
    new_status: str
    reason: str
    actor: str
    other_pattern_id: int | None
    at: datetime


def clean_reason(reason: str) -> str:
    return " ".join(reason.split())[:MAX_REASON_CHARS] or "(no reason given)"


# $1 pattern, $2 chat, $3 new status, $4 reason, $5 allowed old statuses, $6 action, $7 actor,
# $8 other pattern
_CHANGE = """
WITH old AS (
    SELECT id, status, content FROM patterns WHERE id = $1 AND chat_id = $2 FOR UPDATE
),
up AS (
    UPDATE patterns p SET status = $3, status_reason = $4, updated_at = now()
    FROM old WHERE p.id = old.id AND old.status = ANY($5::text[]) AND old.status <> $3
    RETURNING p.id
),
audit AS (
    INSERT INTO pattern_audit (chat_id, pattern_id, action, old_status, new_status, reason,
                               actor, other_pattern_id)
    SELECT $2, old.id, $6, old.status, $3, $4, $7, $8 FROM old JOIN up ON up.id = old.id
)
SELECT old.status, old.content, EXISTS (SELECT 1 FROM up) AS changed FROM old
"""


async def change_status(
    conn: Queries,
    chat_id: int,
    pattern_id: int,
    new_status: str,
    *,
    action: Action,
    actor: Actor,
    reason: str,
    allowed_from: Sequence[str] = LIVE,
    other_id: int | None = None,
) -> StatusChange | None:
    """Set one of the chat's patterns to ``new_status`` (the reason kept in
    ``status_reason``) with its audit row, if its status is one of ``allowed_from``; None when
    it is not one of the chat's patterns."""
    row = await conn.fetchrow(
        _CHANGE,
        pattern_id,
        chat_id,
        new_status,
        clean_reason(reason),
        list(allowed_from),
        action,
        actor,
        other_id,
    )
    if row is None:
        return None
    return StatusChange(pattern_id, str(row["status"]), str(row["content"]), bool(row["changed"]))


# $1 pattern, $2 chat, $3 pinned?, $4 reason, $5 actor
_PIN = """
WITH old AS (
    SELECT id, status, is_core_tenet FROM patterns WHERE id = $1 AND chat_id = $2 FOR UPDATE
),
up AS (
    UPDATE patterns p SET is_core_tenet = $3, updated_at = now(),
        pinned_at = CASE WHEN $3 THEN coalesce(p.pinned_at, now()) END
    FROM old WHERE p.id = old.id AND old.is_core_tenet <> $3
    RETURNING p.id
),
audit AS (
    INSERT INTO pattern_audit (chat_id, pattern_id, action, old_status, new_status, reason,
                               actor)
    SELECT $2, old.id, CASE WHEN $3 THEN 'pin' ELSE 'unpin' END, old.status, old.status, $4, $5
    FROM old JOIN up ON up.id = old.id
)
SELECT old.status, EXISTS (SELECT 1 FROM up) AS changed FROM old
"""


async def set_pin(
    conn: Queries, chat_id: int, pattern_id: int, pinned: bool, *, actor: Actor, reason: str
) -> bool | None:
    """Make one of the chat's patterns a core tenet (``pinned``) or an ordinary one again,
    with its audit row; whether it changed, None when it is not one of the chat's."""
    row = await conn.fetchrow(_PIN, pattern_id, chat_id, pinned, clean_reason(reason), actor)
    return None if row is None else bool(row["changed"])


_HISTORY = """
SELECT id, pattern_id, action, old_status, new_status, reason, actor, other_pattern_id, at
FROM pattern_audit WHERE chat_id = $1 AND pattern_id = $2 ORDER BY id
"""


async def history(db: Queries, chat_id: int, pattern_id: int) -> list[AuditRow]:
    """The pattern's audit rows, oldest first (none for another chat's pattern)."""
    return [_audit_row(r) for r in await db.fetch(_HISTORY, chat_id, pattern_id)]


def _audit_row(r: Any) -> AuditRow:
    other = r["other_pattern_id"]
    return AuditRow(
        id=int(r["id"]),
        pattern_id=int(r["pattern_id"]),
        action=str(r["action"]),
        old_status=str(r["old_status"]),
        new_status=str(r["new_status"]),
        reason=str(r["reason"]),
        actor=str(r["actor"]),
        other_pattern_id=None if other is None else int(other),
        at=r["at"],
    )
