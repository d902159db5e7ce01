"""Journal test helpers: an entry written to the real database with its bag-of-words
embedding, a tool context, and tool calls through the journal registry."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from fakes.memory import DIMS, MODEL, FakeEmbedder, bag_of_words
from memory.journal.tools import journal_registry
from memory.tools.registry import ToolContext, ToolOutcome
from runtime.db import Database

NOW = datetime(2024, 6, 15, 10, 0, tzinfo=UTC)  # 12:00 in Madrid


async def add_entry(
    db: Database,
    uuid: str,
    at: str,
    text: str,
    *,
    tags: Sequence[str] = (),
    city: str | None = None,
    tz: str | None = "Europe/Madrid",
    vector: np.ndarray | None = None,
    embed: bool = True,
    chat_id: int = 1,
) -> int:
    """Insert one entry of ``chat_id``'s journal (``at`` is an ISO UTC instant) and, unless
    ``embed=False``, its vector."""
    created = datetime.fromisoformat(at).replace(tzinfo=UTC)
    entry_id: int = await db.fetchval(
        "INSERT INTO entries (uuid, created_at, timezone, text, tags, city, word_count, chat_id) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
        uuid,
        created,
        tz,
        text,
        list(tags),
        city,
        len(text.split()),
        chat_id,
    )
    if embed:
        vec = bag_of_words(text) if vector is None else vector
        await db.execute(
            "INSERT INTO entry_embeddings (entry_id, model, dims, embedding, chat_id) "
            "VALUES ($1, $2, $3, $4, $5)",
            entry_id,
            MODEL,
            DIMS,
            vec.astype(np.float32),
            chat_id,
        )
    return entry_id


def make_ctx(
    db: Any,
    embedder: FakeEmbedder | None = None,
    now: datetime = NOW,
    tz: str = "Europe/Madrid",
    chat_id: int = 1,
) -> ToolContext:
    return ToolContext(
        db=db,
        embedder=FakeEmbedder() if embedder is None else embedder,
        chat_id=chat_id,
        timezone=tz,
        now=now,
    )


REGISTRY = journal_registry()


async def call(ctx: ToolContext, name: str, **raw: Any) -> dict[str, Any]:
    out = await REGISTRY.call(name, raw, ctx)
    assert not out.is_error, out.content
    result: dict[str, Any] = json.loads(out.content)
    return result


async def call_error(ctx: ToolContext, name: str, raw: object) -> dict[str, Any]:
    out: ToolOutcome = await REGISTRY.call(name, raw, ctx)
    assert out.is_error, out.content
    result: dict[str, Any] = json.loads(out.content)
    return result
