"""The durable inbox: every accepted update is stored here before Telegram gets its 200.

Life of a row: ``pending`` -> ``processing`` (claimed by its chat actor) -> ``done`` |
``skipped`` | ``failed`` (retried later; still open). ``done`` and ``skipped`` are final. Open
rows (``pending``, ``processing``, ``failed``) are what a chat actor works through, in id order,
and what crash recovery re-dispatches (``open_chats``).

A crash is charged to no one. Two counters, two caps:

* ``attempts`` counts the row's own failures: an exception while the chat actor processed it
  (``mark_failed``). Claiming a row charges nothing.
* ``crashes`` counts process starts that found the row still ``processing``: its process died
  during its turn (``recover_crashed``, run once by the router as the process starts; the rows
  go back to ``pending``). Rows merely claimed when some other update killed the process are
  retried, so this cap is generous (:data:`MAX_CRASHES`); it exists so that an update that
  kills the process itself cannot loop forever.

A row at either cap is not claimed by ``take_open``; the chat actor then skips it
(``mark_skipped``) and tells the person.

Inbox rows are marked done only after their turn's reply is in the outbox, in the same
transaction (see ``actors.queues.outbox.commit_turn``); hence ``mark_done`` takes a connection.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

import attrs
import structlog

from runtime.db import Connection, Queries

log = structlog.get_logger(__name__)

InboxStatus = Literal["pending", "processing", "done", "skipped", "failed"]
OPEN_STATUSES: tuple[str, ...] = ("pending", "processing", "failed")
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
MAX_ERROR_CHARS = 2000
MAX_PAYLOAD_DEPTH = 100
#: a row in its turn at this many process crashes (never finished in between) is skipped: an
#: update that kills the process itself. Generous, so a storm of kills or OOMs while the process
#: restarts under load (bench/crash.py: up to 13 starts in a row died before any turn ended)
#: charges no innocent update; a real killer costs this many restarts before it is skipped.
MAX_CRASHES = 30


@attrs.frozen
class InboxRow:
    """One stored update."""

    id: int
    update_key: str
    update_id: int | None
    chat_id: int | None
    kind: str
    payload: Mapping[str, Any]
    status: str
    attempts: int
    last_error: str | None
    received_at: datetime
    processed_at: datetime | None
    #: process starts that found this row still ``processing`` (see the module docstring)
    crashes: int = 0

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> InboxRow:
        payload = rec["payload"]
        if isinstance(payload, str | bytes):
            payload = json.loads(payload)
        return cls(
            id=rec["id"],
            update_key=rec["update_key"],
            update_id=rec["update_id"],
            chat_id=rec["chat_id"] or None,  # 0: an update without a chat (migration 023)
            kind=rec["kind"],
            payload=payload,
            status=rec["status"],
            attempts=rec["attempts"],
            last_error=rec["last_error"],
            received_at=rec["received_at"],
            processed_at=rec["processed_at"],
            crashes=rec["crashes"],
        )


_COLUMNS = (
    "id, update_key, update_id, chat_id, kind, payload, status, attempts, last_error, "
    "received_at, processed_at, crashes"
)
_ONE = f"SELECT {_COLUMNS} FROM inbox WHERE chat_id = $1 AND"  # + the row's key = $2
# NUL and lone surrogates: valid in JSON text and Python str, rejected by PostgreSQL jsonb.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _clean(value: Any, depth: int) -> Any:
    if depth > MAX_PAYLOAD_DEPTH:
        raise ValueError(f"payload nested deeper than {MAX_PAYLOAD_DEPTH} levels")
    if isinstance(value, str):
        return _UNSTORABLE.sub("\ufffd", value)
    if isinstance(value, Mapping):
        return {_clean(str(k), depth): _clean(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v, depth + 1) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("payload holds a non-finite number")
    if value is None or isinstance(value, bool | int | float):
        return value
    raise ValueError(f"payload holds a {type(value).__name__}, not a JSON value")


def encode_payload(payload: Mapping[str, Any]) -> str:
    """JSON text PostgreSQL's jsonb accepts: NUL and lone surrogates become U+FFFD.

    Raises ``ValueError`` for values no JSON document can hold (NaN, infinities, non-JSON
    types, nesting deeper than ``MAX_PAYLOAD_DEPTH``).
    """
    # fast path (every ordinary update): the text of a payload with nothing to clean is what
    # the cleaning walk would produce; anything doubtful takes the walk
    try:
        text = json.dumps(payload, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        text = None
    if (
        text is not None
        and text.count("{") + text.count("[") <= MAX_PAYLOAD_DEPTH  # so nesting is too
        and "\\u0000" not in text
        and _UNSTORABLE.search(text) is None
    ):
        return text
    return json.dumps(_clean(payload, 0), ensure_ascii=False, allow_nan=False)


def _int64(value: int | None, name: str) -> int | None:
    if value is not None and not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{name} does not fit a BIGINT")
    return value


def truncate_error(text: str) -> str:
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


def _ids(ids: Iterable[int]) -> list[int]:
    return list(dict.fromkeys(ids))


@attrs.frozen
class NewUpdate:
    """An update checked and encoded for the inbox (see :func:`new_update`)."""

    update_key: str
    update_id: int | None
    chat_id: int | None
    kind: str
    payload_json: str


def new_update(
    update_key: str,
    update_id: int | None,
    chat_id: int | None,
    kind: str,
    payload: Mapping[str, Any],
) -> NewUpdate:
    """Check and encode an update for storage, before any I/O.

    Raises ``ValueError`` when the values cannot be stored (ids outside BIGINT, payload not
    storable as jsonb, see ``encode_payload``).
    """
    _int64(update_id, "update_id")
    _int64(chat_id, "chat_id")
    return NewUpdate(update_key, update_id, chat_id, kind, encode_payload(payload))


async def insert_update(
    db: Queries,
    update_key: str,
    update_id: int | None,
    chat_id: int | None,
    kind: str,
    payload: Mapping[str, Any],
) -> int | None:
    """Store an update as ``pending``; its row id, or None if ``update_key`` is already stored.

    Raises ``ValueError`` before any I/O when the values cannot be stored (see ``new_update``).
    """
    new = new_update(update_key, update_id, chat_id, kind, payload)
    row_id: int | None = await db.fetchval(
        "INSERT INTO inbox (update_key, update_id, chat_id, kind, payload) "
        "VALUES ($1, $2, coalesce($3::bigint, 0), $4, $5::jsonb) "
        "ON CONFLICT (chat_id, update_key) DO NOTHING RETURNING id",
        new.update_key,
        new.update_id,
        new.chat_id,
        new.kind,
        new.payload_json,
    )
    return row_id


_INSERT_MANY = (
    "INSERT INTO inbox (update_key, update_id, chat_id, kind, payload) "
    "SELECT k, u, coalesce(c, 0), t, p::jsonb "
    "FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[], $5::text[]) "
    "WITH ORDINALITY AS r(k, u, c, t, p, n) ORDER BY n "
    "ON CONFLICT (chat_id, update_key) DO NOTHING RETURNING update_key, id"
)


async def insert_updates(db: Queries, updates: Sequence[NewUpdate]) -> list[int | None]:
    """Store several updates in one statement (one round trip, one commit), ids in list order.

    Per update: its new row id, or None when its key was already stored or appears earlier in
    ``updates``. All or nothing: an error stores none of them.
    """
    first: dict[str, int] = {}  # key -> index of its first occurrence
    for i, new in enumerate(updates):
        first.setdefault(new.update_key, i)
    rows = [updates[i] for i in first.values()]
    if not rows:
        return []
    recs = await db.fetch(
        _INSERT_MANY,
        [r.update_key for r in rows],
        [r.update_id for r in rows],
        [r.chat_id for r in rows],
        [r.kind for r in rows],
        [r.payload_json for r in rows],
    )
    ids = {rec["update_key"]: rec["id"] for rec in recs}
    return [
        ids.get(new.update_key) if first[new.update_key] == i else None
        for i, new in enumerate(updates)
    ]


async def get(db: Queries, chat_id: int, row_id: int) -> InboxRow | None:
    """One row of the chat by id."""
    rec = await db.fetchrow(f"{_ONE} id = $2", chat_id, row_id)
    return None if rec is None else InboxRow.from_record(rec)


async def get_by_key(db: Queries, chat_id: int, update_key: str) -> InboxRow | None:
    """One row of the chat by its update key (``update:<id>``)."""
    rec = await db.fetchrow(f"{_ONE} update_key = $2", chat_id, update_key)
    return None if rec is None else InboxRow.from_record(rec)


async def pending_for_chat(
    db: Queries, chat_id: int, *, limit: int | None = None
) -> list[InboxRow]:
    """Open rows of one chat (pending, processing, failed), oldest first."""
    recs = await db.fetch(
        f"SELECT {_COLUMNS} FROM inbox WHERE chat_id = $1 AND status = ANY($2::text[]) "
        "ORDER BY id LIMIT $3",
        chat_id,
        list(OPEN_STATUSES),
        limit,
    )
    return [InboxRow.from_record(r) for r in recs]


#: in a statement's RETURNING: its implicit transaction commits without waiting for the WAL
#: flush. Only for writes that a crash may lose without harm because the turn's own commit,
#: synchronous and later in the same WAL, makes them durable with it (a claim, the user row, a
#: usage row); an engram process crash loses nothing (the server still flushes its WAL).
#: Never inside a caller's transaction (a ``Connection``): it would apply to all of it.
ASYNC_COMMIT = "set_config('synchronous_commit', 'off', true)"


def async_commit(db: object) -> str:
    """:data:`ASYNC_COMMIT` for a statement that is its own transaction (``db`` is the pool);
    a plain NULL on a held connection, whose transaction is the caller's."""
    return "NULL" if isinstance(db, Connection) else ASYNC_COMMIT


