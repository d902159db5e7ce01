"""What a person may see of their memory (seed 000 "User-facing memory controls", seed 004
Phase 5): the reads behind ``/memory``, ``/memory list``, ``/memory search``, ``/forget <topic>``
and ``/summary``. Each reads one chat only (another chat's patterns never appear) and calls no
model; the wording is the chat command's (:mod:`actors.chat.memory_commands`).

* :func:`profile_view` — seed 004 Test 11's profile: core tenets, facts, preferences, active
  goals (each group strongest first: ``strength × confidence``, through
  ``idx_patterns_active_rank``), the upcoming dated events, every other active pattern
  (beliefs, behaviours, past events...: ``other``, strongest first; so each active pattern
  counted has a group it shows in), and the counts (patterns by status
  from ``chat_pattern_counts``, a view counting the chat's patterns by an index-only scan,
  ~9 ms at 100,000 patterns; messages, episodes); two statements.
* :func:`list_patterns` — the strongest active patterns (optionally of one kind) by their
  typed weight (:data:`memory.retrieval.ranking.WEIGHT_SQL`: decay, strength, confidence, boosts —
  the retrieval score without the query).
* :func:`search_patterns` — the product's retrieval
  (:func:`memory.retrieval.retriever.rank_patterns`) with its scores.
* :func:`topic_matches` — what ``/forget <topic>`` offers: the retrieval's matches and the
  patterns whose words contain the topic (full text), live ones only.
* :func:`summary_view` — the chat's episodes, newest first, and the current window's size.

The detail of one pattern (``/memory why``) is :mod:`memory.patterns.why`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import date, datetime, time
from typing import Any

import attrs

from memory.conversation.episodes import Episode, episode_from_record
from memory.embeddings.providers import Embedder
from memory.embeddings.thresholds import Thresholds
from memory.patterns.topic import topic_tsquery, topic_words
from memory.retrieval.ranking import WEIGHT_JOINS, WEIGHT_SQL, local_today, weight_parameters
from memory.retrieval.retriever import rank_patterns
from memory.retrieval.sql import DEFAULT_CANDIDATES, LexiconCache, VectorPlanner
from runtime.concurrency import both
from runtime.db import Queries

GROUP_SIZE = 10  # items per group of the profile view
PROFILE_KINDS = ("fact", "preference", "goal")
STATUSES = ("active", "disputed", "superseded", "deprecated", "merged")


@attrs.frozen
class Item:
    """One pattern as the person sees it."""

    id: int
    kind: str
    content: str
    status: str = "active"
    core: bool = False
    occurs_on: date | None = None
    occurs_at: time | None = None
    score: float | None = None  # a weight or a retrieval score, when there is one
    similarity: float | None = None


@attrs.frozen
class ProfileView:
    """Seed 004's profile: the groups and the counts."""

    groups: dict[str, tuple[Item, ...]]  # core, fact, preference, goal, event, other
    by_status: dict[str, int]
    messages: int  # retained messages (the person's and the bot's), compacted or not
    verbatim: int  # of which not compacted yet (the window)
    episodes: int
    summarized: int  # messages the episodes stand for

    @property
    def patterns(self) -> int:
        return sum(self.by_status.values())


def _item(r: Any, score: str | None = None) -> Item:
    return Item(
        id=int(r["id"]),
        kind=str(r["kind"]),
        content=str(r["content"]),
        status=str(r["status"]),
        core=bool(r["is_core_tenet"]),
        occurs_on=r["occurs_on"],
        occurs_at=r["occurs_at"],
        score=None if score is None else float(r[score]),
    )


_COLUMNS = "id, kind, content, status, is_core_tenet, occurs_on, occurs_at"

