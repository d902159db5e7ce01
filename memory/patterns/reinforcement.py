"""Spacing-sensitive reinforcement and contradiction math (seed 000).

Reinforcement (a new observation of an existing pattern)::

    w      = 1.0 explicit | 0.5 implicit
    boost  = BOOST_MAX * (1 - exp(-days_since_last_seen / KAPPA_DAYS))     # massed -> ~0
    strength'   = min(strength + w * boost, STRENGTH_CAP)
    confidence' = confidence + w * REINFORCE_RATE * (1 - confidence)       # towards 1
    times_seen' = times_seen + 1

Contradiction (soft; a hard contradiction is a supersede, handled by the store)::

    confidence' = max(0, confidence - w * CONTRADICT_PENALTY)

After ``DISPUTE_AFTER`` (2) contradictions an active pattern becomes ``disputed``: one
contradiction may be noise or a passing mood, two independent ones mean the claim is contested
and should rank lower (see :mod:`memory.retrieval.ranking`) while coexisting with its rival.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType

import attrs

KAPPA_DAYS = 7.0
BOOST_MAX = 1.0
STRENGTH_CAP = 20.0
REINFORCE_RATE = 0.1
CONTRADICT_PENALTY = 0.15
DISPUTE_AFTER = 2

SIGNAL_WEIGHTS: Mapping[str, float] = MappingProxyType({"explicit": 1.0, "implicit": 0.5})


@attrs.frozen
class PatternStats:
    """The reinforcement-relevant numbers of one pattern."""

    strength: float = 1.0
    confidence: float = 0.5
    times_seen: int = 1


def signal_weight(signal: str) -> float:
    """1.0 for ``explicit``, 0.5 for ``implicit``."""
    try:
        return SIGNAL_WEIGHTS[signal]
    except KeyError:
        raise ValueError(f"unknown evidence signal {signal!r} (explicit|implicit)") from None


def spacing_boost(
    days_since_last_seen: float, *, kappa_days: float = KAPPA_DAYS, boost_max: float = BOOST_MAX
) -> float:
    """``boost_max * (1 - exp(-days / kappa))``; negative days (clock skew) give 0."""
    if kappa_days <= 0:
        raise ValueError(f"kappa_days must be > 0, got {kappa_days}")
    return boost_max * -math.expm1(-max(days_since_last_seen, 0.0) / kappa_days)


def _clamp01(x: float) -> float:
    return min(max(x, 0.0), 1.0)


def reinforce(stats: PatternStats, days_since_last_seen: float, signal: str) -> PatternStats:
    """Return the stats after one reinforcing observation."""
    w = signal_weight(signal)
    strength = min(stats.strength + w * spacing_boost(days_since_last_seen), STRENGTH_CAP)
    conf = _clamp01(stats.confidence)
    conf = _clamp01(conf + w * REINFORCE_RATE * (1.0 - conf))
    return PatternStats(strength=strength, confidence=conf, times_seen=stats.times_seen + 1)


def contradict(stats: PatternStats, signal: str = "explicit") -> PatternStats:
    """Return the stats after one (soft) contradiction: only confidence drops."""
    w = signal_weight(signal)
    conf = _clamp01(stats.confidence - w * CONTRADICT_PENALTY)
    return attrs.evolve(stats, confidence=conf)


def status_after_contradiction(status: str, contradictions: int) -> str:
    """``disputed`` once an active pattern has ``DISPUTE_AFTER`` contradictions; else unchanged.

    ``contradictions`` is the total count including the one just recorded. Superseded,
    deprecated and merged patterns keep their status.
    """
    if status == "active" and contradictions >= DISPUTE_AFTER:
        return "disputed"
    return status
