"""A connection pool kept on the trio side of the database bridge.

asyncpg's own pool does its bookkeeping in asyncio: every acquire and release schedules tasks,
a shield and a timeout on the asyncio loop, which under trio-asyncio costs about as much as
the query itself (measured by ``bench/db_bridge.py``). Here the idle connections, the bound on
their number (a FIFO :class:`trio.Semaphore`) and the decision to keep or drop a connection
live in trio; only the query, connecting and closing cross into asyncio.

The pool knows nothing of asyncpg: :mod:`runtime.db` hands it ``connect`` and ``close``
(asyncio calls bridged into trio) and connections that can say whether they are closed and
can be terminated. A connection comes back as ``reusable`` or not; one that is not (its last
statement was cancelled, its state is unknown) is terminated and a fresh one is opened later.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Generic, Protocol, TypeVar

import trio

from runtime import errors
from runtime.logs import get_logger

log = get_logger(__name__)


class RawConnection(Protocol):
    """What the pool needs of a driver connection."""

    def is_closed(self) -> bool: ...

    def terminate(self) -> None: ...


C = TypeVar("C", bound=RawConnection)


class ConnectionPool(Generic[C]):
    """At most ``max_size`` connections; idle ones are reused newest first (warm caches)."""

    def __init__(
        self,
        connect: Callable[[], Awaitable[C]],
        close: Callable[[C], Awaitable[None]],
        *,
        max_size: int,
    ) -> None:
        if max_size < 1:
            raise ValueError("max_size must be at least 1")
        self._connect = connect
        self._close = close
        self.max_size = max_size
        self._slots = trio.Semaphore(max_size)
        self._idle: list[C] = []
        self._open: set[C] = set()
        self._closed = False

    @property
    def size(self) -> int:
        """Connections open now (idle or in use)."""
        return len(self._open)

    @property
    def idle(self) -> int:
        return len(self._idle)

    async def fill(self, count: int) -> None:
        """Open idle connections until ``count`` are open (at start-up, before any acquire:
        the first queries are not slowed by connecting)."""
        while len(self._open) < min(count, self.max_size):
            self._idle.append(await self._new())

    async def acquire(self) -> C:
        """A connection for the caller alone, until :meth:`release`."""
        if self._closed:
            raise errors.DatabaseUnavailable("the connection pool is closed")
        await self._slots.acquire()
        try:
            while self._idle:
                raw = self._idle.pop()
                if not raw.is_closed():
                    return raw
                self._open.discard(raw)  # the server or the network closed it while idle
            return await self._new()
        except BaseException:
            self._slots.release()
            raise

    def release(self, raw: C, *, reusable: bool) -> None:
        """Give ``raw`` back: kept for the next caller when ``reusable`` and still open,
        else terminated."""
        try:
            if reusable and not self._closed and not raw.is_closed():
                self._idle.append(raw)
            else:
                self._drop(raw)
        finally:
            self._slots.release()

    async def close(self, grace: float = 10.0) -> None:
        """Close every idle connection (terminating what does not close within ``grace`` seconds)
        and terminate the ones still in use; later acquires fail."""
        self._closed = True
        idle, self._idle = self._idle, []
        with trio.move_on_after(grace, shield=True):
            for raw in idle:
                try:
                    await self._close(raw)
                except errors.DatabaseError as exc:
                    log.warning("db.close_failed", error=str(exc))
                self._open.discard(raw)
        for raw in list(self._open):
            self._drop(raw)

    async def _new(self) -> C:
        raw = await self._connect()
        self._open.add(raw)
        return raw

    def _drop(self, raw: C) -> None:
        self._open.discard(raw)
        if not raw.is_closed():
            raw.terminate()
