"""Retrieval math: typed decay, score, MMR, injected-pattern budget, RRF."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory.retrieval.ranking import (
    DECAY_BY_KIND,
    EVENT_AFTER_DAYS,
    EVENT_AHEAD_DAYS,
    EVENT_NEAR_BOOST,
    MIN_SIMILARITY,
    MMR_LAMBDA,
    PATTERN_BUDGET_TOKENS,
    TEMPORAL_BOOST,
    Candidate,
    apply_budget,
    estimate_tokens,
    event_boost,
    memory_factor,
    mmr,
    recency,
    rrf,
    score,
    temporal_boost,
    validity,
    weight,
)
from memory.retrieval.temporal import moment, part_of_day, season, southern

# (kind, half-life days, value at 0, 1 and 3 half-lives) = floor + (1 - floor) / 2**n
DECAY_CASES = [
    ("behavior", 90, 1.0, 0.725, 0.51875),
    ("belief", 90, 1.0, 0.725, 0.51875),
    ("goal", 60, 1.0, 0.675, 0.43125),
    ("preference", 90, 1.0, 0.725, 0.51875),
    ("emotion", 14, 1.0, 0.575, 0.25625),
    ("temporal", 365, 1.0, 0.8, 0.65),
    ("causal", 90, 1.0, 0.725, 0.51875),
    ("fact", 730, 1.0, 0.9, 0.825),
    ("event", 14, 1.0, 0.575, 0.25625),  # days from its day, not from last seen
]


@pytest.mark.parametrize(("kind", "hl", "at0", "at1", "at3"), DECAY_CASES)
def test_decay_by_kind_exact(kind: str, hl: float, at0: float, at1: float, at3: float) -> None:
    assert DECAY_BY_KIND[kind].half_life_days == hl
    assert recency(kind, 0) == pytest.approx(at0, abs=1e-12)
    assert recency(kind, hl) == pytest.approx(at1, abs=1e-12)
    assert recency(kind, 3 * hl) == pytest.approx(at3, abs=1e-12)
    assert recency(kind, 1e6) == pytest.approx(DECAY_BY_KIND[kind].floor, abs=1e-9)


def test_decay_kinds_complete_and_unknown_rejected() -> None:
    assert set(DECAY_BY_KIND) == {
        "behavior",
        "belief",
        "goal",
        "preference",
        "emotion",
        "temporal",
        "causal",
        "fact",
        "event",
    }
    with pytest.raises(ValueError):
        recency("mood", 1)
    assert recency("emotion", -5) == 1.0  # clock skew counts as "just now"


def test_memory_factor() -> None:
    assert memory_factor(0) == 1.0
    assert memory_factor(1) == pytest.approx(1 + 0.25 * math.log(2))
    assert memory_factor(math.e**2 - 1) == pytest.approx(1.5)
    assert memory_factor(20) == pytest.approx(1.5)  # capped


def test_validity() -> None:
    assert validity("active") == 1.0
    assert validity("disputed") == 0.5
    for dead in ("superseded", "deprecated", "merged"):
        assert validity(dead) == 0.0
    with pytest.raises(ValueError):
        validity("zombie")


def test_score_formula() -> None:
    expected = 0.8 * 0.725 * (1 + 0.25 * math.log(4)) * 0.9 * 1.0
    assert score(0.8, "behavior", 90, 3, 0.9, "active") == pytest.approx(expected)
    assert score(0.8, "behavior", 90, 3, 0.9, "disputed") == pytest.approx(expected / 2)
    assert score(0.99, "belief", 0, 20, 1.0, "superseded") == 0.0
    assert MIN_SIMILARITY == 0.4


def test_a_core_tenet_never_decays() -> None:
    for kind in DECAY_BY_KIND:
        assert recency(kind, 10_000, core=True) == 1.0
        assert recency(kind, 10_000) < 1.0
    expected = 0.8 * 1.0 * (1 + 0.25 * math.log(4)) * 0.9
    assert score(0.8, "belief", 5_000, 3, 0.9, "active", core=True) == pytest.approx(expected)


def test_event_boost_window() -> None:
    """Boosted from 14 days ahead to 2 days after its day; not before, not after, not without
    a day."""
    assert (EVENT_NEAR_BOOST, EVENT_AHEAD_DAYS, EVENT_AFTER_DAYS) == (1.5, 14, 2)
    assert [event_boost(d) for d in (-15, -14, 0, 2, 3)] == [1.0, 1.5, 1.5, 1.5, 1.0]
    assert event_boost(None) == 1.0
    # ahead: full recency and the boost; long past: decayed like an emotion, no boost
    ahead = weight("event", -10, 1, 0.8, "active", boost=event_boost(-10))
    past = weight("event", 60, 1, 0.8, "active", boost=event_boost(60))
    assert ahead == pytest.approx(1.5 * memory_factor(1) * 0.8)
    assert past == pytest.approx(recency("emotion", 60) * memory_factor(1) * 0.8)


def test_temporal_boost_matches_the_moment() -> None:
    madrid = "Europe/Madrid"
    evening = moment(datetime(2026, 1, 13, 21, 0, tzinfo=UTC), madrid)  # Tue 22:00 in Madrid
    assert evening["time_of_day"] == ("evening",)
    assert evening["day_of_week"] == ("tuesday", "weekday")
    assert evening["season"] == ("winter",) and evening["month"] == ("january",)
    assert temporal_boost({"time_of_day": "evening"}, evening) == TEMPORAL_BOOST == 1.2
    assert temporal_boost({"time_of_day": " Evening", "season": "WINTER"}, evening) == 1.2
    assert temporal_boost({"time_of_day": "evening", "day_of_week": "sunday"}, evening) == 1.0
    assert temporal_boost({"day_of_week": "weekday", "frequency": "daily"}, evening) == 1.2
    assert temporal_boost({"frequency": "daily"}, evening) == 1.0  # no recognised hint
    assert temporal_boost(None, evening) == temporal_boost({}, evening) == 1.0
    assert temporal_boost({"season": None}, evening) == 1.0
    # the hemisphere turns the season; "fall" is autumn; the night runs from 23:00
    sydney = moment(datetime(2026, 1, 13, 12, 30, tzinfo=UTC), "Australia/Sydney")  # 23:30
    assert sydney["season"] == ("summer",) and sydney["time_of_day"] == ("night",)
    october = moment(datetime(2026, 10, 3, 6, 0, tzinfo=UTC), madrid)  # Sat 08:00
    assert temporal_boost({"season": "fall", "day_of_week": "weekend"}, october) == 1.2
    assert [part_of_day(h) for h in (4, 5, 11, 12, 16, 17, 22, 23)] == [
        "night",
        "morning",
        "morning",
        "afternoon",
        "afternoon",
        "evening",
        "evening",
        "night",
    ]
    assert [season(m, madrid) for m in (12, 3, 6, 9)] == ["winter", "spring", "summer", "autumn"]
    assert season(7, "America/Sao_Paulo") == "winter" and not southern("Europe/Madrid")


# --- MMR ------------------------------------------------------------------------------------


def test_mmr_prefers_diverse_over_near_duplicates() -> None:
    a = Candidate(1, 0.90, [1.0, 0.0, 0.0])
    a_dup = Candidate(2, 0.89, [0.999, 0.0447, 0.0])
    a_dup2 = Candidate(3, 0.88, [0.998, 0.0, 0.0632])
    b = Candidate(4, 0.70, [0.0, 1.0, 0.0])
    c = Candidate(5, 0.60, [0.0, 0.0, 1.0])
    picked = mmr([a_dup, a, a_dup2, b, c], k=3)
    assert [p.id for p in picked] == [1, 4, 5]
    # pure relevance (lam=1) keeps score order
    assert [p.id for p in mmr([a_dup, a, a_dup2, b, c], k=3, lam=1.0)] == [1, 2, 3]


def test_mmr_default_lambda_is_the_seeds_0_7() -> None:
    """Second pick: b (score 0.9, cosine 0.5 to a) against c (0.6, cosine 0): at 0.7
    0.63 - 0.15 = 0.48 beats 0.42; at 0.6 redundancy weighs more and c wins (0.34 < 0.36)."""
    assert MMR_LAMBDA == 0.7
    a = Candidate(1, 1.0, [1.0, 0.0, 0.0])
    b = Candidate(2, 0.9, [0.5, math.sqrt(0.75), 0.0])
    c = Candidate(3, 0.6, [0.0, 0.0, 1.0])
    assert [p.id for p in mmr([a, b, c], k=2)] == [1, 2]
    assert [p.id for p in mmr([a, b, c], k=2, lam=0.6)] == [1, 3]


def test_mmr_first_pick_is_highest_score_and_handles_edges() -> None:
    cands = [Candidate(i, s, np.eye(3)[i % 3]) for i, s in enumerate([0.2, 0.9, 0.5])]
    assert mmr(cands, k=1)[0].id == 1
    assert mmr(cands, k=0) == []
    assert mmr([], k=3) == []
    assert len(mmr(cands)) == 3
    assert mmr(cands, k=10)[0].id == 1
    with pytest.raises(ValueError):
        mmr(cands, k=2, lam=1.5)


@given(
    st.lists(
        st.tuples(
            st.floats(0, 1),
            st.lists(st.floats(-1, 1), min_size=3, max_size=3),
        ),
        max_size=12,
    ),
    st.integers(0, 15),
)
def test_mmr_returns_distinct_items(rows: list[tuple[float, list[float]]], k: int) -> None:
    cands = [Candidate(i, s, v) for i, (s, v) in enumerate(rows)]
    out = mmr(cands, k=k)
    assert len(out) == min(k, len(cands))
    assert len({c.id for c in out}) == len(out)
    if out:
        assert out[0].score == max(c.score for c in cands)


# --- budget ---------------------------------------------------------------------------------


def test_estimate_tokens() -> None:
    assert [estimate_tokens("x" * n) for n in (0, 1, 4, 5, 8000)] == [0, 1, 1, 2, 2000]


def test_budget_drops_lowest_scored_not_tail() -> None:
    items = [
        Candidate(1, 0.9, [1.0], "a" * 3000),
        Candidate(2, 0.3, [1.0], "b" * 3000),  # lowest score, in the middle of MMR order
        Candidate(3, 0.8, [1.0], "c" * 3000),
    ]
    out = apply_budget(items)  # 9,000 chars = 2,250 tokens > 2,000
    assert [c.id for c in out] == [1, 3]


def test_default_budget_is_2000_tokens() -> None:
    assert PATTERN_BUDGET_TOKENS == 2000
    fits = [Candidate(1, 0.9, [1.0], "a" * 4000), Candidate(2, 0.5, [1.0], "b" * 4000)]
    assert [c.id for c in apply_budget(fits)] == [1, 2]  # 8,000 chars = 2,000 tokens
    over = [fits[0], Candidate(2, 0.5, [1.0], "b" * 4001)]
    assert [c.id for c in apply_budget(over)] == [1]  # 2,001 tokens


def test_budget_keeps_all_when_fitting_and_keeps_order() -> None:
    items = [Candidate(i, s, [1.0], "x" * 100) for i, s in enumerate([0.1, 0.9, 0.5])]
    assert apply_budget(items) == items
    assert [c.id for c in apply_budget(items, max_tokens=50)] == [1, 2]
    assert [c.id for c in apply_budget(items, max_tokens=49)] == [1]
    assert apply_budget(items, max_tokens=0) == []


def test_budget_tie_drops_later_item() -> None:
    items = [Candidate(i, 0.5, [1.0], "x" * 40) for i in range(3)]
    assert [c.id for c in apply_budget(items, max_tokens=20)] == [0, 1]


@given(
    st.lists(st.tuples(st.floats(0, 1), st.integers(0, 5000)), max_size=20),
    st.integers(0, 3000),
)
def test_budget_property(rows: list[tuple[float, int]], budget: int) -> None:
    items = [Candidate(i, s, [1.0], "x" * n) for i, (s, n) in enumerate(rows)]
    out = apply_budget(items, max_tokens=budget)
    assert sum(estimate_tokens(c.text) for c in out) <= budget
    ids = [c.id for c in out]
    assert ids == sorted(ids)  # order kept
    dropped = [c for c in items if c.id not in set(ids)]
    if dropped and out:  # nothing kept scores below anything dropped
        assert min(c.score for c in out) >= max(c.score for c in dropped)


# --- RRF ------------------------------------------------------------------------------------


def test_rrf_order_and_scores() -> None:
    semantic = ["a", "b", "c"]
    lexical = ["c", "a", "d"]
    fused = rrf([semantic, lexical])
    assert [i for i, _ in fused] == ["a", "c", "b", "d"]
    scores = dict(fused)
    assert scores["a"] == pytest.approx(1 / 61 + 1 / 62)
    assert scores["c"] == pytest.approx(1 / 63 + 1 / 61)
    assert scores["b"] == pytest.approx(1 / 62)
    assert scores["d"] == pytest.approx(1 / 63)


def test_rrf_edges() -> None:
    assert rrf([]) == []
    (one, s1), (two, s2) = rrf([[1, 1, 2]])  # a repeat counts once, at its best rank
    assert (one, two) == (1, 2)
    assert s1 == pytest.approx(1 / 61)
    assert s2 == pytest.approx(1 / 63)
    assert [i for i, _ in rrf([[1, 2], [2, 1]])] == [1, 2]  # tie: first seen
    assert rrf([["x"]], k=0) == [("x", 1.0)]
