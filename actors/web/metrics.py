"""``GET /metrics``: :data:`runtime.metrics.REGISTRY` in the Prometheus text format.

Counters and histograms are observed where things happen; the gauges that describe the
database (inbox/outbox depth, patterns by status) are read by :func:`refresh` within ``limit``
seconds (an unreachable database leaves their last values and sets ``engram_database_up`` to
0), at most once per ``every`` seconds (:class:`Refresher`: scrapes meanwhile, however many,
share the last reading, so a flood of scrapes is no flood of counts over every chat's rows).
With ``METRICS_TOKEN`` a scrape needs ``Authorization: Bearer <token>`` (401 otherwise);
``METRICS=off`` registers nothing (404).
"""

from __future__ import annotations

import attrs
import trio
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from quart import Blueprint, Response, request

from actors.web.auth import bearer, same
from runtime import metrics
from runtime.db import Queries
from runtime.errors import DatabaseError
from runtime.logs import get_logger

log = get_logger(__name__)

_DEPTHS = """
/* all chats: metrics gauges over every chat */
SELECT 'inbox' AS q, status, count(*) AS n FROM inbox
WHERE status IN ('pending', 'processing') GROUP BY status
UNION ALL
SELECT 'outbox', status, count(*) FROM outbox WHERE status IN ('pending', 'sending') GROUP BY status
UNION ALL
SELECT 'patterns', status, sum(n)::bigint FROM chat_pattern_counts GROUP BY status
"""
_OPEN = {"inbox": ("pending", "processing"), "outbox": ("pending", "sending")}


async def refresh(db: Queries, limit: float = 2.0) -> bool:
    """Set the database's gauges; False when it could not be read within ``limit`` seconds."""
    with trio.move_on_after(limit):
        try:
            rows = await db.fetch(_DEPTHS)
        except DatabaseError as exc:
            log.warning("metrics.refresh_failed", error=type(exc).__name__)
            metrics.DATABASE_UP.set(0)
            return False
        seen = {(str(r["q"]), str(r["status"])): int(r["n"]) for r in rows}
        for q, gauge in (("inbox", metrics.INBOX_DEPTH), ("outbox", metrics.OUTBOX_DEPTH)):
            for status in _OPEN[q]:
                gauge.labels(status).set(seen.get((q, status), 0))
        for (q, status), n in seen.items():
            if q == "patterns":
                metrics.PATTERNS.labels(status).set(n)
        metrics.DATABASE_UP.set(1)
        return True
    metrics.DATABASE_UP.set(0)
    return False


@attrs.define
class Refresher:
    """:func:`refresh` at most once per ``every`` seconds; concurrent callers wait for one."""

    db: Queries
    every: float = 1.0
    readings: int = 0
    _at: float | None = attrs.field(default=None, init=False)
    _lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)

    async def __call__(self) -> None:
        async with self._lock:
            now = trio.current_time()
            if self._at is not None and now - self._at < self.every:
                return
            self.readings += 1
            await refresh(self.db)
            self._at = trio.current_time()


def metrics_blueprint(db: Queries, token: str = "", *, every: float = 1.0) -> Blueprint:
    """``GET /metrics`` (``token``: the bearer token it requires, empty for none; ``every``:
    the least seconds between two readings of the database's gauges)."""
    bp = Blueprint("metrics", __name__)
    refresher = Refresher(db, every)

    @bp.get("/metrics")
    async def scrape() -> Response:
        if token:
            given = bearer(request.headers.get("Authorization"))
            if given is None or not same(given, token):
                return Response(
                    "unauthorized\n",
                    401,
                    {"WWW-Authenticate": 'Bearer realm="metrics"'},
                    content_type="text/plain",
                )
        await refresher()
        return Response(generate_latest(metrics.REGISTRY), 200, content_type=CONTENT_TYPE_LATEST)

    return bp
