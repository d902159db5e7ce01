"""The search behind ``recall_conversation``: what was said in this chat, by words and meaning.

Two sources, both of one chat only (every statement filters on ``chat_id``):

* **messages** — the retained ``chat_messages`` rows the person and the bot wrote (compacted or
  not, until the retention purge), by full text (``text_search``, migration 003), ranked by
  ``ts_rank_cd``; each hit says whether it was compacted and, if so, the episode it lies in;
* **episodes** — the summaries of compacted spans, by full text and by the cosine of their
  vectors (``episode_embeddings`` of the query's model, an exact scan of the chat's own), fused by
  reciprocal rank (:func:`memory.retrieval.ranking.rrf`).

The query's content words are OR-ed (:func:`memory.retrieval.query_text.or_tsquery`), so a
question matches the messages sharing most of its words first. An optional ``[start, end)``
window of instants restricts both sources (an episode counts when its span overlaps it). With no
content words the window alone selects: its newest messages and episodes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

import attrs

from memory.conversation.episodes import Episode, episode_from_record
from memory.embeddings.store import check_model
from memory.retrieval.query_text import or_tsquery
from memory.retrieval.ranking import rrf
from runtime.concurrency import both
from runtime.db import Database, Queries

T = TypeVar("T")
#: candidates each episode arm contributes to the fusion
EPISODE_CANDIDATES = 20


@attrs.frozen
class MessageHit:
    """A retained message that matched: its row, whether it was compacted and its episode."""

    id: int
    role: str
    content: str
    created_at: datetime
    compacted: bool
    episode_id: int | None


@attrs.frozen
class Span:
    """The instants ``[start, end)`` a search is restricted to (either end open)."""

    start: datetime | None = None
    end: datetime | None = None


@attrs.frozen
class QueryVector:
    """The query's embedding, its model and dims, and the similarity floor for episodes."""

    vector: Any
    model: str
    dims: int
    floor: float


# Each statement comes in two forms: with content words ($2 the tsquery text: matches ranked by
# ts_rank_cd, the GIN index finds them) and without ($2 unused: the newest in the span).
_MATCH = "{col} @@ to_tsquery('english', $2)"
_RANK = "ts_rank_cd({col}, to_tsquery('english', $2))"


def _text_forms(template: str, col: str) -> tuple[str, str]:
    """``template`` with ``{match}``/``{rank}`` filled: (with words, without words)."""
    words = template.format(match="AND " + _MATCH.format(col=col), rank=_RANK.format(col=col))
    newest = template.format(match="AND $2::text IS NOT NULL", rank="0::real")
    return words, newest


# $1 chat, $2 tsquery text, $3 start, $4 end, $5 limit
_MESSAGES = _text_forms(
    """
WITH hit AS (
    SELECT m.id, m.role, m.content, m.created_at, m.compacted_at IS NOT NULL AS compacted,
           {rank} AS rank
    FROM chat_messages m
    WHERE m.chat_id = $1 AND m.role IN ('user', 'assistant') {match}
      AND ($3::timestamptz IS NULL OR m.created_at >= $3)
      AND ($4::timestamptz IS NULL OR m.created_at < $4)
    ORDER BY rank DESC, m.created_at DESC, m.id DESC
    LIMIT $5
)
SELECT hit.*, (SELECT e.id FROM episodes e
               WHERE e.chat_id = $1 AND hit.compacted
                 AND hit.id BETWEEN e.first_message_id AND e.last_message_id
               ORDER BY e.id LIMIT 1) AS episode_id
FROM hit ORDER BY rank DESC, created_at DESC, id DESC
""",
    "m.text_search",
)
_EPISODE_SPAN = """
  AND ($3::timestamptz IS NULL OR e.ended_at >= $3)
  AND ($4::timestamptz IS NULL OR e.started_at < $4)
"""
# $1 chat, $2 tsquery text, $3 start, $4 end, $5 limit
_EPISODE_TEXT = _text_forms(
    f"""
SELECT e.id FROM episodes e WHERE e.chat_id = $1 {{match}} {_EPISODE_SPAN}
ORDER BY {{rank}} DESC, e.ended_at DESC, e.id DESC
LIMIT $5
""",
    "e.text_search",
)
# $1 chat, $2 model, $3 start, $4 end, $5 limit, $6 vector, $7 dims, $8 similarity floor
_EPISODE_VECTOR = f"""
SELECT e.id FROM episode_embeddings ee JOIN episodes e ON e.id = ee.episode_id
WHERE ee.chat_id = $1 AND ee.model = $2 AND ee.dims = $7 AND e.chat_id = $1 {_EPISODE_SPAN}
  AND 1 - (ee.embedding <=> $6::vector) >= $8
ORDER BY ee.embedding <=> $6::vector, e.ended_at DESC
LIMIT $5
"""
_EPISODES_BY_ID = """
SELECT id, summary, started_at, ended_at, message_count FROM episodes
WHERE chat_id = $1 AND id = ANY($2::bigint[])
"""


