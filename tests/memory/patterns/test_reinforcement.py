"""Spacing-sensitive reinforcement, signal weighting, contradiction, and canonical hashing."""

from __future__ import annotations

import hashlib
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory.patterns.canonical import canonical_hash, normalize
from memory.patterns.reinforcement import (
    DISPUTE_AFTER,
    STRENGTH_CAP,
    PatternStats,
    contradict,
    reinforce,
    signal_weight,
    spacing_boost,
    status_after_contradiction,
)

FIVE_MINUTES = 5 / (24 * 60)


def test_spacing_boost_massed_vs_spaced() -> None:
    massed = spacing_boost(FIVE_MINUTES)
    assert massed == pytest.approx(0.000496, abs=1e-6)  # ~0.0005
    spaced = spacing_boost(14)
    assert spaced == pytest.approx(1 - math.exp(-2))  # ~0.8647
    assert spaced == pytest.approx(0.86, abs=0.01)
    assert spacing_boost(0) == 0.0
    assert spacing_boost(-3) == 0.0
    assert spacing_boost(7) == pytest.approx(1 - math.exp(-1))
    assert spacing_boost(1e9) == pytest.approx(1.0)


def test_reinforce_spaced_vs_massed_strength() -> None:
    base = PatternStats(strength=1.0, confidence=0.5, times_seen=1)
    spaced = reinforce(base, 14, "explicit")
    massed = reinforce(base, FIVE_MINUTES, "explicit")
    assert spaced.strength == pytest.approx(1 + (1 - math.exp(-2)))
    assert massed.strength == pytest.approx(1.000496, abs=1e-6)
    assert spaced.times_seen == massed.times_seen == 2
    assert base == PatternStats(1.0, 0.5, 1)  # input untouched (frozen)


def test_implicit_is_half_of_explicit() -> None:
    assert signal_weight("explicit") == 1.0
    assert signal_weight("implicit") == 0.5
    base = PatternStats(strength=2.0, confidence=0.6, times_seen=3)
    exp = reinforce(base, 10, "explicit")
    imp = reinforce(base, 10, "implicit")
    assert imp.strength - base.strength == pytest.approx((exp.strength - base.strength) / 2)
    assert imp.confidence - base.confidence == pytest.approx((exp.confidence - base.confidence) / 2)
    assert exp.confidence == pytest.approx(0.6 + 0.1 * 0.4)
    c_exp = contradict(base, "explicit")
    c_imp = contradict(base, "implicit")
    assert base.confidence - c_imp.confidence == pytest.approx(
        (base.confidence - c_exp.confidence) / 2
    )
    with pytest.raises(ValueError):
        signal_weight("vibes")


def test_strength_capped_at_20() -> None:
    stats = PatternStats(strength=19.5, confidence=0.9, times_seen=40)
    out = reinforce(stats, 365, "explicit")
    assert out.strength == STRENGTH_CAP == 20.0
    assert reinforce(out, 365, "explicit").strength == 20.0


@given(
    strength=st.floats(0, 20),
    conf=st.floats(0, 1),
    days=st.floats(-10, 1e4),
    signal=st.sampled_from(["explicit", "implicit"]),
)
def test_reinforce_bounds(strength: float, conf: float, days: float, signal: str) -> None:
    out = reinforce(PatternStats(strength, conf, 1), days, signal)
    assert strength <= out.strength <= STRENGTH_CAP
    assert conf <= out.confidence <= 1.0
    dropped = contradict(PatternStats(strength, conf, 1), signal)
    assert 0.0 <= dropped.confidence <= conf
    assert dropped.strength == strength and dropped.times_seen == 1


def test_contradiction_floors_at_zero_and_disputes_after_two() -> None:
    stats = PatternStats(strength=3.0, confidence=0.2, times_seen=4)
    once = contradict(stats)
    assert once.confidence == pytest.approx(0.05)
    assert contradict(once).confidence == 0.0
    assert DISPUTE_AFTER == 2
    assert status_after_contradiction("active", 1) == "active"
    assert status_after_contradiction("active", 2) == "disputed"
    assert status_after_contradiction("disputed", 5) == "disputed"
    assert status_after_contradiction("superseded", 3) == "superseded"


# --- canonical form -------------------------------------------------------------------------


def test_normalize() -> None:
    assert normalize("  User   LOVES\tcoffee!! ") == "user loves coffee"
    assert normalize("«User drinks coffee.»") == "user drinks coffee"
    assert normalize("ﬁne ＡＢＣ") == "fine abc"  # NFKC: ligature and full-width
    assert normalize("Straße") == normalize("STRASSE")
    assert normalize("don't stop... (really)") == "don't stop... (really"
    assert normalize("!!!") == ""


def test_canonical_hash() -> None:
    h = canonical_hash("User loves coffee.")
    assert h == hashlib.sha256(b"user loves coffee").hexdigest()
    assert h == canonical_hash("  user LOVES   coffee ")
    assert h != canonical_hash("User loves tea.")
    assert len(h) == 64


@given(st.text())
def test_normalize_idempotent(text: str) -> None:
    once = normalize(text)
    assert normalize(once) == once
    assert canonical_hash(text) == canonical_hash(once)
