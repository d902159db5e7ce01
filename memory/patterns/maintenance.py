"""Periodic maintenance: per-chat vector indexes for pattern retrieval, and the TTL of weak
patterns.

A chat too big for an exact scan and too small a share of the model's shared HNSW index gets
its own partial index (:func:`memory.patterns.retrieval.ensure_chat_indexes`, built
``CONCURRENTLY`` so
other chats keep writing). This job runs that at start and then every ``interval`` seconds; a
failing pass is logged and retried at the next one.

The TTL (seed 000 "Privacy and retention controls"): an active pattern of low confidence
(< :data:`TTL_MAX_CONFIDENCE`), seen once and not for :data:`TTL_DAYS` days is deprecated by
:func:`expire_stale_patterns` (never a core tenet), audited as maintenance's ``expire``;
:class:`PatternTtlJob` runs it every ``interval``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from memory.patterns.audit import change_status
from memory.patterns.retrieval import ensure_chat_indexes
from runtime.db import Queries
from runtime.logs import get_logger
from runtime.periodic import PeriodicJob

log = get_logger(__name__)


class ChatIndexJob(PeriodicJob):
    """Background job keeping per-chat pattern indexes for ``model`` in place."""

    name = "maintenance"

    def __init__(
        self, db: Queries, *, model: str, dims: int, interval: float, **options: Any
    ) -> None:
        super().__init__(interval)
        self.db, self.model, self.dims = db, model, dims
        self.options = options  # passed to ensure_chat_indexes (plan limits)
        self.indexed: list[int] = []

    async def run_once(self) -> list[int]:
        chats = await ensure_chat_indexes(self.db, self.model, self.dims, **self.options)
        if chats:
            log.info("maintenance.chat_indexes", model=self.model, chats=len(chats))
        self.indexed.extend(chats)
        return chats


TTL_DAYS = 90
TTL_MAX_CONFIDENCE = 0.3
TTL_REASON = f"expired: confidence below {TTL_MAX_CONFIDENCE}, seen once, not for {TTL_DAYS} days"
TTL_BATCH = 500

_STALE = """
SELECT chat_id, id FROM patterns
WHERE status = 'active' AND NOT is_core_tenet AND confidence < $2 AND times_seen = 1
  AND last_seen < $1
ORDER BY id LIMIT $3
"""


async def expire_stale_patterns(db: Queries, now: datetime | None = None) -> int:
    """Deprecate every stale weak pattern (module docstring), each with its audit row; how many."""
    cutoff = (now or datetime.now(UTC)) - timedelta(days=TTL_DAYS)
    total = 0
    while True:
        rows = await db.fetch(_STALE, cutoff, TTL_MAX_CONFIDENCE, TTL_BATCH)
        for r in rows:
            done = await change_status(db, int(r["chat_id"]), int(r["id"]), "deprecated",
                                       action="expire", actor="maintenance", reason=TTL_REASON,
                                       allowed_from=("active",))  # fmt: skip
            total += done is not None and done.changed
        if len(rows) < TTL_BATCH:
            return total


class PatternTtlJob(PeriodicJob):
    """Background job: :func:`expire_stale_patterns` at start, then every ``interval`` s."""

    name = "pattern_ttl"

    def __init__(self, db: Queries, *, interval: float) -> None:
        super().__init__(interval)
        self.db = db

    async def run_once(self) -> int:
        expired = await expire_stale_patterns(self.db)
        if expired:
            log.info("maintenance.patterns_expired", patterns=expired)
        return expired
