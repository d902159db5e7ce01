"""Group commit for the inbox: one task stores the updates of every concurrent webhook request.

Each webhook request hands its (checked, encoded) update to :meth:`InboxWriter.insert_update`
and waits. The writer task takes everything queued (up to ``max_batch`` updates or
``max_batch_bytes`` of payload), stores it with one multi-row ``INSERT ... ON CONFLICT DO
NOTHING`` (``actors.queues.inbox.insert_updates``: one round trip, one commit, one crossing into
asyncio) and, once that statement has committed, wakes each waiting request with its row id
(None for a duplicate key). While a batch is in flight the next one gathers, so under load
batches grow by themselves and with a single request nothing waits for company.

Failure and cancellation:

* a database error fails that batch only: each of its requests gets the error (the webhook
  answers 503 and Telegram retries), the next batch is tried afresh. A data error (bad row)
  in a batch of several is retried row by row, so one unstorable update cannot take the
  others down with it.
* a request cancelled while its update is still queued is dropped from the queue; one
  cancelled while its batch is in flight leaves the batch alone (its row may be stored
  unacknowledged: Telegram's retry is then a duplicate, and the router's sweep handles it).
* when the writer stops (shutdown, crash), every request still waiting gets
  ``DatabaseUnavailable`` (503), and later calls fail at once.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Mapping
from typing import Any

import attrs
import trio

from actors.queues import inbox
from actors.queues.inbox import NewUpdate
from runtime.db import Queries
from runtime.errors import DatabaseError, DatabaseUnavailable, IntegrityViolation, QueryError
from runtime.logs import get_logger

log = get_logger(__name__)

MAX_BATCH = 256
MAX_BATCH_BYTES = 4 * 1024 * 1024


@attrs.define(eq=False)
class _Waiting:
    """One request's update and, once its batch is done, the outcome."""

    update: NewUpdate
    done: trio.Event = attrs.field(factory=trio.Event)
    row_id: int | None = None
    error: BaseException | None = None
    abandoned: bool = False

    def finish(self, row_id: int | None = None, error: BaseException | None = None) -> None:
        if not self.done.is_set():
            self.row_id, self.error = row_id, error
            self.done.set()


@attrs.define(eq=False)
class InboxWriter:
    """Batches concurrent inbox inserts (see the module docstring). Start :meth:`run` in a
    nursery that outlives the HTTP server; :meth:`aclose` lets it finish what is queued."""

    db: Queries
    max_batch: int = MAX_BATCH
    max_batch_bytes: int = MAX_BATCH_BYTES
    batches: int = attrs.field(init=False, default=0)  # statements sent (for tests and logs)
    _queue: deque[_Waiting] = attrs.field(init=False, factory=deque)
    _in_flight: list[_Waiting] = attrs.field(init=False, factory=list)
    _wakeup: trio.Event = attrs.field(init=False, factory=trio.Event)
    _closed: bool = attrs.field(init=False, default=False)

    async def insert_update(
        self,
        update_key: str,
        update_id: int | None,
        chat_id: int | None,
        kind: str,
        payload: Mapping[str, Any],
    ) -> int | None:
        """Like ``actors.queues.inbox.insert_update``: the new row id once committed, None when the
        key is already stored. ValueError (before any I/O) for an unstorable update,
        DatabaseError when its batch failed or the writer is stopped."""
        item = _Waiting(inbox.new_update(update_key, update_id, chat_id, kind, payload))
        if self._closed:
            raise DatabaseUnavailable("the inbox writer is stopped")
        self._queue.append(item)
        self._wakeup.set()
        try:
            await item.done.wait()
        except BaseException:
            item.abandoned = True  # still queued: the writer skips it
            raise
        if item.error is not None:
            # a copy per request: the same exception object must not be raised in many tasks
            raise copy.copy(item.error) from item.error
        return item.row_id

    async def run(
        self, *, task_status: trio.TaskStatus[InboxWriter] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Write batches until :meth:`aclose` (after the queue is empty) or cancellation."""
        task_status.started(self)
        try:
            while True:
                batch = self._take()
                if batch:
                    await self._write(batch)
                elif self._closed:
                    return
                else:
                    self._wakeup = trio.Event()
                    await self._wakeup.wait()
        finally:
            self._closed = True
            stopped = DatabaseUnavailable("the inbox writer stopped")
            for item in (*self._in_flight, *self._queue):
                item.finish(error=stopped)
            self._in_flight, self._queue = [], deque()

    async def aclose(self) -> None:
        """Take no new updates; :meth:`run` returns once the queued ones are written."""
        self._closed = True
        self._wakeup.set()

    def _take(self) -> list[_Waiting]:
        batch: list[_Waiting] = []
        size = 0
        queue = self._queue
        while queue and len(batch) < self.max_batch:
            item = queue[0]
            if item.abandoned:
                queue.popleft()
                continue
            size += len(item.update.payload_json)
            if batch and size > self.max_batch_bytes:
                break
            batch.append(queue.popleft())
        return batch

    async def _write(self, batch: list[_Waiting]) -> None:
        self._in_flight = batch  # if we are cancelled meanwhile, run()'s cleanup fails them
        try:
            await self._store(batch)
        except Exception as exc:  # a bug, not the database: fail this batch, keep serving
            log.error("inbox_writer.batch_crashed", rows=len(batch), exc_info=exc)
            for item in batch:
                item.finish(error=exc)
        self._in_flight = []

    async def _store(self, batch: list[_Waiting]) -> None:
        self.batches += 1
        try:
            ids = await inbox.insert_updates(self.db, [item.update for item in batch])
        except (QueryError, IntegrityViolation) as exc:
            if len(batch) == 1:
                batch[0].finish(error=exc)
                return
            # maybe one bad row: find it, so the others are stored
            log.warning("inbox_writer.retry_rows", rows=len(batch), error=str(exc)[:300])
            for item in batch:
                await self._store([item])
            return
        except DatabaseError as exc:
            log.warning("inbox_writer.batch_failed", rows=len(batch), error=str(exc)[:300])
            for item in batch:
                item.finish(error=exc)
            return
        for item, row_id in zip(batch, ids, strict=True):
            item.finish(row_id=row_id)
