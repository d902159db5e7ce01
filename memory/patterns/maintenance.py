"""Periodic maintenance: per-chat vector indexes for pattern retrieval.

A chat too big for an exact scan and too small a share of the model's shared HNSW index gets
its own partial index (:func:`memory.patterns.retrieval.ensure_chat_indexes`, built
``CONCURRENTLY`` so
other chats keep writing). This job runs that at start and then every ``interval`` seconds; a
failing pass is logged and retried at the next one.
"""

from __future__ import annotations

from typing import Any

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
