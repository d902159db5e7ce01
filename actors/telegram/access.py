"""Who may talk to the bot, in the database (migration 008): the allowed chats, the updates of
chats not (yet) allowed, and the "this bot is private" notices.

A chat is allowed when ``TELEGRAM_ALLOWED_CHAT_IDS`` names it or ``allowed_chats`` holds it
(paired with the one-time code, or ``engram chats allow``). An update of any other chat is kept
in ``held_updates`` for :data:`HOLD_HOURS` hours (at most :data:`HOLD_CAP` per chat); allowing
the chat moves the young ones into the inbox (:func:`release_held`), in their order, so they are
answered rather than lost. ``stranger_notices`` rations the polite refusal to one per chat per
:data:`NOTICE_INTERVAL` seconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import attrs

from actors.queues import inbox
from runtime.db import Queries

HOLD_HOURS = 24
HOLD_CAP = 500
NOTICE_INTERVAL = 3600.0


@attrs.frozen
class AllowedChat:
    """A chat allowed in the database: by ``pairing`` (``user_id`` sent the code) or ``cli``."""

    chat_id: int
    allowed_by: str
    user_id: int | None
    allowed_at: datetime


async def stored_chats(db: Queries) -> list[AllowedChat]:
    """Every chat ``allowed_chats`` holds, oldest first."""
    rows = await db.fetch(
        "/* all chats: operator list of allowed chats */ "
        "SELECT chat_id, allowed_by, user_id, allowed_at FROM allowed_chats "
        "ORDER BY allowed_at, chat_id"
    )
    return [AllowedChat(r["chat_id"], r["allowed_by"], r["user_id"], r["allowed_at"]) for r in rows]


async def allow_chat(
    conn: Queries, chat_id: int, allowed_by: str, user_id: int | None = None
) -> bool:
    """Store ``chat_id`` as allowed; False when it already was (the first record is kept)."""
    row = await conn.fetchval(
        "INSERT INTO allowed_chats (chat_id, allowed_by, user_id) VALUES ($1, $2, $3) "
        "ON CONFLICT (chat_id) DO NOTHING RETURNING chat_id",
        chat_id,
        allowed_by,
        user_id,
    )
    return row is not None


async def revoke_chat(db: Queries, chat_id: int) -> bool:
    """Remove ``chat_id`` from the stored chats; False when it was not there."""
    row = await db.fetchval(
        "DELETE FROM allowed_chats WHERE chat_id = $1 RETURNING chat_id", chat_id
    )
    return row is not None


async def hold_update(
    conn: Queries,
    update_key: str,
    update_id: int | None,
    chat_id: int,
    kind: str,
    payload: Mapping[str, Any],
) -> bool:
    """Keep an update of a chat not allowed; False for a duplicate or a chat at the cap.

    Raises ``ValueError`` before any I/O when the update cannot be stored (as the inbox would).
    """
    new = inbox.new_update(update_key, update_id, chat_id, kind, payload)
    row = await conn.fetchval(
        "INSERT INTO held_updates (chat_id, update_key, update_id, kind, payload) "
        "SELECT $1, $2, $3, $4, $5::jsonb "
        "WHERE (SELECT count(*) FROM held_updates WHERE chat_id = $1) < $6 "
        "ON CONFLICT (chat_id, update_key) DO NOTHING RETURNING id",
        chat_id,
        new.update_key,
        new.update_id,
        new.kind,
        new.payload_json,
        HOLD_CAP,
    )
    return row is not None


async def release_held(conn: Queries, chat_id: int) -> int:
    """Move the chat's kept updates younger than :data:`HOLD_HOURS` into the inbox, in their
    order (older ones are dropped); returns how many became inbox rows."""
    rows = await conn.fetch(
        "WITH moved AS (DELETE FROM held_updates WHERE chat_id = $1 "
        "  RETURNING id, update_key, update_id, chat_id, kind, payload, received_at) "
        "INSERT INTO inbox (update_key, update_id, chat_id, kind, payload, received_at) "
        "SELECT update_key, update_id, chat_id, kind, payload, received_at FROM moved "
        "WHERE received_at > now() - make_interval(hours => $2) ORDER BY id "
        "ON CONFLICT (chat_id, update_key) DO NOTHING RETURNING id",
        chat_id,
        HOLD_HOURS,
    )
    return len(rows)


async def purge_held(db: Queries) -> int:
    """Delete kept updates older than :data:`HOLD_HOURS`; returns how many."""
    rows = await db.fetch(
        "/* all chats: retention purge of kept updates */ "
        "DELETE FROM held_updates WHERE received_at <= now() - make_interval(hours => $1) "
        "RETURNING id",
        HOLD_HOURS,
    )
    return len(rows)


async def claim_notice(conn: Queries, chat_id: int, interval: float = NOTICE_INTERVAL) -> bool:
    """True when ``chat_id`` may be told the bot is private now (not within ``interval``
    seconds before); the moment is recorded, so concurrent callers get one True."""
    row = await conn.fetchval(
        "INSERT INTO stranger_notices AS n (chat_id, notified_at) VALUES ($1, now()) "
        "ON CONFLICT (chat_id) DO UPDATE SET notified_at = now() "
        "WHERE n.notified_at <= now() - make_interval(secs => $2) RETURNING chat_id",
        chat_id,
        interval,
    )
    return row is not None


@attrs.frozen
class ChatSummary:
    """One line of ``engram chats``."""

    chat_id: int
    messages: int
    patterns: int
    held: int
    stored: AllowedChat | None
    journal: int = 0  # journal entries the chat owns


async def chat_summaries(db: Queries, extra: Sequence[int] = ()) -> list[ChatSummary]:
    """Every chat the database knows (messages, patterns, allowed, kept updates, journal) and
    ``extra`` ones (the setting's), with their counts, by chat id."""
    rows = await db.fetch(
        "/* all chats: operator overview, engram chats */ "
        "WITH ids AS ("
        "  SELECT DISTINCT chat_id FROM chat_messages UNION SELECT DISTINCT chat_id FROM patterns"
        "  UNION SELECT chat_id FROM allowed_chats UNION SELECT DISTINCT chat_id FROM held_updates"
        "  UNION SELECT DISTINCT chat_id FROM entries WHERE chat_id IS NOT NULL"
        "  UNION SELECT unnest($1::bigint[]))"
        " SELECT i.chat_id,"
        "  (SELECT count(*) FROM chat_messages m WHERE m.chat_id = i.chat_id) AS messages,"
        "  (SELECT count(*) FROM patterns p WHERE p.chat_id = i.chat_id"
        "     AND p.status = 'active') AS patterns,"
        "  (SELECT count(*) FROM held_updates h WHERE h.chat_id = i.chat_id) AS held,"
        "  (SELECT count(*) FROM entries e WHERE e.chat_id = i.chat_id) AS journal,"
        "  a.allowed_by, a.user_id, a.allowed_at"
        " FROM ids i LEFT JOIN allowed_chats a ON a.chat_id = i.chat_id ORDER BY i.chat_id",
        list(extra),
    )
    out = []
    for r in rows:
        stored = None
        if r["allowed_by"] is not None:
            stored = AllowedChat(r["chat_id"], r["allowed_by"], r["user_id"], r["allowed_at"])
        out.append(
            ChatSummary(r["chat_id"], r["messages"], r["patterns"], r["held"], stored, r["journal"])
        )
    return out
