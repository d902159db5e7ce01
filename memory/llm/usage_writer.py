"""Write-behind for ``api_usage`` rows: accounting off the turn's critical path.

A provider logs every call (:func:`memory.llm.usage.log_api_usage`), and each row used to be one
awaited round trip inside the turn (two per tool-using turn, ~0.8 ms each). Given a
:class:`UsageWriter` as its ``db``, ``execute`` only queues the statement; the writer task
stores what has gathered with one ``executemany`` per statement text (a batch that fails is
retried row by row, so one bad row cannot take the others down; failures are logged, never
raised: accounting is best effort, as it already was with asynchronous commit).

The queue is bounded: when it is full, or the writer is not running, ``execute`` writes
directly (back-pressure instead of loss). When the writer stops (shutdown), what is queued is
written first, shielded, within ``flush_timeout``. Only a process crash can lose queued rows.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from runtime.db import Queries
from runtime.errors import DatabaseError
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
    written: int = attrs.field(default=0, init=False)
    failed: int = attrs.field(default=0, init=False)
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
        with send, receive:
            try:
                while True:
                    batch = [await receive.receive()]
                    batch += _drain(receive, self.max_batch - 1)
                    with trio.move_on_after(self.flush_timeout, shield=True):
                        await self._write(batch)
            finally:
                self._send = None  # later calls write directly
                pending = _drain(receive, None)
                if pending:
                    with trio.move_on_after(self.flush_timeout, shield=True):
                        await self._write(pending)

    async def _write(self, batch: list[Statement]) -> None:
        groups: dict[str, list[tuple[Any, ...]]] = {}
        for query, args in batch:
            groups.setdefault(query, []).append(args)
        for query, rows in groups.items():
            try:
                await self.db.executemany(query, rows)
                self.written += len(rows)
            except DatabaseError:
                for args in rows:  # find the bad row(s); keep the rest
                    try:
                        await self.db.execute(query, *args)
                        self.written += 1
                    except DatabaseError as exc:
                        self.failed += 1
                        log.error("usage.write_failed", error=f"{type(exc).__name__}: {exc}")


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
