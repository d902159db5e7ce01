"""The durable outbox: replies waiting to be sent, in order per chat.

Life of a row: ``pending`` -> ``sending`` (``attempts`` + 1 per send attempt) -> ``sent``, or
``failed`` (the sender gave up: permanent error or retries exhausted), or ``uncertain`` (a
request may have reached Telegram but no answer came: it is *not* resent blindly, because a
resend may duplicate the message). Open rows are ``pending`` and ``sending``; a ``sending``
row found after a restart was interrupted and resumes after its last delivered chunk:
``record_chunk_sent`` appends each delivered chunk's Telegram message id and bumps
``chunks_sent`` as soon as Telegram confirms it.

A reply is enqueued in the same transaction that marks its turn's inbox rows done
(``commit_turn``), so an update is never done without its reply being durable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

import attrs
import structlog

from actors.errors import NotCollectable
from actors.queues import inbox
from runtime.db import Queries

log = structlog.get_logger(__name__)

OutboxStatus = Literal["pending", "sending", "sent", "failed", "uncertain"]
ParseMode = Literal["HTML", "MarkdownV2"]
OPEN_STATUSES: tuple[str, ...] = ("pending", "sending")


@attrs.frozen
class OutboxRow:
    """One reply to send (possibly in several chunks)."""

    id: int
    chat_id: int
    text: str
    parse_mode: str | None
    reply_to_message_id: int | None
    inbox_ids: tuple[int, ...]
    status: str
    attempts: int
    last_error: str | None
    chunks_sent: int
    telegram_message_ids: tuple[int, ...]
    created_at: datetime
    sent_at: datetime | None

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> OutboxRow:
        return cls(
            id=rec["id"],
            chat_id=rec["chat_id"],
            text=rec["text"],
            parse_mode=rec["parse_mode"],
            reply_to_message_id=rec["reply_to_message_id"],
            inbox_ids=tuple(rec["inbox_ids"] or ()),
            status=rec["status"],
            attempts=rec["attempts"],
            last_error=rec["last_error"],
            chunks_sent=rec["chunks_sent"],
            telegram_message_ids=tuple(rec["telegram_message_ids"] or ()),
            created_at=rec["created_at"],
            sent_at=rec["sent_at"],
        )


_COLUMNS = (
    "id, chat_id, text, parse_mode, reply_to_message_id, inbox_ids, status, attempts, "
    "last_error, chunks_sent, telegram_message_ids, created_at, sent_at"
)


async def enqueue_reply(
    conn: Queries,
    chat_id: int,
    text: str,
    parse_mode: ParseMode | None = None,
    reply_to_message_id: int | None = None,
    inbox_ids: Sequence[int] = (),
) -> int:
    """Add a reply as ``pending``; returns its id. Text may be longer than one message."""
    row_id: int = await conn.fetchval(
        "INSERT INTO outbox (chat_id, text, parse_mode, reply_to_message_id, inbox_ids) "
        "VALUES ($1, $2, $3, $4, $5::bigint[]) RETURNING id",
        chat_id,
        text,
        parse_mode,
        reply_to_message_id,
        list(inbox_ids),
    )
    return row_id


_COMMIT_TURN = """
older AS (
    SELECT $6::bool AND NOT EXISTS (
        SELECT 1 FROM outbox WHERE chat_id = $1 AND status = ANY($7::text[])
    ) AS claim
), reply AS (
    INSERT INTO outbox (chat_id, text, parse_mode, reply_to_message_id, inbox_ids, status, attempts)
    SELECT $1, $2, $3, $4, $5::bigint[], CASE WHEN claim THEN 'sending' ELSE 'pending' END,
           CASE WHEN claim THEN 1 ELSE 0 END
    FROM older
    RETURNING {columns}
), done AS (
    UPDATE inbox SET status = 'done', processed_at = now(), last_error = NULL
    WHERE id = ANY($5::bigint[]) AND status <> 'done' RETURNING id
)
SELECT reply.*, (SELECT count(*) FROM done) AS done FROM reply
""".replace("{columns}", _COLUMNS)
_WRITE = re.compile(r"\s*(INSERT|UPDATE|DELETE)\s", re.IGNORECASE)
_PARAM = re.compile(r"\$(\d+)")

Statement = tuple[str, Sequence[Any]]


@attrs.define
class StatementCollector:
    """Stands in for the connection given to a reply's persist hook: its ``execute`` calls
    are kept (not run) for :func:`commit_turn` to run in the commit statement. Anything else
    (a query whose result the hook needs, a transaction, a statement with its own WITH)
    raises :class:`NotCollectable`: the caller then runs the hook in a real transaction."""

    statements: list[Statement] = attrs.field(factory=list)

    async def execute(self, query: str, *args: Any) -> str:
        if not _WRITE.match(query) or ";" in query.strip().rstrip(";"):
            raise NotCollectable("only single INSERT/UPDATE/DELETE statements are collected")
        self.statements.append((query.strip().rstrip(";"), args))
        return ""

    def __getattr__(self, name: str) -> Any:
        raise NotCollectable(f"a persist hook used {name}(): not collectable")


def _shift_params(query: str, offset: int) -> str:
    return _PARAM.sub(lambda m: f"${int(m[1]) + offset}", query)


async def commit_turn(
    db: Queries,
    *,
    chat_id: int,
    text: str,
    inbox_ids: Sequence[int],
    parse_mode: ParseMode | None = None,
    reply_to_message_id: int | None = None,
    before: Sequence[Statement] = (),
    claim: bool = False,
) -> OutboxRow:
    """Enqueue a turn's reply and mark its inbox rows done, atomically, in one statement (one
    round trip; on a connection in a transaction it commits with the rest); the new row.

    ``claim``: when the chat has no other open row, the row's first send attempt starts with
    it (``sending``, ``attempts`` 1, as :func:`next_pending_claimed` would): the caller hands
    the row to the sender, which sends it without reading it back. With an older open row it
    stays ``pending``, for the sender to take in order.

    ``before``: more writes (e.g. a :class:`StatementCollector`'s) run in the same statement,
    as data-modifying CTEs: all or nothing with the reply. They run on one snapshot, so they
    must not depend on each other's effects; ``$n`` in their text must be parameters only."""
    args: list[Any] = [chat_id, text, parse_mode, reply_to_message_id]
    args += [list(dict.fromkeys(inbox_ids)), claim, list(OPEN_STATUSES)]
    ctes = []
    for n, (query, params) in enumerate(before):
        ctes.append(f"w{n} AS ({_shift_params(query, len(args))}),")
        args.extend(params)
    row = await db.fetchrow(f"WITH {' '.join(ctes)} {_COMMIT_TURN}", *args)
    assert row is not None
    return OutboxRow.from_record(row)


async def get(db: Queries, row_id: int) -> OutboxRow | None:
    """One row by id."""
    rec = await db.fetchrow(f"SELECT {_COLUMNS} FROM outbox WHERE id = $1", row_id)
    return None if rec is None else OutboxRow.from_record(rec)


async def next_pending(
    db: Queries, chat_id: int | None = None, limit: int = 100
) -> list[OutboxRow]:
    """Open rows (pending, sending) in id order — of one chat, or of every chat."""
    recs = await db.fetch(
        f"SELECT {_COLUMNS} FROM outbox WHERE status = ANY($1::text[]) "
        "AND ($2::bigint IS NULL OR chat_id = $2) ORDER BY id LIMIT $3",
        list(OPEN_STATUSES),
        chat_id,
        limit,
    )
    return [OutboxRow.from_record(r) for r in recs]


_NEXT_CLAIMED = f"""
WITH open AS (
    SELECT {_COLUMNS} FROM outbox
    WHERE status = ANY($1::text[]) AND chat_id = $2 ORDER BY id LIMIT $3
), claimed AS (
    UPDATE outbox SET status = 'sending', attempts = attempts + 1
    WHERE id = (SELECT min(id) FROM open) AND status = ANY($1::text[])
    RETURNING id, {{commit}}
)
SELECT open.*, open.id IN (SELECT id FROM claimed) AS claimed FROM open ORDER BY id
"""


async def next_pending_claimed(
    db: Queries, chat_id: int, limit: int = 100
) -> tuple[list[OutboxRow], int | None]:
    """:func:`next_pending` of one chat with the first row's send attempt started (as
    :func:`mark_sending` would) in the same statement: the rows, as read before the claim,
    and the claimed id (None when there is no open row). The claim commits asynchronously
    (:data:`actors.queues.inbox.ASYNC_COMMIT`): ``sending`` and ``attempts`` are advisory (an open
    row resumes after its last recorded chunk either way), and the chunk records that matter
    stay synchronous."""
    query = _NEXT_CLAIMED.format(commit=inbox.async_commit(db))
    recs = await db.fetch(query, list(OPEN_STATUSES), chat_id, limit)
    claimed = next((r["id"] for r in recs if r["claimed"]), None)
    return [OutboxRow.from_record(r) for r in recs], claimed


async def chats_with_pending(db: Queries) -> list[int]:
    """Chats with open rows, the one with the oldest open row first."""
    recs = await db.fetch(
        "SELECT chat_id FROM outbox WHERE status = ANY($1::text[]) "
        "GROUP BY chat_id ORDER BY min(id)",
        list(OPEN_STATUSES),
    )
    return [r["chat_id"] for r in recs]


async def mark_sending(db: Queries, row_id: int) -> int | None:
    """Start a send attempt (``attempts`` + 1); returns ``attempts``, None if not open."""
    attempts: int | None = await db.fetchval(
        "UPDATE outbox SET status = 'sending', attempts = attempts + 1 "
        "WHERE id = $1 AND status = ANY($2::text[]) RETURNING attempts",
        row_id,
        list(OPEN_STATUSES),
    )
    return attempts


async def record_chunk_sent(db: Queries, row_id: int, telegram_message_id: int) -> int | None:
    """Record one delivered chunk; returns the new ``chunks_sent`` (the resume point).

    None if the row does not exist or is final.
    """
    chunks: int | None = await db.fetchval(
        "UPDATE outbox SET chunks_sent = chunks_sent + 1, "
        "telegram_message_ids = array_append(telegram_message_ids, $2::bigint) "
        "WHERE id = $1 AND status = ANY($3::text[]) RETURNING chunks_sent",
        row_id,
        telegram_message_id,
        list(OPEN_STATUSES),
    )
    return chunks


async def mark_sent(db: Queries, row_id: int) -> bool:
    """Every chunk is delivered (final). False if the row was not open."""
    found = await db.fetchval(
        "UPDATE outbox SET status = 'sent', sent_at = now(), last_error = NULL "
        "WHERE id = $1 AND status = ANY($2::text[]) RETURNING id",
        row_id,
        list(OPEN_STATUSES),
    )
    return found is not None


async def _finish(db: Queries, row_id: int, status: str, error: str) -> bool:
    found = await db.fetchval(
        f"UPDATE outbox SET status = '{status}', last_error = $2 "
        "WHERE id = $1 AND status = ANY($3::text[]) RETURNING id",
        row_id,
        inbox.truncate_error(error),
        list(OPEN_STATUSES),
    )
    if found is not None:
        log.warning(f"outbox.{status}", outbox_id=row_id, error=inbox.truncate_error(error)[:200])
    return found is not None


async def mark_failed(db: Queries, row_id: int, error: str) -> bool:
    """The sender gave up on this row (final). False if the row was not open."""
    return await _finish(db, row_id, "failed", error)


async def mark_uncertain(db: Queries, row_id: int, error: str) -> bool:
    """A send may or may not have been delivered (final; never resent blindly)."""
    return await _finish(db, row_id, "uncertain", error)
