"""Durable ingress shared by the webhook and the long-polling loop.

``ingest`` takes one parsed update and decides, in this order: unknown kind -> acknowledged and
skipped; chat not allowed -> handed to ``strangers`` (``actors.telegram.pairing.ChatAccess``:
kept for a later pairing, or this very update pairs the chat and goes on), or without it
dropped with a log line; seen in the in-memory dedupe cache ->
duplicate; otherwise INSERT into the inbox (the unique update key makes a retry a no-op; the
webhook passes ``insert``, the group-committing inbox writer, the poller inserts on ``db``) and
then tell the router. The caller acknowledges Telegram only after this returns (webhook 200,
polling offset), so an acknowledged update is always in the inbox.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Container, Mapping
from typing import Any

import trio

from actors.queues import inbox
from actors.queues.dedupe import DedupeCache
from actors.telegram.types import Update, dedupe_keys
from runtime.db import Queries
from runtime.logs import get_logger

log = get_logger(__name__)

Notify = Callable[[int, Update], None]
# (update_key, update_id, chat_id, kind, payload) -> inbox row id, None for a duplicate key
InsertUpdate = Callable[
    [str, int | None, int | None, str, Mapping[str, Any]], Awaitable[int | None]
]
#: An update of a chat not allowed -> True when it is to be stored as usual (it paired the
#: chat), False when it was dealt with (kept, acknowledged). Raises like ``insert``.
Strangers = Callable[[Update, Mapping[str, Any]], Awaitable[bool]]


class Outcome(enum.Enum):
    STORED = "stored"
    DUPLICATE = "duplicate"
    NOT_ALLOWED = "not_allowed"
    HELD = "held"
    UNKNOWN_KIND = "unknown_kind"


async def ingest(
    db: Queries,
    update: Update,
    payload: Mapping[str, Any],
    *,
    allowed_chat_ids: Container[int],
    dedupe: DedupeCache,
    notify: Notify,
    clock: Callable[[], float] = trio.current_time,
    source: str = "webhook",
    insert: InsertUpdate | None = None,
    strangers: Strangers | None = None,
) -> Outcome:
    """Store an accepted update durably, then notify. Raises ValueError (unstorable payload)
    and DatabaseError (storage down) so the caller can refuse the acknowledgement."""
    if update.kind == "unknown":
        log.info(
            "ingest.unknown_kind",
            update_id=update.update_id,
            unknown=update.unknown_kind,
            source=source,
        )
        return Outcome.UNKNOWN_KIND
    chat_id = update.chat_id
    if chat_id is not None and chat_id not in allowed_chat_ids and strangers is not None:
        if not await strangers(update, payload):
            return Outcome.HELD
    elif chat_id is None or chat_id not in allowed_chat_ids:
        log.warning(
            "ingest.chat_not_allowed",
            update_id=update.update_id,
            chat_id=chat_id,
            kind=update.kind,
            source=source,
        )
        return Outcome.NOT_ALLOWED
    keys = dedupe_keys(update)
    hit = dedupe.match(keys, clock())
    if hit is not None:
        log.info("ingest.duplicate", update_id=update.update_id, key=hit, via="cache")
        return Outcome.DUPLICATE
    if insert is None:
        row_id = await inbox.insert_update(
            db, keys[0], update.update_id, chat_id, update.kind, payload
        )
    else:
        row_id = await insert(keys[0], update.update_id, chat_id, update.kind, payload)
    dedupe.add(keys, clock())
    if row_id is None:
        log.info("ingest.duplicate", update_id=update.update_id, key=keys[0], via="db")
        return Outcome.DUPLICATE
    log.info(
        "ingest.accepted",
        update_id=update.update_id,
        chat_id=chat_id,
        kind=update.kind,
        inbox_id=row_id,
        source=source,
    )
    try:
        notify(row_id, update)
    except Exception as exc:  # the row is durable; the router's sweep picks it up
        log.error("ingest.notify_failed", chat_id=chat_id, error=repr(exc)[:300])
    return Outcome.STORED
