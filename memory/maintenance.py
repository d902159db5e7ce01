"""Periodic maintenance: per-chat vector indexes for pattern retrieval.

A chat too big for an exact scan and too small a share of the model's shared HNSW index gets
its own partial index (:func:`memory.retrieval.ensure_chat_indexes`, built ``CONCURRENTLY`` so
other chats keep writing). This job runs that at start and then every ``interval`` seconds; a
failing pass is logged and retried at the next one.
"""

from __future__ import annotations

from typing import Any

import trio

from memory.embedding_store import Queries
from memory.retrieval import ensure_chat_indexes
from runtime.logs import get_logger

log = get_logger(__name__)


class ChatIndexJob:
    """Background job keeping per-chat pattern indexes for ``model`` in place."""

    def __init__(
        self, db: Queries, *, model: str, dims: int, interval: float, **options: Any
    ) -> None:
        self.db, self.model, self.dims, self.interval = db, model, dims, interval
        self.options = options  # passed to ensure_chat_indexes (plan limits)
        self.passes = 0
        self.failures = 0
        self.indexed: list[int] = []

    async def run_once(self) -> list[int]:
        chats = await ensure_chat_indexes(self.db, self.model, self.dims, **self.options)
        if chats:
            log.info("maintenance.chat_indexes", model=self.model, chats=len(chats))
        self.indexed.extend(chats)
        return chats

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started(self)
        while True:
            try:
                await self.run_once()
            except Exception as exc:  # a database hiccup must not end the job
                self.failures += 1
                log.warning("maintenance.failed", error=f"{type(exc).__name__}: {exc}")
            else:
                self.passes += 1
            await trio.sleep(self.interval)
