"""The time-aware parts of the retrieval weight in SQL against the Python oracle
(:mod:`memory.retrieval.ranking`): events near their day and long past, today reckoned in the
person's time zone, the ``temporal`` hints of seed 000's "Time-aware retrieval boost", and core
tenets that never decay. Real PostgreSQL; one pattern per chat, so relevance is fixed (cosine
0.8, the best keyword match: 0.9) and the score is relevance × weight."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from memory.embeddings.store import store_vectors
from memory.retrieval import ranking
from memory.retrieval.retriever import RankedPattern, rank_patterns
from memory.retrieval.temporal import moment
from runtime.db import Database

DIMS = 16
MODEL = "test-time-aware-16"
TZ = "Europe/Madrid"
NOW = datetime(2026, 1, 13, 21, 0, tzinfo=UTC)  # Tuesday 22:00 in Madrid, winter
TODAY = date(2026, 1, 13)
QUERY = "coffee q"


class AxisEmbedder:
    """Every text on the first axis: the query's direction."""

    model, dims = MODEL, DIMS

    async def embed(
        self, texts: Sequence[str], *, purpose: str, chat_id: int | None = None
    ) -> list[np.ndarray]:
        return [axis(0) for _ in texts]


def axis(i: int) -> np.ndarray:
    v = np.zeros(DIMS, dtype=np.float32)
    v[i] = 1.0
    return v


async def add(
    db: Database,
    chat_id: int,
    *,
    kind: str = "behavior",
    days_ago: float = 0.0,
    occurs_on: date | None = None,
    core: bool = False,
    temporal: dict[str, Any] | None = None,
) -> None:
    seen = NOW - timedelta(days=days_ago)
    pid = await db.fetchval(
        "INSERT INTO patterns (chat_id, content, kind, confidence, strength, canonical_hash, "
        "first_seen, last_seen, occurs_on, is_core_tenet, temporal) "
        "VALUES ($1, 'User drinks coffee', $2, 0.7, 3.0, 'h', $3, $3, $4, $5, $6::jsonb) "
        "RETURNING id",
        chat_id,
        kind,
        seen,
        occurs_on,
        core,
        None if temporal is None else json.dumps(temporal),
    )
    vector = (0.8 * axis(0) + math.sqrt(1 - 0.64) * axis(2)).astype(np.float32)  # cosine 0.8
    await store_vectors(db, "pattern_embeddings", "pattern_id", [(pid, vector)], MODEL)


async def one(
    db: Database, chat_id: int, *, now: datetime = NOW, timezone: str = TZ
) -> RankedPattern:
    [got], degraded = await rank_patterns(
        db, AxisEmbedder(), chat_id, QUERY, now=now, timezone=timezone
    )
    assert not degraded and got.relevance == pytest.approx(0.9, abs=1e-5)
    return got


DAYS = (-40, -15, -14, -3, 0, 2, 3, 10, 60, 400)  # today - its day


async def test_an_events_weight_runs_from_its_day(db: Database) -> None:
    """Full weight and the boost from 14 days ahead to 2 days after; then the emotion-like
    decay from its day (last seen long before does not matter)."""
    got = {}
    for i, d in enumerate(DAYS):
        await add(db, 3000 + i, kind="event", days_ago=900, occurs_on=TODAY - timedelta(days=d))
        got[d] = await one(db, 3000 + i)
        expected = ranking.score(0.9, "event", d, 3.0, 0.7, "active", boost=ranking.event_boost(d))
        assert got[d].score == pytest.approx(expected, rel=1e-4), d
        assert got[d].occurs_on == TODAY - timedelta(days=d)
    full = 0.9 * ranking.memory_factor(3.0) * 0.7
    assert got[-40].score == pytest.approx(full, rel=1e-4)  # ahead: no decay, no boost yet
    for d in (-14, -3, 0):
        assert got[d].score == pytest.approx(1.5 * full, rel=1e-4)
    assert got[2].score == pytest.approx(1.5 * full * ranking.recency("event", 2), rel=1e-4)
    assert got[3].score == pytest.approx(full * ranking.recency("emotion", 3), rel=1e-4)
    assert got[400].score == pytest.approx(full * 0.15, rel=1e-3)  # the emotion floor
    assert got[-3].score > got[-40].score > got[10].score > got[60].score


async def test_today_is_the_persons_day(db: Database) -> None:
    """At 23:30 UTC on 3 October it is already 4 October in Madrid: an event of 1 October is
    three days past there (no boost), two days past in UTC (boosted)."""
    late = datetime(2026, 10, 3, 23, 30, tzinfo=UTC)
    await add(db, 3100, kind="event", occurs_on=date(2026, 10, 1))
    madrid, utc = await one(db, 3100, now=late), await one(db, 3100, now=late, timezone="UTC")
    assert ranking.local_today(late, TZ) == date(2026, 10, 4)
    assert madrid.score == pytest.approx(
        ranking.score(0.9, "event", 3, 3.0, 0.7, "active"), rel=1e-4
    )
    assert utc.score == pytest.approx(
        ranking.score(0.9, "event", 2, 3.0, 0.7, "active", boost=1.5), rel=1e-4
    )


HINTS: list[dict[str, Any] | None] = [
    {"time_of_day": "evening"},
    {"time_of_day": "Evening ", "season": "winter"},
    {"day_of_week": "weekday", "frequency": "daily"},
    {"month": "january"},
    {"time_of_day": "morning"},
    {"time_of_day": "evening", "day_of_week": "sunday"},
    {"frequency": "daily"},
    {"season": None},
    {"season": "summer"},
    {},
    None,
]


async def test_temporal_hints_boost_like_the_oracle(db: Database) -> None:
    at = moment(NOW, TZ)
    boosted = []
    for i, hints in enumerate(HINTS):
        await add(db, 3200 + i, temporal=hints)
        got = await one(db, 3200 + i)
        boost = ranking.temporal_boost(hints, at)
        expected = ranking.score(0.9, "behavior", 0, 3.0, 0.7, "active", boost=boost)
        assert got.score == pytest.approx(expected, rel=1e-4), hints
        boosted.append(boost > 1.0)
    assert boosted == [True] * 4 + [False] * 7
    # in the morning the evening pattern loses its boost and the morning one gets it
    morning = datetime(2026, 1, 13, 8, 0, tzinfo=UTC)
    assert (await one(db, 3200, now=morning)).score < (await one(db, 3204, now=morning)).score


async def test_a_core_tenet_never_decays_in_sql(db: Database) -> None:
    await add(db, 3300, kind="belief", days_ago=3000, core=True)
    await add(db, 3301, kind="belief", days_ago=3000)
    await add(db, 3302, kind="fact", days_ago=3000)
    core, plain, fact = [await one(db, c) for c in (3300, 3301, 3302)]
    assert core.core and not plain.core
    assert core.score == pytest.approx(
        ranking.score(0.9, "belief", 3000, 3.0, 0.7, "active", core=True), rel=1e-4
    )
    assert core.score == pytest.approx(0.9 * ranking.memory_factor(3.0) * 0.7, rel=1e-4)
    assert plain.score == pytest.approx(
        ranking.score(0.9, "belief", 3000, 3.0, 0.7, "active"), rel=1e-4
    )
    assert fact.score == pytest.approx(
        ranking.score(0.9, "fact", 3000, 3.0, 0.7, "active"), rel=1e-4
    )
    assert core.score > fact.score > plain.score
