"""The sender's database steps, waited out through outages: each is retried with capped backoff
(``db_retry_base`` doubled per failure up to ``db_retry_cap``, with jitter) while the database
fails, so the sender does not crash on an outage; a shielded step (recording a delivered chunk)
gets ``record_timeout`` per attempt, safe from cancellation.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog
import trio

from actors.sender.policy import SenderSettings, describe
from runtime.backoff import backoff_delay
from runtime.errors import DatabaseError

log = structlog.get_logger(__name__)
T = TypeVar("T")


async def retry_db(
    step: str,
    call: Callable[[], Awaitable[T]],
    settings: SenderSettings,
    rng: random.Random,
    *,
    shielded: bool = False,
) -> T:
    """``call()``, retried with capped backoff while the database fails; ``step`` names it in
    the ``sender.db_retrying`` log line."""
    s, failures = settings, 0
    while True:
        try:
            if not shielded:
                return await call()
            with trio.move_on_after(s.record_timeout, shield=True):
                return await call()
            error = f"timed out after {s.record_timeout:g} s"
        except DatabaseError as exc:
            error = describe(exc)
        delay = backoff_delay(
            failures,
            base=s.db_retry_base,
            cap=s.db_retry_cap,
            jitter=s.jitter,
            draw=rng.random(),
        )
        failures += 1
        log.warning("sender.db_retrying", step=step, attempt=failures, delay=delay, error=error)
        await trio.sleep(delay)
