"""Whether the database can be reached, and the one rule for giving up on it.

The pool's connects feed :class:`DatabaseHealth` (``runtime.db`` reports every connect that
fails with :class:`~runtime.errors.DatabaseUnavailable` and every one that succeeds). A failed
connect marks the database *down* from that moment; the next successful connect (or probe)
marks it *up* again. Nothing else decides: a lost connection alone proves nothing until a new
connect fails too.

While the database is down, actors that crash on it are restarted without being charged
(``runtime.supervisor``), the webhook answers 503 (the insert fails) and ``/readyz`` names the
outage. :meth:`DatabaseHealth.watch` is the one place the process gives up: while the database
is down it probes it every ``probe_interval`` seconds, and once it has been unreachable for
``limit`` seconds (``DB_OUTAGE_LIMIT``) it raises :class:`~runtime.errors.DatabaseOutage`,
which ends ``engram serve`` with exit code 1 and the line
``engram: database unreachable for 300 s``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import attrs
import trio

from runtime.errors import DatabaseError, DatabaseOutage, DatabaseUnavailable
from runtime.logs import get_logger

log = get_logger(__name__)

Probe = Callable[[], Awaitable[object]]


@attrs.define(eq=False)
class DatabaseHealth:
    """Up or down, since when, and why (see the module docstring)."""

    down_since: float | None = attrs.field(init=False, default=None)
    last_error: str = attrs.field(init=False, default="")
    outages: int = attrs.field(init=False, default=0)  # down transitions seen (tests, logs)
    _went_down: trio.Event = attrs.field(init=False, factory=trio.Event)

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def down_for(self) -> float:
        """Seconds since the database went down (0 while it is up)."""
        return 0.0 if self.down_since is None else trio.current_time() - self.down_since

    def connect_failed(self, error: BaseException) -> None:
        """A connect failed with DatabaseUnavailable: down from now, unless already down."""
        self.last_error = f"{type(error).__name__}: {error}"[:300]
        if self.down_since is None:
            self.down_since = trio.current_time()
            self.outages += 1
            log.warning("db.unreachable", error=self.last_error)
            self._went_down.set()

    def connected(self) -> None:
        """A connect (or a probe) succeeded: up again."""
        if self.down_since is not None:
            log.info("db.reachable_again", down_for=round(self.down_for(), 3))
            self.down_since = None
            self._went_down = trio.Event()

    async def watch(
        self,
        probe: Probe,
        limit: float,
        *,
        probe_interval: float = 1.0,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run for the process's lifetime: while the database is down, probe it; raise
        :class:`DatabaseOutage` once it has been down for ``limit`` seconds."""
        task_status.started()
        while True:
            await self._went_down.wait()
            while self.down_since is not None:
                left = self.down_since + limit - trio.current_time()
                if left <= 0:
                    log.error("db.outage_limit", limit=limit, error=self.last_error)
                    raise DatabaseOutage(f"database unreachable for {limit:g} s")
                await trio.sleep(min(probe_interval, left))
                if self.down_since is None:
                    break
                with trio.move_on_at(self.down_since + limit):  # a probe may hang (no route)
                    try:
                        await probe()
                    except DatabaseUnavailable:
                        continue
                    except DatabaseError:
                        pass  # the server answered: it is reachable
                    self.connected()
