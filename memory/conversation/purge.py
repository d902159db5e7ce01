"""The retention purge: compacted messages are hard-deleted after ``MESSAGE_RETENTION_DAYS``,
and the queues keep no message text longer (:func:`scrub_queues`): a finished inbox row keeps
its key (dedupe) but its payload becomes ``{}``, a finished outbox row keeps no text or
keyboard, a stranger's held update is deleted (the pairing job already drops them after 24 h).

Compaction only soft-deletes (``compacted_at``), leaving time to audit what the extractor made
of a span (seed 000, "Concurrency safety" step 5, "Extraction reliability"). The patterns keep
their evidence as immutable text in ``pattern_observations``, so nothing they need goes away.
``0`` days keeps compacted messages forever. :class:`PurgeJob` runs the purge at start and then
every ``MAINTENANCE_INTERVAL`` seconds; a failed pass is logged and the next one tries again.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import trio

from runtime.db import Queries
from runtime.logs import get_logger
from runtime.periodic import PeriodicJob

log = get_logger(__name__)

BATCH = 5000  # rows per DELETE: short transactions, no long lock on a big backlog


_DELETE = """
/* all chats: retention purge */
DELETE FROM chat_messages WHERE id IN (
    SELECT id FROM chat_messages
    WHERE compacted_at IS NOT NULL AND compacted_at < $1
    LIMIT $2
)
"""


async def purge_compacted(
    db: Queries, retention_days: int, now: datetime | None = None, *, batch: int = BATCH
) -> int:
    """Delete the messages compacted more than ``retention_days`` before ``now``; the count.

    Uncompacted messages are never touched; ``retention_days <= 0`` deletes nothing.
    """
    if retention_days <= 0:
        return 0
    cutoff = (now or datetime.now(UTC)) - timedelta(days=retention_days)
    total = 0
    while True:
        status = await db.execute(_DELETE, cutoff, batch)
        deleted = int(status.split()[-1])
        total += deleted
        if deleted < batch:
            return total


# $1 cutoff, $2 batch
_SCRUB = (
    """/* all chats: retention purge */
UPDATE inbox SET payload = '{}'::jsonb WHERE id IN (
        SELECT id FROM inbox WHERE status IN ('done', 'skipped', 'failed')
          AND payload <> '{}'::jsonb AND received_at < $1 LIMIT $2)""",
    """/* all chats: retention purge */
UPDATE outbox SET text = '', reply_markup = NULL WHERE id IN (
        SELECT id FROM outbox WHERE status IN ('sent', 'failed', 'uncertain')
          AND (text <> '' OR reply_markup IS NOT NULL) AND created_at < $1 LIMIT $2)""",
    """/* all chats: retention purge */
DELETE FROM held_updates WHERE (chat_id, id) IN (
        SELECT chat_id, id FROM held_updates WHERE received_at < $1 LIMIT $2)""",
)


async def scrub_queues(
    db: Queries, retention_days: int, now: datetime | None = None, *, batch: int = BATCH
) -> int:
    """Drop the message text the queues still keep of rows older than ``retention_days``
    (finished inbox payloads, finished outbox texts, held updates); how many rows.
    ``retention_days <= 0`` drops nothing."""
    if retention_days <= 0:
        return 0
    cutoff = (now or datetime.now(UTC)) - timedelta(days=retention_days)
    total = 0
    for statement in _SCRUB:
        while True:
            done = int((await db.execute(statement, cutoff, batch)).split()[-1])
            total += done
            if done < batch:
                break
    return total


class PurgeJob(PeriodicJob):
    """Background job: :func:`purge_compacted` at start, then every ``interval`` seconds."""

    name = "purge"

    def __init__(self, db: Queries, *, retention_days: int, interval: float) -> None:
        super().__init__(interval)
        self.db, self.retention_days = db, retention_days
        self.deleted = 0

    async def run_once(self) -> int:
        count = await purge_compacted(self.db, self.retention_days)
        scrubbed = await scrub_queues(self.db, self.retention_days)
        self.deleted += count
        if count or scrubbed:
            log.info(
                "purge.deleted",
                messages=count,
                queue_rows_scrubbed=scrubbed,
                retention_days=self.retention_days,
            )
        return count

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        if self.retention_days <= 0:
            task_status.started(self)
            log.info("purge.disabled", retention_days=self.retention_days)
            await trio.sleep_forever()
        await super().run(task_status=task_status)
