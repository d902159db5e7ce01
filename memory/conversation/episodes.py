"""Episodes: the summary compaction writes for every span it compacts (episodic memory, seed
003 §2.2; seed 004 "summaries of older chunks"), read back into every turn.

Each :class:`Episode` covers one compacted chunk: its summary (1-3 sentences, in the third
person), the times of its first and last message and how many messages it stood for. A turn
loads the chat's newest ones (:meth:`SqlEpisodes.recent`, one indexed query, concurrently with
the window and the pattern retrieval) and shows those that fit ``EPISODE_BUDGET_TOKENS`` as
"Earlier in this conversation" (:func:`actors.agent.context.episodes_section`), so the model
knows what was said before its window even when no pattern matches. Their full text is
searched by ``recall_conversation`` (:mod:`memory.retrieval.recall`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

import attrs

from runtime.db import Queries

#: the default of ``EPISODE_BUDGET_TOKENS``: about ten summaries (a summary is 1-3 sentences,
#: ~40-80 tokens with its dates), i.e. the last ~400 compacted messages at the default chunk of
#: 40, for 3 % of the default context budget; the patterns carry what lasts beyond that
EPISODE_BUDGET_TOKENS = 800
#: the fewest tokens one shown episode takes ("[2026-03-01] " is 4, "User slept." 3): a turn
#: loads ``budget // MIN_EPISODE_TOKENS`` episodes, more than can fit
MIN_EPISODE_TOKENS = 6


@attrs.frozen
class Episode:
    """One compacted span: its summary, the times of its first and last message, its size."""

    id: int
    summary: str
    started_at: datetime
    ended_at: datetime
    message_count: int


def episode_from_record(record: Any) -> Episode:
    """An ``episodes`` record (id, summary, started_at, ended_at, message_count)."""
    return Episode(
        id=record["id"],
        summary=record["summary"],
        started_at=record["started_at"],
        ended_at=record["ended_at"],
        message_count=record["message_count"],
    )


def episodes_to_load(budget_tokens: int) -> int:
    """How many of the newest episodes a turn loads for a section of ``budget_tokens``."""
    return max(0, budget_tokens // MIN_EPISODE_TOKENS)


class EpisodeSource(Protocol):
    """What the agent needs of ``episodes`` (SQL in production, nothing in unit tests)."""

    async def recent(self, chat_id: int, limit: int) -> Sequence[Episode]:
        """The chat's ``limit`` newest episodes, newest first."""
        ...


@attrs.frozen
class NoEpisodes:
    """An :class:`EpisodeSource` without episodes."""

    async def recent(self, chat_id: int, limit: int) -> Sequence[Episode]:
        return ()


_RECENT = """
SELECT id, summary, started_at, ended_at, message_count FROM episodes
WHERE chat_id = $1 ORDER BY ended_at DESC, id DESC LIMIT $2
"""


@attrs.frozen
class SqlEpisodes:
    """:class:`EpisodeSource` on PostgreSQL (``idx_episodes_chat``: chat, ended_at)."""

    db: Queries

    async def recent(self, chat_id: int, limit: int) -> Sequence[Episode]:
        if limit <= 0:
            return ()
        return [episode_from_record(r) for r in await self.db.fetch(_RECENT, chat_id, limit)]


_PAGE = """
SELECT id, summary, started_at, ended_at, message_count FROM episodes e
WHERE chat_id = $1
  AND ($3::bigint IS NULL OR (ended_at, id) < (
       SELECT b.ended_at, b.id FROM episodes b WHERE b.id = $3 AND b.chat_id = $1))
ORDER BY ended_at DESC, id DESC LIMIT $2
"""


async def episodes_page(
    db: Queries, chat_id: int, limit: int, before: int | None = None
) -> list[Episode]:
    """The chat's newest ``limit`` episodes, newest first; ``before``: only those older than
    that episode of the chat (the next page; none when it is not the chat's)."""
    return [episode_from_record(r) for r in await db.fetch(_PAGE, chat_id, limit, before)]