_TAKE_OPEN = f"""
WITH open AS (
    SELECT {_COLUMNS} FROM inbox
    WHERE chat_id = $1 AND status = ANY($2::text[]) AND id > $3
), claimed AS (
    UPDATE inbox SET status = 'processing'
    WHERE chat_id = $1 AND id = (SELECT min(id) FROM open) AND attempts < $4 AND crashes < $5
      AND status = ANY($2::text[])
    RETURNING id, {{commit}}
)
SELECT open.*, open.id IN (SELECT id FROM claimed) AS claimed FROM open ORDER BY id
"""


async def take_open(
    db: Queries, chat_id: int, after: int, max_attempts: int, max_crashes: int = MAX_CRASHES
) -> tuple[list[InboxRow], int | None]:
    """Open rows of one chat with ids above ``after``, oldest first, and the first of them
    claimed (as :func:`mark_processing` would) unless it has ``max_attempts`` failures or
    ``max_crashes`` crashes already: the rows (as they were before the claim) and the claimed
    id. One round trip for the usual wake (one new row): read and claim. The later rows are
    claimed when their turn comes, so a crash finds only the rows actually in hand
    ``processing``. The claim commits asynchronously (:data:`ASYNC_COMMIT`): lost only with a
    database crash before the turn's commit, when the row is simply open again (and the crash
    is not counted)."""
    query = _TAKE_OPEN.format(commit=async_commit(db))
    recs = await db.fetch(query, chat_id, list(OPEN_STATUSES), after, max_attempts, max_crashes)
    claimed = next((r["id"] for r in recs if r["claimed"]), None)
    return [InboxRow.from_record(r) for r in recs], claimed


