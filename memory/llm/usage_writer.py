"""Write-behind for ``api_usage`` rows: accounting off the turn's critical path.

A provider logs every call (:func:`memory.llm.usage.log_api_usage`), and each row used to be one
awaited round trip inside the turn (two per tool-using turn, ~0.8 ms each). Given a
:class:`UsageWriter` as its ``db``, ``execute`` only queues the statement; the writer task
stores what has gathered with one ``executemany`` per statement text (a batch that fails is
retried row by row, so one bad row cannot take the others down; failures are logged, never
raised: accounting is best effort, as it already was with asynchronous commit).

While the database is unreachable (:class:`~runtime.errors.DatabaseUnavailable`) the batch in
hand is kept and retried with backoff (``retry_base`` doubling up to ``retry_cap``) until the
database is back; the rows logged meanwhile wait in the queue behind it. The queue is bounded:
when it is full, or the writer is not running, ``execute`` writes directly (back-pressure; in
an outage that write fails and the caller logs it, so an outage longer than the queue can hold
loses the excess, never blocks a turn). When the writer stops (shutdown), what is queued is
written first, shielded, within ``flush_timeout``. Only a process crash, or an outage at
shutdown, can lose queued rows.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from runtime.db import Queries
from runtime.errors import DatabaseError, DatabaseUnavailable
from runtime.logs import get_logger

log = get_logger(__name__)

Statement = tuple[str, tuple[Any, ...]]


@attrs.define(eq=False)
class UsageWriter:
    """Queues ``execute`` calls and writes them in batches (see the module docstring)."""

    db: Queries
    capacity: int = 1024
    max_batch: int = 256
    flush_timeout: float = 5.0
    retry_base: float = 0.5
    retry_cap: float = 30.0
    written: int = attrs.field(default=0, init=False)
    failed: int = attrs.field(default=0, init=False)
    retries: int = attrs.field(default=0, init=False)  # attempts repeated for an outage
    _send: trio.MemorySendChannel[Statement] | None = attrs.field(default=None, init=False)

    async def execute(self, query: str, *args: Any) -> str:
        if self._send is not None:
            try:
                self._send.send_nowait((query, args))
                return "QUEUED"
            except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
                pass
        return await self.db.execute(query, *args)

    async def fetch(self, query: str, *args: Any) -> Sequence[Any]:
        return await self.db.fetch(query, *args)

    async def executemany(self, query: str, args: Sequence[Sequence[Any]]) -> None:
        await self.db.executemany(query, args)

    async def fetchrow(self, query: str, *args: Any) -> Any:
        return await self.db.fetchrow(query, *args)

    async def fetchval(self, query: str, *args: Any) -> Any:
        return await self.db.fetchval(query, *args)

    async def run(
        self, *, task_status: trio.TaskStatus[UsageWriter] = trio.TASK_STATUS_IGNORED
    ) -> None:
        send, receive = trio.open_memory_channel[Statement](self.capacity)
        self._send = send
        task_status.started(self)
        batch: list[Statement] = []
        with send, receive:
            try:
                while True:
                    batch = [await receive.receive()]
                    batch += _drain(receive, self.max_batch - 1)
                    await self._write_until_stored(batch)
                    batch = []
            finally:
                self._send = None  # later calls write directly
                pending = batch + _drain(receive, None)
                if pending:
                    left = pending
                    with trio.move_on_after(self.flush_timeout, shield=True):
                        left = await self._write(pending)
                    if left:
                        self.failed += len(left)
                        log.error("usage.lost_at_shutdown", rows=len(left))

    async def _write_until_stored(self, batch: list[Statement]) -> None:
        """Write ``batch``; what the database could not be reached for is retried with backoff
        (cancellation leaves the rest in ``batch`` for the final flush)."""
        delay = self.retry_base
        while True:
            left: list[Statement] = []
            with trio.move_on_after(self.flush_timeout, shield=True):
                left = await self._write(batch)
            if not left:
                return
            batch[:] = left
            self.retries += 1
            log.warning("usage.write_waiting", rows=len(left), retry_in=delay)
            await trio.sleep(delay)
            delay = min(self.retry_cap, delay * 2)

    async def _write(self, batch: list[Statement]) -> list[Statement]:
        """Write ``batch``; returns the statements not written because the database is
        unreachable (a row the database refuses is logged and dropped)."""
        groups: dict[str, list[tuple[Any, ...]]] = {}
        for query, args in batch:
            groups.setdefault(query, []).append(args)
        left: list[Statement] = []
        for query, rows in groups.items():
            try:
                await self.db.executemany(query, rows)
                self.written += len(rows)
                continue
            except DatabaseUnavailable:
                left += [(query, args) for args in rows]
                continue
            except DatabaseError:
                pass
            for i, args in enumerate(rows):  # find the bad row(s); keep the rest
                try:
                    await self.db.execute(query, *args)
                    self.written += 1
                except DatabaseUnavailable:
                    left += [(query, a) for a in rows[i:]]
                    break
                except DatabaseError as exc:
                    self.failed += 1
                    log.error("usage.write_failed", error=f"{type(exc).__name__}: {exc}")
        return left


def _drain(receive: trio.MemoryReceiveChannel[Statement], limit: int | None) -> list[Statement]:
    out: list[Statement] = []
    while limit is None or len(out) < limit:
        try:
            out.append(receive.receive_nowait())
        except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
            break
    return out


@asynccontextmanager
async def open_usage_writer(db: Queries, **options: Any) -> AsyncIterator[UsageWriter]:
    """A running :class:`UsageWriter` for the block; queued rows are written on exit."""
    async with trio.open_nursery() as nursery:
        writer: UsageWriter = await nursery.start(UsageWriter(db, **options).run)
        try:
            yield writer
        finally:
            nursery.cancel_scope.cancel()