# $1 chat, $2 kinds, $3 per group, $4 today (local)
_PROFILE = f"""
(SELECT 'core' AS grp, {_COLUMNS} FROM patterns
 WHERE chat_id = $1 AND is_core_tenet AND status = 'active'
 ORDER BY strength * confidence DESC LIMIT $3)
UNION ALL
(SELECT k.kind, p.* FROM unnest($2::text[]) AS k(kind) CROSS JOIN LATERAL (
    SELECT {_COLUMNS} FROM patterns
    WHERE chat_id = $1 AND status = 'active' AND kind = k.kind AND occurs_on IS NULL
      AND NOT is_core_tenet
    ORDER BY (strength * confidence) DESC LIMIT $3) AS p)
UNION ALL
(SELECT 'event', {_COLUMNS} FROM patterns
 WHERE chat_id = $1 AND occurs_on >= $4 AND status = 'active' AND NOT is_core_tenet
 ORDER BY occurs_on, occurs_at NULLS FIRST, id LIMIT $3)
UNION ALL
(SELECT 'other', {_COLUMNS} FROM patterns
 WHERE chat_id = $1 AND status = 'active' AND NOT is_core_tenet
   AND NOT (occurs_on IS NULL AND kind = ANY($2::text[])) AND NOT coalesce(occurs_on >= $4, false)
 ORDER BY strength * confidence DESC, id DESC LIMIT $3)
"""

_COUNTS = """
SELECT
  (SELECT coalesce(jsonb_object_agg(status, n), '{}') FROM chat_pattern_counts
   WHERE chat_id = $1 AND n > 0) AS by_status,
  (SELECT count(*) FROM chat_messages WHERE chat_id = $1 AND role IN ('user', 'assistant'))
       AS messages,
  (SELECT count(*) FROM chat_messages WHERE chat_id = $1 AND role IN ('user', 'assistant')
       AND compacted_at IS NULL) AS verbatim,
  (SELECT count(*) FROM episodes WHERE chat_id = $1) AS episodes,
  (SELECT coalesce(sum(message_count), 0) FROM episodes WHERE chat_id = $1) AS summarized
"""


async def profile_view(
    db: Queries, chat_id: int, *, now: datetime, timezone: str, per_group: int = GROUP_SIZE
) -> ProfileView:
    """The chat's profile (module docstring): live patterns only."""
    today = local_today(now, timezone)
    rows = await db.fetch(_PROFILE, chat_id, list(PROFILE_KINDS), per_group, today)
    groups: dict[str, list[Item]] = {g: [] for g in ("core", *PROFILE_KINDS, "event", "other")}
    for r in rows:
        groups[str(r["grp"])].append(_item(r))
    counts = await db.fetchrow(_COUNTS, chat_id)
    assert counts is not None
    raw = counts["by_status"]
    by_status = raw if isinstance(raw, dict) else _json(raw)
    return ProfileView(
        groups={g: tuple(items) for g, items in groups.items()},
        by_status={s: int(by_status[s]) for s in STATUSES if by_status.get(s)},
        messages=int(counts["messages"]),
        verbatim=int(counts["verbatim"]),
        episodes=int(counts["episodes"]),
        summarized=int(counts["summarized"]),
    )


def _json(raw: Any) -> dict[str, Any]:
    value = json.loads(raw) if isinstance(raw, str | bytes) else raw
    return dict(value or {})


# $1 chat, $2 now, $3..$9 the weight's parameters, $10 kind or NULL, $11 limit
_LIST = f"""
SELECT p.id, p.kind, p.content, p.status, p.is_core_tenet, p.occurs_on, p.occurs_at,
       {WEIGHT_SQL} AS weight
FROM patterns p {WEIGHT_JOINS}
WHERE p.chat_id = $1 AND p.status = 'active' AND ($10::text IS NULL OR p.kind = $10)
ORDER BY weight DESC, p.id DESC
LIMIT $11
"""


async def list_patterns(
    db: Queries,
    chat_id: int,
    *,
    now: datetime,
    timezone: str,
    kind: str | None = None,
    limit: int = GROUP_SIZE,
) -> list[Item]:
    """The chat's strongest active patterns now (``kind``: of that kind only), with weights."""
    rows = await db.fetch(_LIST, chat_id, now, *weight_parameters(now, timezone), kind, limit)
    return [_item(r, "weight") for r in rows]