async def open_chats(db: Queries) -> list[int]:
    """Chats with open rows, the one with the oldest open row first (crash recovery)."""
    recs = await db.fetch(
        "SELECT chat_id FROM inbox WHERE chat_id <> 0 AND status = ANY($1::text[]) "
        "GROUP BY chat_id ORDER BY min(id) /* all chats: recovery sweep */",
        list(OPEN_STATUSES),
    )
    return [r["chat_id"] for r in recs]


async def recover_crashed(db: Queries) -> list[int]:
    """At a process start: rows still ``processing`` were in hand when a process died; they
    go back to ``pending`` with ``crashes`` + 1 (``attempts`` untouched). Their ids, in order.
    Run it once per process, before any chat actor claims a row."""
    recs = await db.fetch(
        "UPDATE inbox SET status = 'pending', crashes = crashes + 1 "
        "WHERE status = 'processing' RETURNING id /* all chats: crash recovery at a start */"
    )
    return sorted(r["id"] for r in recs)


async def release(db: Queries, chat_id: int, ids: Sequence[int], reason: str) -> int:
    """Hand claimed rows back, uncharged (``pending``, ``reason`` kept): their turn could not
    run for a cause outside them (the model is down) and is to be tried again. Final rows are
    left alone; returns the rows released."""
    recs = await db.fetch(
        "UPDATE inbox SET status = 'pending', last_error = $2 "
        "WHERE chat_id = $4 AND id = ANY($1::bigint[]) AND status = ANY($3::text[]) RETURNING id",
        _ids(ids),
        truncate_error(reason),
        list(OPEN_STATUSES),
        chat_id,
    )
    return len(recs)


