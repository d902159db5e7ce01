"""The sender's policy (:mod:`actors.sender`): its settings (per-chat pacing, the global rate,
retry delays, 429 waits, batching) and the global sliding-window rate limiter shared by all its
workers. Timing uses only ``trio.sleep_until``/``trio.current_time``, so it runs on a MockClock.
"""

from __future__ import annotations

from collections import deque

import attrs
import trio

from actors.telegram.chunking import MAX_MESSAGE_UTF16


@attrs.frozen
class SenderSettings:
    """Pacing, retry and batching parameters (seconds); tests shrink them."""

    chat_interval: float = 1.0
    global_rate: int = 30
    global_period: float = 1.0
    #: delays before the retries of a pre-connect error or 5xx (len = number of retries)
    retry_delays: tuple[float, ...] = (1.0, 2.0, 4.0)
    #: how many 429 answers one chunk may get before its row is failed
    max_rate_limit_waits: int = 10
    #: wait after a 429 that carries no retry_after
    default_retry_after: float = 1.0
    chunk_limit: int = MAX_MESSAGE_UTF16
    batch_size: int = 50
    #: rescan the outbox this often for rows whose notification was lost (None: never)
    sweep_interval: float | None = 30.0
    #: bound on recording a delivered chunk, shielded from cancellation
    record_timeout: float = 10.0
    mailbox_capacity: int = 256

    def __attrs_post_init__(self) -> None:
        if min(self.global_rate, self.global_period, self.chunk_limit, self.batch_size) <= 0:
            raise ValueError("global_rate, global_period, chunk_limit, batch_size must be > 0")
        if min(self.chat_interval, self.max_rate_limit_waits, *self.retry_delays) < 0:
            raise ValueError("intervals, delays and limits must be >= 0")
        if self.record_timeout <= 0 or self.mailbox_capacity < 1:
            raise ValueError("record_timeout and mailbox_capacity must be positive")


@attrs.define
class SlidingWindowLimiter:
    """At most ``rate`` acquisitions in any window of ``period`` seconds; FIFO among waiters."""

    rate: int = 30
    period: float = 1.0
    _stamps: deque[float] = attrs.field(init=False, factory=deque)
    _lock: trio.Lock = attrs.field(init=False, factory=trio.Lock)

    async def acquire(self) -> None:
        """Wait for a slot and take it."""
        async with self._lock:
            while True:
                now = trio.current_time()
                while self._stamps and self._stamps[0] + self.period <= now:
                    self._stamps.popleft()
                if len(self._stamps) < self.rate:
                    self._stamps.append(now)
                    return
                await trio.sleep_until(self._stamps[0] + self.period)