async def _pair(
    db: Queries, first: Callable[[], Awaitable[T]], second: Callable[[], Awaitable[Any]]
) -> tuple[T, Any]:
    """Both at once on a pool (two connections), one after the other on one connection."""
    if isinstance(db, Database):
        return await both(first, second)
    return await first(), await second()


async def search_messages(
    db: Queries, chat_id: int, query: str, span: Span, limit: int
) -> list[MessageHit]:
    """The chat's retained messages best matching ``query`` (see the module docstring)."""
    terms = or_tsquery(query)
    sql = _MESSAGES[0] if terms else _MESSAGES[1]
    rows = await db.fetch(sql, chat_id, terms, span.start, span.end, limit)
    return [
        MessageHit(
            r["id"], r["role"], r["content"], r["created_at"], r["compacted"], r["episode_id"]
        )
        for r in rows
    ]


async def search_episodes(
    db: Queries,
    chat_id: int,
    query: str,
    span: Span,
    limit: int,
    vector: Callable[[], Awaitable[QueryVector | None]] | None = None,
) -> list[Episode]:
    """The chat's episodes best matching ``query``: the full-text and the vector arm fused by
    reciprocal rank (``vector`` embeds the query; None or a None result: words only)."""
    terms = or_tsquery(query)

    async def words() -> list[int]:
        sql = _EPISODE_TEXT[0] if terms else _EPISODE_TEXT[1]
        rows = await db.fetch(sql, chat_id, terms, span.start, span.end, EPISODE_CANDIDATES)
        return [r["id"] for r in rows]

    async def meaning() -> list[int]:
        q = await vector() if vector is not None else None
        if q is None:
            return []
        rows = await db.fetch(
            _EPISODE_VECTOR,
            chat_id,
            check_model(q.model),
            span.start,
            span.end,
            EPISODE_CANDIDATES,
            q.vector,
            q.dims,
            q.floor,
        )
        return [r["id"] for r in rows]

    text_ids, vector_ids = await _pair(db, words, meaning)
    ranked = [i for i, _ in rrf([text_ids, vector_ids])][:limit]
    if not ranked:
        return []
    found = {
        r["id"]: episode_from_record(r) for r in await db.fetch(_EPISODES_BY_ID, chat_id, ranked)
    }
    return [found[i] for i in ranked if i in found]


async def recall(
    db: Queries,
    chat_id: int,
    query: str,
    span: Span,
    *,
    messages: int,
    episodes: int,
    vector: Callable[[], Awaitable[QueryVector | None]] | None = None,
) -> tuple[list[MessageHit], list[Episode]]:
    """:func:`search_messages` and :func:`search_episodes` at once (on a pool)."""
    return await _pair(
        db,
        lambda: search_messages(db, chat_id, query, span, messages),
        lambda: search_episodes(db, chat_id, query, span, episodes, vector),
    )


def has_terms(query: str) -> bool:
    """Whether ``query`` has a content word to search for."""
    return bool(or_tsquery(query))


__all__ = [
    "MessageHit",
    "QueryVector",
    "Span",
    "has_terms",
    "recall",
    "search_episodes",
    "search_messages",
]
