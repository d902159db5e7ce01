"""Periodic maintenance: per-chat vector indexes for pattern retrieval, and the TTL of weak
patterns.

A chat too big for an exact scan and too small a share of the model's shared HNSW index gets
its own partial index (:func:`memory.retrieval.sql.ensure_chat_indexes`, built
``CONCURRENTLY`` so
other chats keep writing). This job runs that at start and then every ``interval`` seconds; a
failing pass is logged and retried at the next one.

The TTL (seed 000 "Privacy and retention controls"): an active pattern of low confidence
(< :data:`TTL_MAX_CONFIDENCE`), seen once and not for :data:`TTL_DAYS` days is deprecated by
:func:`expire_stale_patterns` (never a core tenet), audited as maintenance's ``expire``;
:class:`PatternTtlJob` runs it every ``interval``, then :func:`cap_patterns`: a chat with more
than ``MAX_PATTERNS_PER_CHAT`` active patterns loses the weakest (the typed weight of
:mod:`memory.retrieval.ranking`, lowest first; never a pinned one), each deprecated and audited
the same way, with :data:`CAP_REASON`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from memory.patterns.audit import change_status
from memory.retrieval.ranking import WEIGHT_JOINS, WEIGHT_SQL, weight_parameters
from memory.retrieval.sql import ensure_chat_indexes
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
/* all chats: pattern TTL sweep */
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
            done = await change_status(
                db,
                int(r["chat_id"]),
                int(r["id"]),
                "deprecated",
                action="expire",
                actor="maintenance",
                reason=TTL_REASON,
                allowed_from=("active",),
            )
            total += done is not None and done.changed
        if len(rows) < TTL_BATCH:
            return total


DEFAULT_MAX_PATTERNS = 20_000
CAP_REASON = "over the chat's limit of {cap} active memories (MAX_PATTERNS_PER_CHAT): the weakest"

_OVER_CAP = """
/* all chats: pattern cap sweep */
SELECT chat_id, count(*) - $1 AS over FROM patterns WHERE status = 'active'
GROUP BY chat_id HAVING count(*) > $1 ORDER BY chat_id
"""
_WEAKEST = f"""
SELECT p.id FROM patterns p {WEIGHT_JOINS}
WHERE p.chat_id = $1 AND p.status = 'active' AND NOT p.is_core_tenet
ORDER BY {WEIGHT_SQL}, p.id LIMIT $10
"""


async def cap_patterns(
    db: Queries, max_per_chat: int, now: datetime | None = None, timezone: str = "UTC"
) -> int:
    """Deprecate the weakest active patterns of every chat over ``max_per_chat`` (module
    docstring), each with its audit row; how many."""
    now = now or datetime.now(UTC)
    params = weight_parameters(now, timezone)
    reason = CAP_REASON.format(cap=max_per_chat)
    total = 0
    for chat in await db.fetch(_OVER_CAP, max_per_chat):
        chat_id = int(chat["chat_id"])
        weakest = await db.fetch(_WEAKEST, chat_id, now, *params, int(chat["over"]))
        for r in weakest:
            done = await change_status(
                db,
                chat_id,
                int(r["id"]),
                "deprecated",
                action="expire",
                actor="maintenance",
                reason=reason,
                allowed_from=("active",),
            )
            total += done is not None and done.changed
        log.info(
            "maintenance.patterns_capped", chat_id=chat_id, patterns=len(weakest), cap=max_per_chat
        )
    return total


class PatternTtlJob(PeriodicJob):
    """Background job: :func:`expire_stale_patterns` then :func:`cap_patterns` at start, then
    every ``interval`` s."""

    name = "pattern_ttl"

    def __init__(
        self,
        db: Queries,
        *,
        interval: float,
        max_per_chat: int = DEFAULT_MAX_PATTERNS,
        timezone: str = "UTC",
    ) -> None:
        super().__init__(interval)
        self.db, self.max_per_chat, self.timezone = db, max_per_chat, timezone

    async def run_once(self) -> int:
        expired = await expire_stale_patterns(self.db)
        if expired:
            log.info("maintenance.patterns_expired", patterns=expired)
        capped = await cap_patterns(self.db, self.max_per_chat, timezone=self.timezone)
        return expired + capped
