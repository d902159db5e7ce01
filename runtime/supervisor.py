"""One-for-one supervision: restart a crashed child with exponential backoff, or escalate.

``supervise(name, start_child, policy)`` runs ``start_child(task_status=...)`` — an async
callable that builds a *fresh* child and runs it — and restarts it when it raises an
``Exception``: log ``actor.crashed`` -> sleep ``policy.backoff(n)`` (``backoff_base * 2**n``,
capped at ``backoff_cap``; ``n`` counts the crashes inside the window, from 0) -> start again.
A crash that makes more than ``max_restarts`` crashes within the last ``window`` seconds raises
:class:`EscalationError` (chained to the crash), which cancels the surrounding nursery. A child
that returns normally is not restarted; cancellation is never caught.

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

from runtime.actor import Address
from runtime.errors import EscalationError

__all__ = ["ChildStarter", "CrashBudget", "RestartPolicy", "supervise"]

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

    def __attrs_post_init__(self) -> None:
        if self.backoff_base < 0 or self.backoff_cap < 0 or self.window <= 0:
            raise ValueError("backoff and window must be non-negative (window > 0)")
        if self.max_restarts < 0:
            raise ValueError("max_restarts must be >= 0")

    def backoff(self, n: int) -> float:
        """Delay before restart ``n`` (0-based): ``backoff_base * 2**n``, capped."""
        return min(self.backoff_cap, self.backoff_base * 2.0 ** min(n, 64))


@attrs.define
class CrashBudget:
    """Sliding-window crash counter of one child; turns a crash into a delay or escalation."""

    name: str
    policy: RestartPolicy
    _crashes: deque[float] = attrs.field(init=False, factory=deque)

    @property
    def recent(self) -> int:
        """Crashes recorded inside the current window."""
        return len(self._crashes)

    def crashed(self, error: Exception) -> float:
        """Record a crash now; return the backoff before the restart, or raise EscalationError."""
        now = trio.current_time()
        self._crashes.append(now)
        while self._crashes and self._crashes[0] <= now - self.policy.window:
            self._crashes.popleft()
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
        return self.policy.backoff(count - 1)


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
    while True:
        try:
            await start_child(task_status=relay)
        except Exception as exc:
            delay = budget.crashed(exc)
            log.warning(
                "actor.crashed",
                actor=name,
                crashes=budget.recent,
                backoff=delay,
                exc_info=exc,
            )
            await trio.sleep(delay)
            log.info("actor.restarting", actor=name)
            continue
        log.info("actor.finished", actor=name)
        return
