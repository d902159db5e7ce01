"""Ownership: what this process serves among several on one database.

One :class:`Ownership` per process, built by the system: the chat leases
(:class:`~actors.queues.leases.ChatLeases`, renewed and released by its task), the listener on
:data:`~actors.queues.lease_store.WAKE_CHANNEL` (another process received an update of a chat
held here), and :meth:`Ownership.exclusive`, which runs a component in one process per database
(:func:`~actors.queues.exclusive.run_exclusive`).

What runs where (README "Scaling"): a chat's turns, routines and sends in the process holding its
lease; long polling and the maintenance jobs in the process holding their named lease; the
scheduler in every process (due jobs are claimed ``FOR UPDATE SKIP LOCKED``, each run once); the
compactor in every process (one compaction per chat at a time: an advisory lock, in the
database); the heartbeat, the vault writer (files of the chats committed here), the HTTP server
and the dashboard in every process.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Container
from functools import partial
from typing import Any

import attrs
import trio

from actors.queues.exclusive import run_exclusive
from actors.queues.lease_store import SWEEP_NOW, WAKE_CHANNEL, SqlLeases
from actors.queues.leases import ChatLeases
from actors.sender.actor import SenderActor
from runtime.db import Database, listen, open_database
from runtime.errors import DatabaseError
from runtime.logs import get_logger

log = get_logger(__name__)


def _ignore(_payload: str) -> None:
    return None


def _ignore_count(_count: int) -> None:
    return None


@attrs.define(eq=False)
class Ownership:
    db: Database
    owner: str
    ttl: float = 10.0
    #: chats whose in-flight chunks are sent again after a takeover (the local chats)
    redeliver: range = range(0)
    incarnation: str = attrs.field(factory=lambda: secrets.token_hex(8))
    #: a notification from another process (the router's ``remote``), set once it runs
    on_wake: Callable[[str], None] = _ignore
    #: told how many processes serve chats (each ttl): e.g. the sender's share of SEND_RATE
    on_processes: Callable[[int], None] = _ignore_count
    sql: SqlLeases = attrs.field(init=False)
    chats: ChatLeases = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.sql = SqlLeases(self.db, self.owner, self.incarnation, self.redeliver)
        self.chats = ChatLeases(self.sql, self.ttl, on_released=self._released)

    async def _released(self) -> None:
        """Every chat let go (a rolling restart): the others sweep now (best effort)."""
        with trio.move_on_after(2):
            try:
                await self.sql.wake_owner(SWEEP_NOW)
            except DatabaseError as exc:
                log.warning("ownership.notify_failed", error=str(exc))

    async def run(
        self, *, task_status: trio.TaskStatus[Ownership] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Renew the leases and listen for wakes until cancelled. The lease statements get a
        pool of their own, so a renewal never waits behind the turns for a connection."""
        log.info("ownership.started", owner=self.owner, incarnation=self.incarnation)
        async with open_database(self.db.url, min_size=1, max_size=2) as own_db:
            self.sql = attrs.evolve(self.sql, db=own_db)
            self.chats.store = self.sql
            await self._serve(task_status)

    async def _serve(self, task_status: trio.TaskStatus[Ownership]) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.chats.run)
            await nursery.start(partial(listen, self.db.url, WAKE_CHANNEL, self._woken))
            nursery.start_soon(self._count_processes)
            task_status.started(self)

    async def _count_processes(self) -> None:
        while True:
            try:
                self.on_processes(await self.sql.live_processes())
            except DatabaseError as exc:
                log.warning("ownership.count_failed", error=str(exc))
            await trio.sleep(self.ttl)

    def _woken(self, payload: str) -> None:
        self.on_wake(payload)

    def attach(
        self,
        registry: Container[int],
        sender: Callable[[], SenderActor | None],
        poke: Callable[[int], None],
        send_rate: int,
    ) -> None:
        """Wire the leases to this process's chats and sender: a chat is in use while its actor
        lives or the sender works on it; a chat taken over is shown to the sender (``poke``);
        SEND_RATE is split evenly among the processes serving chats."""

        def busy(chat_id: int) -> bool:
            actor = sender()
            return chat_id in registry or (actor is not None and actor.working(chat_id))

        def share(processes: int) -> None:
            actor = sender()
            if actor is not None and actor.limiter is not None:
                actor.limiter.rate = max(1, send_rate // processes)

        self.chats.busy, self.chats.on_taken, self.on_processes = busy, poke, share

    async def may_send(self, chat_id: int) -> bool:
        """The sender's question: this process holds (or now takes) the chat's lease."""
        try:
            return await self.chats.hold(chat_id)
        except DatabaseError as exc:  # the sender's sweep asks again
            log.warning("ownership.lease_failed", chat_id=chat_id, error=str(exc))
            return False

    def exclusive(
        self, name: str, job: Callable[..., Awaitable[Any]], stop: trio.Event | None = None
    ) -> Callable[..., Awaitable[None]]:
        """``job`` (a component) run only while this process holds lease ``name``."""
        return partial(run_exclusive, self.sql, name, self.ttl, job, stop=stop)
