"""The sender's steps on one outbox row (see :mod:`actors.queues.outbox` for the row's life):
a send attempt started (``mark_sending``, ``mark_in_flight``), a chunk recorded delivered or
its mark released, the row's end (``mark_sent``, ``mark_failed``, ``mark_uncertain``). Each
statement is pinned to the row's chat (``chat_id = $n``: one shard when the table is
distributed by chat)."""

from __future__ import annotations

import structlog

from actors.queues import inbox
from actors.queues.outbox import OPEN_STATUSES
from runtime.db import Queries

log = structlog.get_logger(__name__)


async def mark_sending(db: Queries, chat_id: int, row_id: int) -> int | None:
    """Start a send attempt (``attempts`` + 1) without a chunk in flight; returns ``attempts``,
    None if not open."""
    attempts: int | None = await db.fetchval(
        "UPDATE outbox SET status = 'sending', attempts = attempts + 1 "
        "WHERE chat_id = $3 AND id = $1 AND status = ANY($2::text[]) RETURNING attempts",
        row_id,
        list(OPEN_STATUSES),
        chat_id,
    )
    return attempts


async def mark_in_flight(db: Queries, chat_id: int, row_id: int, chunk: int) -> int | None:
    """Chunk ``chunk`` is about to be handed to the Bot API: a send attempt starts
    (``attempts`` + 1) with the chunk in flight, committed synchronously before the request.
    Returns ``attempts``; None if the row is not open (final: nothing is sent), or this chunk
    is not the next one free to send (it went out, or another sender has it in flight): a
    stale copy of the row is never sent twice."""
    attempts: int | None = await db.fetchval(
        "UPDATE outbox SET status = 'sending', attempts = attempts + 1, chunk_in_flight = $2 "
        "WHERE chat_id = $4 AND id = $1 AND status = ANY($3::text[]) "
        "AND chunks_sent = $2 AND chunk_in_flight IS NULL RETURNING attempts",
        row_id,
        chunk,
        list(OPEN_STATUSES),
        chat_id,
    )
    return attempts


_RECORD = """
WITH recorded AS (
    UPDATE outbox SET chunks_sent = chunks_sent + 1,
        telegram_message_ids = array_append(telegram_message_ids, $3::bigint),
        chunk_in_flight = NULL,
        status = CASE WHEN $4 THEN 'sent' ELSE status END,
        sent_at = CASE WHEN $4 THEN now() ELSE sent_at END,
        last_error = CASE WHEN $4 THEN NULL ELSE last_error END
    WHERE chat_id = $6 AND id = $1 AND chunks_sent = $2 AND status = ANY($5::text[])
    RETURNING id
)
SELECT EXISTS (SELECT 1 FROM recorded)
    OR EXISTS (SELECT 1 FROM outbox WHERE chat_id = $6 AND id = $1 AND chunks_sent > $2)
"""


async def record_chunk_sent(
    db: Queries, chat_id: int, row_id: int, chunk: int, message_id: int, *, last: bool = False
) -> bool:
    """Record chunk ``chunk`` (0-based) delivered: its message id appended, ``chunks_sent`` (the
    resume point) bumped, the in-flight mark cleared; with ``last`` the row is ``sent`` too.

    Idempotent: a retry after an error that hid a commit finds the chunk already recorded and
    changes nothing. True when the chunk is recorded (now or before); False when the row is
    missing or was made final without it (nothing to do)."""
    recorded: bool = await db.fetchval(
        _RECORD, row_id, chunk, message_id, last, list(OPEN_STATUSES), chat_id
    )
    return recorded


async def release_in_flight(db: Queries, chat_id: int, row_id: int, chunk: int, error: str) -> bool:
    """The Bot API answered that chunk ``chunk`` was not delivered (5xx, 429, ...) or the
    request never left (connection refused): clear the in-flight mark and keep ``error``; the
    row stays open for a retry. False when the row is not open or holds another mark."""
    found = await db.fetchval(
        "UPDATE outbox SET chunk_in_flight = NULL, last_error = $3 "
        "WHERE chat_id = $5 AND id = $1 AND chunk_in_flight = $2 AND status = ANY($4::text[]) "
        "RETURNING id",
        row_id,
        chunk,
        inbox.truncate_error(error),
        list(OPEN_STATUSES),
        chat_id,
    )
    return found is not None


async def mark_sent(db: Queries, chat_id: int, row_id: int) -> bool:
    """Every chunk is delivered (final). False if the row was not open."""
    found = await db.fetchval(
        "UPDATE outbox SET status = 'sent', sent_at = now(), last_error = NULL "
        "WHERE chat_id = $3 AND id = $1 AND status = ANY($2::text[]) RETURNING id",
        row_id,
        list(OPEN_STATUSES),
        chat_id,
    )
    return found is not None


async def _finish(db: Queries, chat_id: int, row_id: int, status: str, error: str) -> bool:
    # a failed row's chunk is known not delivered; an uncertain row keeps the chunk it is about
    in_flight = "NULL" if status == "failed" else "chunk_in_flight"
    found = await db.fetchval(
        f"UPDATE outbox SET status = '{status}', last_error = $2, chunk_in_flight = {in_flight} "
        "WHERE chat_id = $4 AND id = $1 AND status = ANY($3::text[]) RETURNING id",
        row_id,
        inbox.truncate_error(error),
        list(OPEN_STATUSES),
        chat_id,
    )
    if found is not None:
        log.warning(f"outbox.{status}", outbox_id=row_id, error=inbox.truncate_error(error)[:200])
    return found is not None


async def mark_failed(db: Queries, chat_id: int, row_id: int, error: str) -> bool:
    """The sender gave up on this row (final). False if the row was not open."""
    return await _finish(db, chat_id, row_id, "failed", error)


async def mark_uncertain(db: Queries, chat_id: int, row_id: int, error: str) -> bool:
    """A send may or may not have been delivered (final; never resent blindly)."""
    return await _finish(db, chat_id, row_id, "uncertain", error)