async def mark_processing(db: Queries, chat_id: int, ids: Sequence[int]) -> int:
    """Claim open rows (no charge); final rows are left alone. Returns rows claimed."""
    recs = await db.fetch(
        "UPDATE inbox SET status = 'processing' "
        "WHERE chat_id = $3 AND id = ANY($1::bigint[]) AND status = ANY($2::text[]) RETURNING id",
        _ids(ids),
        list(OPEN_STATUSES),
        chat_id,
    )
    return len(recs)


async def mark_done(conn_or_db: Queries, chat_id: int, ids: Sequence[int]) -> int:
    """Mark rows done (final). Run it in the transaction that enqueued the turn's reply."""
    recs = await conn_or_db.fetch(
        "UPDATE inbox SET status = 'done', processed_at = now(), last_error = NULL "
        "WHERE chat_id = $2 AND id = ANY($1::bigint[]) AND status <> 'done' RETURNING id",
        _ids(ids),
        chat_id,
    )
    return len(recs)


async def mark_skipped(db: Queries, chat_id: int, ids: Sequence[int], reason: str) -> int:
    """Give up on rows (final), keeping ``reason`` in ``last_error``; done rows stay done."""
    recs = await db.fetch(
        "UPDATE inbox SET status = 'skipped', processed_at = now(), last_error = $2 "
        "WHERE chat_id = $3 AND id = ANY($1::bigint[]) AND status <> 'done' RETURNING id",
        _ids(ids),
        truncate_error(reason),
        chat_id,
    )
    if recs:
        log.info("inbox.skipped", ids=[r["id"] for r in recs], reason=truncate_error(reason)[:200])
    return len(recs)


async def mark_failed(db: Queries, chat_id: int, row_id: int, error: str) -> int | None:
    """Charge the row a failed attempt (``attempts`` + 1; it stays open for a retry); returns
    ``attempts``. None when the row does not exist or is already final.
    """
    attempts: int | None = await db.fetchval(
        "UPDATE inbox SET status = 'failed', attempts = attempts + 1, last_error = $2 "
        "WHERE chat_id = $4 AND id = $1 AND status = ANY($3::text[]) RETURNING attempts",
        row_id,
        truncate_error(error),
        list(OPEN_STATUSES),
        chat_id,
    )
    return attempts
