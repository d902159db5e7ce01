"""Work that runs in one process per database: long polling (Telegram allows one
``getUpdates`` consumer) and the maintenance jobs (purge, TTL, indexes, backfill, the compaction
sweep). :func:`run_exclusive` runs a component only while this process holds its named lease
(:meth:`~actors.queues.lease_store.SqlLeases.acquire_named`); the other processes stand by and
one of them takes over within about 1.5 × ``ttl`` of the holder's death or release.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import trio

from runtime.errors import DatabaseError
from runtime.logs import get_logger

log = get_logger(__name__)


class NamedLeases(Protocol):
    async def acquire_named(self, name: str, ttl: float) -> bool: ...

    async def release_named(self, name: str) -> None: ...


async def run_exclusive(
    leases: NamedLeases,
    name: str,
    ttl: float,
    job: Callable[..., Awaitable[Any]],
    *,
    stop: trio.Event | None = None,
    task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run ``job`` (a component: ``job(task_status=…)``) while holding lease ``name``; stand by
    otherwise. Returns when ``stop`` is set (standing by) or ``job`` returns; the lease is
    released on the way out. A lease lost (not renewed within the ttl) cancels the job."""
    status = task_status  # started once: with the job when the lease is free, else at once
    while stop is None or not stop.is_set():
        if not await _try(leases, name, ttl):
            status.started()
            status = trio.TASK_STATUS_IGNORED
            with trio.move_on_after(ttl / 2):
                if stop is not None:
                    await stop.wait()
                else:
                    await trio.sleep_forever()
            continue
        log.info("lease.named_taken", name=name)
        lost = trio.Event()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_keep, leases, name, ttl, lost, nursery.cancel_scope)
                await nursery.start(_then_cancel, job, nursery.cancel_scope)
                status.started()
                status = trio.TASK_STATUS_IGNORED
        finally:
            with trio.move_on_after(2, shield=True):
                try:
                    await leases.release_named(name)
                except DatabaseError as exc:
                    log.warning("lease.named_release_failed", name=name, error=str(exc))
        if not lost.is_set():
            return  # the job ended
    status.started()  # stopped before it ever ran


async def _then_cancel(
    job: Callable[..., Awaitable[Any]],
    scope: trio.CancelScope,
    *,
    task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
) -> None:
    try:
        await job(task_status=task_status)
    finally:
        scope.cancel()


async def _try(leases: NamedLeases, name: str, ttl: float) -> bool | None:
    """Take or renew: True, False (another process holds it), None (the database failed)."""
    try:
        return await leases.acquire_named(name, ttl)
    except DatabaseError as exc:
        log.warning("lease.named_failed", name=name, error=str(exc))
        return None


async def _keep(
    leases: NamedLeases, name: str, ttl: float, lost: trio.Event, scope: trio.CancelScope
) -> None:
    """Renew each third of the ttl; set ``lost`` and cancel ``scope`` once another process
    holds the lease or it went unrenewed for most of the ttl."""
    trusted_until = trio.current_time() + ttl * 0.8
    while True:
        await trio.sleep(ttl / 3)
        sent = trio.current_time()
        got = await _try(leases, name, ttl)
        if got:
            trusted_until = sent + ttl * 0.8
        elif got is False or trio.current_time() >= trusted_until:
            log.warning("lease.named_lost", name=name)
            lost.set()
            scope.cancel()
            return