async def search_patterns(
    db: Queries,
    embedder: Embedder,
    chat_id: int,
    query: str,
    *,
    now: datetime,
    timezone: str,
    thresholds: Thresholds | None = None,
    lexicons: LexiconCache | None = None,
    planner: VectorPlanner | None = None,
    limit: int = 5,
) -> tuple[list[Item], bool]:
    """The product's retrieval for ``query`` (the best ``limit``, scores and similarities) and
    whether it degraded to keywords. ``planner``: keep one (it caches each chat's size)."""
    ranked, degraded = await rank_patterns(
        db,
        embedder,
        chat_id,
        query,
        limit=DEFAULT_CANDIDATES,
        now=now,
        thresholds=thresholds,
        planner=planner,
        lexicons=lexicons,
        timezone=timezone,
    )
    items = [
        Item(
            p.id,
            p.kind,
            p.content,
            p.status,
            p.core,
            p.occurs_on,
            p.occurs_at,
            p.score,
            p.similarity,
        )
        for p in ranked[:limit]
    ]
    return items, degraded


_WORDS = f"""
SELECT {_COLUMNS} FROM patterns
WHERE chat_id = $1 AND status = ANY($2::text[])
  AND $3 <> '' AND text_search @@ to_tsquery('english', $3)
ORDER BY strength * confidence DESC, id DESC
LIMIT $4
"""


async def topic_matches(
    db: Queries,
    embedder: Embedder,
    chat_id: int,
    topic: str,
    *,
    now: datetime,
    timezone: str,
    thresholds: Thresholds | None = None,
    lexicons: LexiconCache | None = None,
    planner: VectorPlanner | None = None,
    limit: int = GROUP_SIZE,
    statuses: Sequence[str] = ("active", "disputed"),
) -> list[Item]:
    """The chat's live patterns about ``topic``: the retrieval's best, then those whose words
    contain its positive words (full text, :func:`memory.patterns.topic.topic_tsquery`: no
    negation; the retrieval is asked those words too), at most ``limit``; both searches at
    once. A topic without such words matches nothing."""
    words = " ".join(topic_words(topic))
    if not words:
        return []
    (ranked, _), rows = await both(
        lambda: search_patterns(
            db,
            embedder,
            chat_id,
            words,
            now=now,
            timezone=timezone,
            thresholds=thresholds,
            lexicons=lexicons,
            planner=planner,
            limit=limit,
        ),
        lambda: db.fetch(_WORDS, chat_id, list(statuses), topic_tsquery(topic), limit),
    )
    found = [i for i in ranked if i.status in statuses]
    seen = {i.id for i in found}
    found += [_item(r) for r in rows if int(r["id"]) not in seen]
    return found[:limit]


@attrs.frozen
class SummaryView:
    """``/summary``: the newest episodes (newest first) and the window now."""

    episodes: tuple[Episode, ...]
    total_episodes: int
    verbatim: int  # messages not compacted yet: what the next turn shows
    first_verbatim: datetime | None
    last_verbatim: datetime | None


_WINDOW = """
SELECT count(*) AS n, min(created_at) AS first, max(created_at) AS last,
       (SELECT count(*) FROM episodes WHERE chat_id = $1) AS episodes
FROM chat_messages
WHERE chat_id = $1 AND compacted_at IS NULL AND role IN ('user', 'assistant')
"""
_EPISODES = """
SELECT id, summary, started_at, ended_at, message_count FROM episodes
WHERE chat_id = $1 ORDER BY ended_at DESC, id DESC LIMIT $2
"""


async def summary_view(db: Queries, chat_id: int, *, limit: int = GROUP_SIZE) -> SummaryView:
    """The chat's ``limit`` newest episodes and its window (uncompacted messages)."""
    episodes = [episode_from_record(r) for r in await db.fetch(_EPISODES, chat_id, limit)]
    w = await db.fetchrow(_WINDOW, chat_id)
    assert w is not None
    return SummaryView(tuple(episodes), int(w["episodes"]), int(w["n"]), w["first"], w["last"])


_BY_ID = f"SELECT {_COLUMNS} FROM patterns WHERE chat_id = $1 AND id = ANY($2::bigint[])"


async def items_by_id(db: Queries, chat_id: int, ids: Sequence[int]) -> list[Item]:
    """The chat's patterns among ``ids``, in the order given (another chat's are left out)."""
    found = {int(r["id"]): _item(r) for r in await db.fetch(_BY_ID, chat_id, list(ids))}
    return [found[i] for i in dict.fromkeys(ids) if i in found]
