"""One-for-one supervision: restart a crashed child with exponential backoff, or escalate.

``supervise(name, start_child, policy)`` runs ``start_child(task_status=...)`` — an async
callable that builds a *fresh* child and runs it — and restarts it when it raises an
``Exception``: log ``actor.crashed`` -> sleep ``policy.backoff(n)`` (``backoff_base * 2**n``,
capped at ``backoff_cap``; ``n`` counts the crashes inside the window, from 0) -> start again.
A crash that makes more than ``max_restarts`` crashes within the last ``window`` seconds raises
:class:`EscalationError` (chained to the crash), which cancels the surrounding nursery. A child
that returns normally is not restarted; cancellation is never caught.

A crash whose every leaf exception is :class:`~runtime.errors.DatabaseUnavailable` (the server
refused or lost the connection, is shutting down or starting) is the database's outage, not the
child's fault: it is restarted with the same doubling backoff, capped at ``outage_backoff_cap``
(short, so the child is back soon after the database), and is never charged to the restart
budget. Whether an outage lasts too long is decided once for the process, by
:mod:`runtime.db_health` (``DB_OUTAGE_LIMIT``).

Addresses across restarts: the child's first ``task_status.started(handle)`` is relayed to
``supervise``'s own caller. If ``handle`` is an :class:`Address`, the caller gets a stable proxy
that the supervisor repoints to each restarted child's mailbox as soon as it calls
``started``. Messages buffered in a crashed child's mailbox are lost, and sends made while the
child is down (during the backoff) raise ``ActorStopped``; durable work lives in the database.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable
from typing import Any, Protocol, TypeVar, cast, overload

import attrs
import structlog
import trio

from runtime import metrics
from runtime.actor import Address
from runtime.backoff import backoff_delay
from runtime.errors import DatabaseUnavailable, EscalationError, leaf_exceptions

__all__ = ["ChildStarter", "CrashBudget", "RestartPolicy", "is_database_outage", "supervise"]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

log = structlog.get_logger(__name__)


@attrs.frozen
class RestartPolicy:
    """Backoff and restart budget of a supervised child (all durations in seconds)."""

    backoff_base: float = 0.5
    backoff_cap: float = 30.0
    max_restarts: int = 5
    window: float = 60.0
    outage_backoff_cap: float = 5.0

    def __attrs_post_init__(self) -> None:
        if min(self.backoff_base, self.backoff_cap, self.outage_backoff_cap) < 0 or (
            self.window <= 0
        ):
            raise ValueError("backoff and window must be non-negative (window > 0)")
        if self.max_restarts < 0:
            raise ValueError("max_restarts must be >= 0")

    def backoff(self, n: int) -> float:
        """Delay before restart ``n`` (0-based): ``backoff_base * 2**n``, capped."""
        return backoff_delay(n, base=self.backoff_base, cap=self.backoff_cap)


def is_database_outage(error: BaseException) -> bool:
    """True when every leaf of ``error`` is :class:`DatabaseUnavailable`."""
    return all(isinstance(leaf, DatabaseUnavailable) for leaf in leaf_exceptions(error))


@attrs.define
class CrashBudget:
    """Sliding-window crash counter of one child; turns a crash into a delay or escalation."""

    name: str
    policy: RestartPolicy
    _crashes: deque[float] = attrs.field(init=False, factory=deque)
    _outages: deque[float] = attrs.field(init=False, factory=deque)

    @property
    def recent(self) -> int:
        """Crashes charged inside the current window (database outages are not)."""
        return len(self._crashes)

    @property
    def recent_outages(self) -> int:
        """Crashes on an unreachable database inside the current window (never charged)."""
        return len(self._outages)

    def crashed(self, error: Exception) -> float:
        """Record a crash now; return the backoff before the restart, or raise EscalationError.
        A database outage (:func:`is_database_outage`) is not charged and never escalates."""
        now = trio.current_time()
        if is_database_outage(error):
            _record(self._outages, now, self.policy.window)
            metrics.actor_restarted(self.name, outage=True)
            return min(self.policy.outage_backoff_cap, self.policy.backoff(len(self._outages) - 1))
        _record(self._crashes, now, self.policy.window)
        count = len(self._crashes)
        if count > self.policy.max_restarts:
            log.error(
                "actor.escalating",
                actor=self.name,
                crashes=count,
                window=self.policy.window,
                error=repr(error),
            )
            raise EscalationError(self.name, count, self.policy.window, error) from error
        metrics.actor_restarted(self.name, outage=False)
        return self.policy.backoff(count - 1)


def _record(times: deque[float], now: float, window: float) -> None:
    times.append(now)
    while times and times[0] <= now - window:
        times.popleft()


class ChildStarter(Protocol[T_co]):
    """Async callable that builds a fresh child, runs it and reports readiness."""

    def __call__(self, *, task_status: trio.TaskStatus[T_co]) -> Awaitable[object]: ...


_UNSET: Any = object()


class _Relay(trio.TaskStatus[T]):
    """TaskStatus handed to each child: relays the first start, repoints on the next ones."""

    def __init__(self, name: str, outer: trio.TaskStatus[T]) -> None:
        self._name = name
        self._outer = outer
        self._handle: T = _UNSET

    @overload
    def started(self: _Relay[None]) -> None: ...

    @overload
    def started(self, value: T) -> None: ...

    def started(self, value: T | None = None) -> None:
        if self._handle is _UNSET:
            handle = cast(T, value.proxy() if isinstance(value, Address) else value)
            self._handle = handle
            self._outer.started(handle)
        elif isinstance(self._handle, Address) and isinstance(value, Address):
            self._handle.repoint(value)
        log.info("actor.started", actor=self._name)


async def supervise(
    name: str,
    start_child: ChildStarter[T],
    policy: RestartPolicy | None = None,
    *,
    task_status: trio.TaskStatus[T] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run ``start_child`` under ``policy`` (one-for-one); see the module docstring."""
    budget = CrashBudget(name, policy if policy is not None else RestartPolicy())
    relay = _Relay(name, task_status)
    live = metrics.LIVE_ACTORS.labels(metrics.actor_kind(name))
    while True:
        try:
            live.inc()
            try:
                await start_child(task_status=relay)
            finally:
                live.dec()
        except Exception as exc:
            delay = budget.crashed(exc)
            if is_database_outage(exc):
                log.warning("actor.database_unavailable", actor=name, backoff=delay, error=str(exc))
            else:
                log.warning(
                    "actor.crashed", actor=name, crashes=budget.recent, backoff=delay, exc_info=exc
                )
            await trio.sleep(delay)
            log.info("actor.restarting", actor=name)
            continue
        log.info("actor.finished", actor=name)
        return
