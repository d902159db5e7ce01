"""Capped exponential backoff: the one formula behind every wait-and-retry in engram (the
sender, the chat actor and the tool loop waiting out a model, the supervisor's restarts, the
poller, the webhook's failure throttle, the embedding backfill)."""

from __future__ import annotations

__all__ = ["backoff_delay"]

#: exponents above this no longer change a capped delay (and 2**n stays a small number)
_MAX_EXPONENT = 60


def backoff_delay(
    failures: int, *, base: float, cap: float, jitter: float = 0.0, draw: float = 0.0
) -> float:
    """The wait after ``failures`` earlier failures (0 for the first retry): ``base`` doubled
    per failure, at most ``cap``, then shortened by up to ``jitter`` of itself (``draw`` in
    [0, 1) picks how much: pass ``random.random()``), so that many waiters do not retry in step.
    Pure: ``backoff_delay(n, base=1, cap=300)`` is 1, 2, 4, ... 256, 300, 300, ..."""
    if failures < 0 or base < 0 or cap < 0 or not 0.0 <= jitter <= 1.0 or not 0.0 <= draw < 1.0:
        raise ValueError("failures, base and cap must be >= 0; jitter and draw within [0, 1)")
    delay = min(cap, base * 2.0 ** min(failures, _MAX_EXPONENT))
    return delay * (1.0 - jitter * draw)
