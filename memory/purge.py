"""The retention purge: compacted messages are hard-deleted after ``MESSAGE_RETENTION_DAYS``.

Compaction only soft-deletes (``compacted_at``), leaving time to audit what the extractor made
of a span (seed 000, "Concurrency safety" step 5, "Extraction reliability"). The patterns keep
their evidence as immutable text in ``pattern_observations``, so nothing they need goes away.
``0`` days keeps compacted messages forever. :class:`PurgeJob` runs the purge at start and then
every ``MAINTENANCE_INTERVAL`` seconds; a failed pass is logged and the next one tries again.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import trio

from runtime.logs import get_logger

log = get_logger(__name__)

BATCH = 5000  # rows per DELETE: short transactions, no long lock on a big backlog


class Queries(Protocol):
    async def execute(self, query: str, *args: Any) -> str: ...


_DELETE = """
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


class PurgeJob:
    """Background job: :func:`purge_compacted` at start, then every ``interval`` seconds."""

    def __init__(self, db: Queries, *, retention_days: int, interval: float) -> None:
        self.db, self.retention_days, self.interval = db, retention_days, interval
        self.passes = 0
        self.failures = 0
        self.deleted = 0

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started(self)
        if self.retention_days <= 0:
            log.info("purge.disabled", retention_days=self.retention_days)
            await trio.sleep_forever()
        while True:
            try:
                count = await purge_compacted(self.db, self.retention_days)
            except Exception as exc:  # a database hiccup must not end the job
                self.failures += 1
                log.warning("purge.failed", error=f"{type(exc).__name__}: {exc}")
            else:
                self.passes += 1
                self.deleted += count
                if count:
                    log.info("purge.deleted", messages=count, retention_days=self.retention_days)
            await trio.sleep(self.interval)
