"""Leases in the database: which process serves a chat, and which runs a once-per-database job.

A chat lease is a row of ``chat_leases`` (migration 024): ``owner`` (the process's name,
ENGRAM_INSTANCE), ``incarnation`` (one run of it) and ``expires_at`` on the server's clock.
:meth:`SqlLeases.acquire` takes a chat in one statement when the row is missing, expired, or
already this process's (same incarnation: a renewal; same owner, another incarnation: the
process restarted and takes its chats back at once). A lease taken from any other incarnation
first recovers what that run may have left in hand, in the same statement: the chat's inbox
rows still ``processing`` go back to ``pending`` with a crash counted, and its outbox rows
with a chunk in flight become ``uncertain`` (never resent; a local chat's are sent again).
Two processes racing for one chat cannot both win: ``INSERT … ON CONFLICT DO UPDATE … WHERE``
re-checks the row it waited for.

Named leases (``process_leases``) are the same without the recovery: long polling and the
maintenance jobs run in the one process holding theirs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from actors.queues import inbox, outbox
from runtime.db import Queries

#: the channel on which a process that received a chat's update wakes the chat's owner
WAKE_CHANNEL = "engram_chats"
#: its payload from a process that released its chats (a rolling restart): sweep now
SWEEP_NOW = "*"

_ACQUIRE = """
WITH prev AS (
    SELECT owner, incarnation FROM chat_leases WHERE chat_id = $1
), got AS (
    INSERT INTO chat_leases AS l (chat_id, owner, incarnation, expires_at)
    VALUES ($1, $2, $3, now() + make_interval(secs => $4))
    ON CONFLICT (chat_id) DO UPDATE SET owner = EXCLUDED.owner,
        incarnation = EXCLUDED.incarnation, expires_at = EXCLUDED.expires_at,
        acquired_at = CASE WHEN l.incarnation = EXCLUDED.incarnation
                           THEN l.acquired_at ELSE now() END
    WHERE l.chat_id = $1 AND (l.incarnation = EXCLUDED.incarnation
        OR l.owner = EXCLUDED.owner OR l.expires_at <= now())
    RETURNING chat_id
), fresh AS (
    SELECT 1 FROM got WHERE NOT EXISTS (SELECT 1 FROM prev WHERE incarnation = $3)
), requeued AS (
    UPDATE inbox SET status = 'pending', crashes = crashes + 1
    WHERE chat_id = $1 AND status = 'processing' AND EXISTS (SELECT 1 FROM fresh)
    RETURNING id
), unsure AS (
    UPDATE outbox SET status = CASE WHEN $6 THEN status ELSE 'uncertain' END,
        chunk_in_flight = CASE WHEN $6 THEN NULL ELSE chunk_in_flight END,
        last_error = 'chunk ' || (chunk_in_flight + 1) || ' was in flight when its sender '
            || 'stopped: ' || CASE WHEN $6 THEN 'sent again' ELSE 'delivery unknown, not resent' END
    WHERE chat_id = $1 AND status = ANY($5::text[]) AND chunk_in_flight IS NOT NULL
      AND EXISTS (SELECT 1 FROM fresh)
    RETURNING id
)
SELECT EXISTS (SELECT 1 FROM got) AS got, EXISTS (SELECT 1 FROM fresh) AS fresh,
    ARRAY(SELECT id FROM requeued ORDER BY id) AS requeued,
    ARRAY(SELECT id FROM unsure ORDER BY id) AS unsure,
    CASE WHEN EXISTS (SELECT 1 FROM got) THEN $2 ELSE (SELECT owner FROM prev) END AS holder
