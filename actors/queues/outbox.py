"""The durable outbox: replies waiting to be sent, in order per chat.

Life of a row: ``pending`` -> ``sending`` (``attempts`` + 1 per try) -> ``sent``, or ``failed`` (a
permanent error, or retryable ones past the sender's deadline), or ``uncertain`` (a request may
have reached Telegram but no answer was recorded: not resent, a resend may duplicate the
message). Open rows are ``pending`` and ``sending``.

Exactly once, or visibly uncertain: before a chunk is handed to the Bot API, ``mark_in_flight``
commits its index in ``chunk_in_flight`` (synchronously: it must survive a crash of the
database server too); ``record_chunk_sent`` then appends the chunk's Telegram message id, bumps
``chunks_sent`` (the resume point) and clears the mark, or ``release_in_flight`` clears it after
an answer that proves the chunk was not delivered (5xx, 429, a refused connection). A row still
marked when a sender starts (``recover_in_flight``) becomes ``uncertain`` (a local chat's is
sent again: its client drops duplicates). A reply is enqueued in the same transaction that
marks its turn's inbox rows done (``commit_turn``): an update is never done without its reply.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

import attrs
import structlog

from actors.errors import NotCollectable
from actors.queues import erased
from runtime.db import Queries

log = structlog.get_logger(__name__)

OutboxStatus = Literal["pending", "sending", "sent", "failed", "uncertain"]
ParseMode = Literal["HTML", "MarkdownV2"]
OPEN_STATUSES: tuple[str, ...] = ("pending", "sending")
#: 'message': a reply (sendMessage); 'edit': new text (and keyboard, or none) for the already sent
#: message ``edit_message_id`` (editMessageText); 'edit_markup': only its keyboard
OutboxKind = Literal["message", "edit", "edit_markup"]


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
    #: the chunk handed to the Bot API whose outcome is not recorded yet (None: no such chunk)
    chunk_in_flight: int | None = None
    #: the inline keyboard (Bot API JSON) sent with the last chunk, or set by an edit
    reply_markup: Mapping[str, Any] | None = None
    kind: str = "message"
    edit_message_id: int | None = None

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
            chunk_in_flight=rec["chunk_in_flight"],
            reply_markup=_json(rec["reply_markup"]),
            kind=rec["kind"],
            edit_message_id=rec["edit_message_id"],
        )


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


_COLUMNS = (
    "id, chat_id, text, parse_mode, reply_to_message_id, inbox_ids, status, attempts, "
    "last_error, chunks_sent, telegram_message_ids, created_at, sent_at, chunk_in_flight, "
    "reply_markup, kind, edit_message_id"
)


async def enqueue_reply(
    conn: Queries,
    chat_id: int,
    text: str,
    parse_mode: ParseMode | None = None,
    reply_to_message_id: int | None = None,
    inbox_ids: Sequence[int] = (),
    *,
    reply_markup: Mapping[str, Any] | None = None,
    kind: OutboxKind = "message",
    edit_message_id: int | None = None,
) -> int:
    """Add a reply as ``pending``; returns its id. Text may be longer than one message.
    ``reply_markup``: a keyboard for its last chunk. An edit of a sent message is outbox work
    too, in the chat's order: ``kind`` 'edit' (text, at most one message, and ``reply_markup``
    or no keyboard) or 'edit_markup' (only the keyboard; ``text`` is ignored) of
    ``edit_message_id``."""
    row_id: int = await conn.fetchval(
        "INSERT INTO outbox (chat_id, text, parse_mode, reply_to_message_id, inbox_ids, "
        "reply_markup, kind, edit_message_id) "
        "VALUES ($1, $2, $3, $4, $5::bigint[], $6::jsonb, $7, $8) RETURNING id",
        chat_id,
        text,
        parse_mode,
        reply_to_message_id,
        list(inbox_ids),
        None if reply_markup is None else json.dumps(reply_markup),
        kind,
        edit_message_id,
    )
    return row_id


_COMMIT_TURN = """
fence AS (SELECT {fence} AND {lease} AS ok), older AS (
    SELECT $6::bool AND NOT EXISTS (
        SELECT 1 FROM outbox WHERE chat_id = $1 AND status = ANY($7::text[])
    ) AS claim FROM fence WHERE ok
), reply AS (
    INSERT INTO outbox (chat_id, text, parse_mode, reply_to_message_id, inbox_ids, status, attempts,
                        chunk_in_flight, reply_markup)
    SELECT $1, $2, $3, $4, $5::bigint[], CASE WHEN claim THEN 'sending' ELSE 'pending' END,
           CASE WHEN claim THEN 1 ELSE 0 END, CASE WHEN claim THEN 0 END, $8::jsonb
    FROM older
    RETURNING {columns}
), done AS (
    UPDATE inbox SET status = 'done', processed_at = now(), last_error = NULL
    WHERE chat_id = $1 AND id = ANY($5::bigint[]) AND status <> 'done' RETURNING id
)
SELECT reply.*, (SELECT count(*) FROM done) AS done FROM reply
""".replace("{columns}", _COLUMNS).replace("{fence}", erased.fence(5, chat=1))
_COMMIT_TURN = _COMMIT_TURN.replace("{lease}", erased.lease_fence(9, chat=1))
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
    reply_markup: Mapping[str, Any] | None = None,
    lease: str | None = None,
) -> OutboxRow:
    """Enqueue a turn's reply and mark its inbox rows done, atomically, in one statement (one
    round trip; on a connection in a transaction it commits with the rest); the new row.
    ``claim``: when the chat has no other open row, the row's first send attempt starts with
    it (``sending``, ``attempts`` 1, its first chunk in flight, as :func:`mark_in_flight` would,
    committed with the turn): the caller hands the row to the sender, which sends it without
    reading it back or marking it again. With an older open row it stays ``pending``, for the
    sender to take in order. The inbox rows must exist (:mod:`actors.queues.erased`): else
    nothing is written. ``before``: more writes (e.g. a :class:`StatementCollector`'s) run in the
    same statement, as data-modifying CTEs: all or nothing with the reply. They run on one
    snapshot, so they must not depend on each other's effects; ``$n`` in their text must be
    parameters only. ``reply_markup``: an inline keyboard (Bot API JSON) for the last chunk.
    ``lease``: this run's incarnation, which must hold the chat's lease (:mod:`erased`)."""
    args: list[Any] = [chat_id, text, parse_mode, reply_to_message_id]
    args += [list(dict.fromkeys(inbox_ids)), claim, list(OPEN_STATUSES)]
    args += [None if reply_markup is None else json.dumps(reply_markup), lease]
    ctes = []
    for n, (query, params) in enumerate(before):
        ctes.append(f"w{n} AS ({_shift_params(query, len(args))}),")
        args.extend(params)
    row = await db.fetchrow(f"WITH {' '.join(ctes)} {_COMMIT_TURN}", *args)
    assert row is not None
    return OutboxRow.from_record(row)


_NOTICE = """
WITH older AS (
    SELECT NOT EXISTS (
        SELECT 1 FROM outbox WHERE chat_id = $1 AND status = ANY($3::text[])
    ) AS claim
)
INSERT INTO outbox (chat_id, text, status, attempts, chunk_in_flight)
SELECT $1, $2, CASE WHEN claim THEN 'sending' ELSE 'pending' END, CASE WHEN claim THEN 1 ELSE 0 END,
       CASE WHEN claim THEN 0 END
FROM older
WHERE NOT EXISTS (
    SELECT 1 FROM outbox WHERE chat_id = $1 AND text = $2
      AND id = (SELECT max(id) FROM outbox WHERE chat_id = $1)
)
RETURNING {columns}
""".replace("{columns}", _COLUMNS)


async def enqueue_notice(db: Queries, chat_id: int, text: str) -> OutboxRow | None:
    """Tell the chat something that answers no update (e.g. that the model is down), once: not
    when the chat's latest reply already says exactly this (so a notice is not repeated until
    something else was said, across restarts too). Claimed like :func:`commit_turn` with
    ``claim`` (the chat's only open row: ``sending``, first chunk in flight). The new row, or
    None when it was not repeated."""
    rec = await db.fetchrow(_NOTICE, chat_id, text, list(OPEN_STATUSES))
    return None if rec is None else OutboxRow.from_record(rec)


async def get(db: Queries, chat_id: int, row_id: int) -> OutboxRow | None:
    """One row of the chat by id."""
    rec = await db.fetchrow(
        f"SELECT {_COLUMNS} FROM outbox WHERE chat_id = $2 AND id = $1", row_id, chat_id
    )
    return None if rec is None else OutboxRow.from_record(rec)


async def next_pending(db: Queries, chat_id: int, limit: int = 100) -> list[OutboxRow]:
    """Open rows (pending, sending) of one chat in id order."""
    recs = await db.fetch(
        f"SELECT {_COLUMNS} FROM outbox WHERE status = ANY($1::text[]) "
        "AND chat_id = $2 ORDER BY id LIMIT $3",
        list(OPEN_STATUSES),
        chat_id,
        limit,
    )
    return [OutboxRow.from_record(r) for r in recs]


async def chats_with_pending(db: Queries) -> list[int]:
    """Chats with open rows, the one with the oldest open row first."""
    recs = await db.fetch(
        "/* all chats: recovery sweep */ SELECT chat_id FROM outbox WHERE status = ANY($1::text[]) "
        "GROUP BY chat_id ORDER BY min(id)",
        list(OPEN_STATUSES),
    )
    return [r["chat_id"] for r in recs]


async def recover_in_flight(
    db: Queries, row_ids: Sequence[int] | None = None, *, redeliver: range = range(0)
) -> list[OutboxRow]:
    """Open rows with a chunk in flight (only ``row_ids``) become ``uncertain`` (never resent),
    returned; rows of chats in ``redeliver`` (local chats) stay open, to be sent again."""
    again = "chat_id BETWEEN $3::bigint AND $4::bigint"
    recs = await db.fetch(
        "/* all chats: the sender's recovery of chunks left in flight */ "
        f"UPDATE outbox SET status = CASE WHEN {again} THEN status ELSE 'uncertain' END, "
        f"chunk_in_flight = CASE WHEN {again} THEN NULL ELSE chunk_in_flight END, "
        "last_error = 'chunk ' || (chunk_in_flight + 1) || ' was in flight when its sender "
        f"stopped: ' || CASE WHEN {again} THEN 'sent again' ELSE 'delivery unknown, not resent' "
        "END WHERE status = ANY($1::text[]) AND chunk_in_flight IS NOT NULL "
        f"AND ($2::bigint[] IS NULL OR id = ANY($2::bigint[])) RETURNING {_COLUMNS}",
        *(list(OPEN_STATUSES), None if row_ids is None else list(row_ids)),
        *((redeliver.start, redeliver.stop - 1) if redeliver else (1, 0)),
    )
    rows = (OutboxRow.from_record(r) for r in recs)
    return sorted((r for r in rows if r.status == "uncertain"), key=lambda r: r.id)
