"""The sender's policy (:mod:`actors.sender.actor`): its settings (per-chat pacing, the global rate,
retry backoff and deadline, 429 waits, batching; the backoff itself is
:func:`runtime.backoff.backoff_delay`), the global sliding-window rate limiter shared by all its
workers and the per-chat pacing in front of it (:class:`ChatPacer`), the :class:`SenderLedger` that
outlives a restarted sender, and what an undelivered chunk ends as (:class:`Undelivered`). Timing
uses only ``trio.sleep_until``/``trio.current_time``, so it runs on a MockClock.

Per request:

* 429: wait exactly ``retry_after`` and resend;
* 400 "can't parse entities": resend the same chunk as plain text;
* pre-connect network errors and 5xx: retry after ``retry_base`` doubled per failure up to
  ``retry_cap``, with jitter;
* retryable failures go on until the row is ``deadline`` seconds old (by its ``created_at``,
  so across restarts too); then it is ``failed``, logged (``sender.gave_up``) and counted
  (:attr:`~actors.sender.actor.SenderActor.gave_up`);
* may-have-been-delivered network errors (reset, read timeout...): ``uncertain``, NOT resent;
* 403 and every other API error (400 chat not found, 401, 404): ``failed`` at once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection
from datetime import UTC, datetime
from typing import Literal

import attrs
import trio

from actors.telegram.chunking import MAX_MESSAGE_UTF16


@attrs.frozen
class SenderSettings:
    """Pacing, retry and batching parameters (seconds); tests shrink them."""

    chat_interval: float = 1.0
    global_rate: int = 30
    global_period: float = 1.0
    #: first wait after a retryable failure (5xx, a refused connection), doubled per failure
    retry_base: float = 1.0
    #: the longest wait between two attempts (``SEND_RETRY_CAP``)
    retry_cap: float = 300.0
    #: retryable failures (5xx, unreachable, 429) are retried until the row is this old
    #: (``SEND_DEADLINE``); only then is it ``failed``
    deadline: float = 86_400.0
    #: each backoff wait is shortened by up to this fraction of itself, at random
    jitter: float = 0.2
    #: wait after a 429 that carries no retry_after
    default_retry_after: float = 1.0
    chunk_limit: int = MAX_MESSAGE_UTF16
    batch_size: int = 50
    #: rescan the outbox this often for rows whose notification was lost (None: never)
    sweep_interval: float | None = 30.0
    #: bound on one attempt to record a delivered chunk, shielded from cancellation
    record_timeout: float = 10.0
    #: first and longest wait before retrying an outbox read or write that hit a database error
    db_retry_base: float = 0.5
    db_retry_cap: float = 30.0
    mailbox_capacity: int = 256

    def __attrs_post_init__(self) -> None:
        if min(self.global_rate, self.global_period, self.chunk_limit, self.batch_size) <= 0:
            raise ValueError("global_rate, global_period, chunk_limit, batch_size must be > 0")
        if (
            min(self.chat_interval, self.retry_base, self.db_retry_base) < 0
            or min(self.retry_cap, self.deadline, self.default_retry_after, self.db_retry_cap) < 0
        ):
            raise ValueError("intervals, delays, caps and the deadline must be >= 0")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError("jitter must be within [0, 1]")
        if self.record_timeout <= 0 or self.mailbox_capacity < 1:
            raise ValueError("record_timeout and mailbox_capacity must be positive")


@attrs.define
class SenderLedger:
    """What outlives one sender: the supervisor restarts a crashed sender as a fresh actor,
    handed the same ledger.

    ``in_flight``: rows whose chunk this process has handed to the Bot API and whose outcome is
    not recorded yet; a restarted sender marks exactly those ``uncertain`` (a row a turn's
    commit marked in flight meanwhile was never handed to anyone, and is sent). ``recovered``:
    the first sender of the process has marked every row left in flight by earlier processes.
    ``gave_up`` and ``uncertain`` count the rows this process made ``failed`` after retrying
    past the deadline and ``uncertain`` (for the heartbeat and ``/readyz``)."""

    in_flight: set[int] = attrs.field(factory=set)
    recovered: bool = False
    gave_up: int = 0
    uncertain: int = 0


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


@attrs.define
class ChatPacer:
    """One request per ``interval`` seconds per chat, then a slot of the global ``limiter``."""

    interval: float
    limiter: SlidingWindowLimiter
    _last: dict[int, float] = attrs.field(init=False, factory=dict)

    async def wait(self, chat_id: int) -> None:
        """Wait for the chat's pacing slot, then for a global slot."""
        last = self._last.get(chat_id)
        if last is not None:
            await trio.sleep_until(last + self.interval)
        await self.limiter.acquire()
        self._last[chat_id] = trio.current_time()

    def forget_old(self, busy: Collection[int]) -> None:
        """Drop the pacing of chats not in ``busy`` whose last request is an interval old."""
        horizon = trio.current_time() - self.interval
        for chat_id in [c for c, t in self._last.items() if t < horizon]:
            if chat_id not in busy:
                del self._last[chat_id]


#: "waiting": the chat's own transport has no one to deliver to (the row stays open)
Outcome = Literal["failed", "uncertain", "closed", "waiting"]


def wall_now() -> datetime:
    return datetime.now(UTC)


@attrs.frozen
class Undelivered:
    """Why a chunk was not delivered: the row ends ``failed``/``uncertain``, or was closed.
    ``gave_up``: failed because retryable failures lasted past the deadline."""

    outcome: Outcome
    error: str = ""
    gave_up: bool = False


def describe(exc: BaseException) -> str:
    """How an error is recorded on its row and logged: ``Type: message``."""
    return f"{type(exc).__name__}: {exc}"