"""


@attrs.frozen
class Acquired:
    """The outcome of one :meth:`SqlLeases.acquire`."""

    got: bool
    #: taken from another incarnation (or no one): what it left in hand was recovered
    fresh: bool = False
    requeued: tuple[int, ...] = ()  # inbox rows back to pending (a crash counted)
    unsure: tuple[int, ...] = ()  # outbox rows made uncertain (or, local, sent again)
    holder: str | None = None  # who holds it (this process, or the one seen holding it)


@attrs.frozen
class SqlLeases:
    """Chat and named leases on PostgreSQL, for one process (``owner``, ``incarnation``)."""

    db: Queries
    owner: str
    incarnation: str
    #: chats whose in-flight chunks are sent again rather than made uncertain (local chats)
    redeliver: range = range(0)

    async def acquire(self, chat_id: int, ttl: float) -> Acquired:
        rec = await self.db.fetchrow(
            _ACQUIRE,
            chat_id,
            self.owner,
            self.incarnation,
            ttl,
            list(outbox.OPEN_STATUSES),
            chat_id in self.redeliver,
        )
        assert rec is not None
        return Acquired(
            rec["got"],
            rec["fresh"],
            tuple(rec["requeued"]),
            tuple(rec["unsure"]),
            rec["holder"],
        )

    async def renew(self, chat_ids: Iterable[int], ttl: float) -> set[int]:
        """Extend the leases of ``chat_ids`` this incarnation still holds; those it holds."""
        recs = await self.db.fetch(
            "/* all chats: this process's leases, renewed together */ "
            "UPDATE chat_leases SET expires_at = now() + make_interval(secs => $3) "
            "WHERE chat_id = ANY($2::bigint[]) AND incarnation = $1 RETURNING chat_id",
            self.incarnation,
            sorted(chat_ids),
            ttl,
        )
        return {r["chat_id"] for r in recs}

    async def release(self, chat_ids: Sequence[int]) -> int:
        """Let go of these chats (only if still this incarnation's); how many were released."""
        recs = await self.db.fetch(
            "/* all chats: this process's leases, released together */ "
            "DELETE FROM chat_leases WHERE chat_id = ANY($2::bigint[]) AND incarnation = $1 "
            "RETURNING chat_id",
            self.incarnation,
            list(chat_ids),
        )
        return len(recs)

    async def live_processes(self) -> int:
        """How many processes hold a live chat lease (this one counted in any case)."""
        n = await self.db.fetchval(
            "/* all chats: how many processes serve chats */ SELECT count(DISTINCT owner) "
            "FROM chat_leases WHERE expires_at > now() AND owner <> $1",
            self.owner,
        )
        return int(n) + 1

    async def wake_owner(self, payload: str) -> None:
        """Tell the chat's owner, whoever it is, through :data:`WAKE_CHANNEL`."""
        await self.db.execute("SELECT pg_notify($1, $2)", WAKE_CHANNEL, payload)

    async def acquire_named(self, name: str, ttl: float) -> bool:
        """Take or renew the named lease (free, expired, or this process's)."""
        got = await self.db.fetchval(
            "INSERT INTO process_leases AS l (name, owner, incarnation, expires_at) "
            "VALUES ($1, $2, $3, now() + make_interval(secs => $4)) "
            "ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, "
            "incarnation = EXCLUDED.incarnation, expires_at = EXCLUDED.expires_at "
            "WHERE l.incarnation = EXCLUDED.incarnation OR l.owner = EXCLUDED.owner "
            "OR l.expires_at <= now() RETURNING true",
            name,
            self.owner,
            self.incarnation,
            ttl,
        )
        return bool(got)

    async def release_named(self, name: str) -> None:
        await self.db.execute(
            "DELETE FROM process_leases WHERE name = $1 AND incarnation = $2",
            name,
            self.incarnation,
        )


async def open_work(db: Queries, owner: str) -> list[int]:
    """Chats with open inbox or outbox rows that no other live process holds: the sweep's
    candidates (a missed wake, a dead owner, a released chat, this process's own)."""
    recs = await db.fetch(
        "/* all chats: the lease sweep */ SELECT chat_id FROM ("
        " SELECT chat_id, min(id) AS first FROM inbox"
        " WHERE chat_id <> 0 AND status = ANY($1::text[]) GROUP BY chat_id"
        " UNION ALL SELECT chat_id, min(id) FROM outbox"
        " WHERE status = ANY($2::text[]) GROUP BY chat_id) AS open"
        " WHERE NOT EXISTS (SELECT 1 FROM chat_leases l"
        "  WHERE l.chat_id = open.chat_id AND l.expires_at > now() AND l.owner <> $3)"
        " GROUP BY chat_id ORDER BY min(first)",
        list(inbox.OPEN_STATUSES),
        list(outbox.OPEN_STATUSES),
        owner,
    )
    return [r["chat_id"] for r in recs]
