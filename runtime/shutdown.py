"""Graceful shutdown in bounded phases, triggered by SIGINT/SIGTERM or :meth:`request_stop`.

Usage (in ``main``; the coordinator cancels ``root`` at the end)::

    shutdown = Shutdown(deadline=settings.shutdown_deadline)
    async with trio.open_nursery() as root:
        await root.start(shutdown.run, root.cancel_scope)   # signal watcher + coordinator
        registry = await root.start(Registry(...).run)
        shutdown.add_drain("chats", registry.aclose)
        root.start_soon(partial(serve, app, config, shutdown_trigger=shutdown.intake_stopped.wait))
    return shutdown.exit_code

On the first signal (or ``request_stop()``) the coordinator runs:

1. stop intake: sets ``intake_stopped`` (the HTTP server's ``shutdown_trigger`` and the poller
   wait on it);
2. drain: awaits each registered drain callback in registration order (e.g. ``registry.aclose``:
   mailboxes close, actors finish the message in hand and drain their buffers), all under
   ``trio.move_on_after(remaining, shield=True)``, ``remaining`` counting from the stop request;
3. cancel: cancels the given scope, so whatever is still running (a handler stuck past the
   ``deadline``, the server) is cancelled.

``deadline`` seconds after the stop request at the latest, phase 3 runs. A second signal during
shutdown (or :meth:`force`) skips straight to phase 3. ``exit_code`` is 0 after a clean
shutdown (every drain finished in time, no forced stop) and 1 otherwise.
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable

import attrs
import structlog
import trio

__all__ = ["Shutdown"]

log = structlog.get_logger(__name__)

DEFAULT_SIGNALS: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)


@attrs.define(eq=False)
class Shutdown:
    """Signal watcher and phased shutdown coordinator (see the module docstring)."""

    deadline: float = 10.0
    signals: tuple[int, ...] = DEFAULT_SIGNALS
    stop: trio.Event = attrs.field(init=False, factory=trio.Event)
    intake_stopped: trio.Event = attrs.field(init=False, factory=trio.Event)
    done: trio.Event = attrs.field(init=False, factory=trio.Event)
    clean: bool = attrs.field(init=False, default=False)
    _drains: list[tuple[str, Callable[[], Awaitable[object]]]] = attrs.field(
        init=False, factory=list
    )
    _forced: bool = attrs.field(init=False, default=False)
    _drain_scope: trio.CancelScope | None = attrs.field(init=False, default=None)

    @property
    def exit_code(self) -> int:
        """0 after a clean shutdown, 1 if work was cut off (deadline, forced, drain error)."""
        return 0 if self.clean else 1

    def add_drain(self, name: str, drain: Callable[[], Awaitable[object]]) -> None:
        """Register a phase-2 callback (awaited in registration order)."""
        self._drains.append((name, drain))

    def request_stop(self, reason: str = "requested") -> None:
        """Start the shutdown (idempotent)."""
        if not self.stop.is_set():
            log.info("shutdown.requested", reason=reason)
            self.stop.set()

    def force(self) -> None:
        """Skip to the hard deadline: cancel the drains now."""
        self._forced = True
        self.request_stop("forced")
        if self._drain_scope is not None:
            self._drain_scope.cancel()

    async def run(
        self,
        scope: trio.CancelScope,
        *,
        task_status: trio.TaskStatus[Shutdown] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Watch signals; on stop, run the phases and finally cancel ``scope``."""
        async with trio.open_nursery() as watchers:
            if self.signals:
                await watchers.start(self._watch_signals)
            task_status.started(self)
            await self.stop.wait()
            stop_time = trio.current_time()
            log.info("shutdown.intake_stopping")
            self.intake_stopped.set()
            drained = await self._drain(stop_time + self.deadline)
            watchers.cancel_scope.cancel()
        self.clean = drained and not self._forced
        log.info(
            "shutdown.cancelling_rest",
            clean=self.clean,
            took=trio.current_time() - stop_time,
        )
        self.done.set()
        scope.cancel()

    async def _drain(self, deadline: float) -> bool:
        ok = True
        with trio.move_on_after(max(0.0, deadline - trio.current_time()), shield=True) as cs:
            self._drain_scope = cs
            if self._forced:
                cs.cancel()
            for name, drain in self._drains:
                started = trio.current_time()
                try:
                    await drain()
                except Exception as exc:
                    ok = False
                    log.error("shutdown.drain_failed", drain=name, exc_info=exc)
                else:
                    log.info("shutdown.drained", drain=name, took=trio.current_time() - started)
        self._drain_scope = None
        if cs.cancelled_caught:
            log.warning("shutdown.deadline_reached", forced=self._forced, deadline=self.deadline)
            return False
        return ok

    async def _watch_signals(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        with trio.open_signal_receiver(*self.signals) as received:
            task_status.started()
            async for signum in received:
                name = signal.Signals(signum).name
                if not self.stop.is_set():
                    log.info("shutdown.signal", signal=name)
                    self.request_stop(name)
                else:
                    log.warning("shutdown.signal_again", signal=name)
                    self.force()
