"""ChatLeases: the chats this process serves, held as leases in the database.

A chat's turns, routines and sends run only in the process holding its lease
(:mod:`actors.queues.lease_store`). The router calls :meth:`ChatLeases.hold` before it wakes a
chat's actor: held already (and not about to expire), nothing to do; else the lease is taken in
one statement, or refused because another live process holds it (the router then wakes that
owner with a notification). :meth:`ChatLeases.run` renews every held lease each third of
``ttl`` and releases those of chats no longer in use here (no live actor, no sender worker —
``busy`` — and not used for ``ttl``), so a chat idle here can move to whichever process its next
update reaches. :meth:`ChatLeases.release_all` ends a rolling restart: leases go at once
instead of expiring.

Time is trio's clock (tested with MockClock); expiry is the server's. A lease counts as held
here only until ``ttl`` × :data:`MARGIN` after the statement that last took or renewed it was
sent, so a process whose renewals fail stops using its chats before another may take them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Protocol

import attrs
import trio

from actors.queues.lease_store import Acquired
from runtime import metrics
from runtime.errors import DatabaseError
from runtime.logs import get_logger

log = get_logger(__name__)

#: the share of the ttl a lease is trusted for here, after the statement that took or renewed it
MARGIN = 0.8


class LeaseStore(Protocol):
    """Where the leases live (:class:`~actors.queues.lease_store.SqlLeases`; memory in tests)."""

    async def acquire(self, chat_id: int, ttl: float) -> Acquired: ...

    async def renew(self, chat_ids: Iterable[int], ttl: float) -> set[int]: ...

    async def release(self, chat_ids: Sequence[int]) -> int: ...


@attrs.define
class _Hold:
    used: float  # last asked for here
    until: float  # trusted here until then


def _never(_chat_id: int) -> bool:
    return False


def _nothing(_chat_id: int) -> None:
    return None


async def _nothing_async() -> None:
    return None


@attrs.define(eq=False)
class ChatLeases:
    store: LeaseStore
    ttl: float = 10.0
    #: a chat in use here (a live actor, a sender worker): its lease is kept while it is
    busy: Callable[[int], bool] = _never
    #: a chat just taken from another run (or from no one): e.g. the sender looks at its outbox
    on_taken: Callable[[int], None] = _nothing
    #: after :meth:`release_all` let go of chats (the system: NOTIFY the other processes)
    on_released: Callable[[], Awaitable[object]] = _nothing_async
    _held: dict[int, _Hold] = attrs.field(init=False, factory=dict)
    _releasing: dict[int, trio.Event] = attrs.field(init=False, factory=dict)
    _taking: dict[int, trio.Event] = attrs.field(init=False, factory=dict)
    _closed: bool = attrs.field(init=False, default=False)

    def holds(self, chat_id: int) -> bool:
        """This process may serve ``chat_id`` now (no database round trip)."""
        hold = self._held.get(chat_id)
        return hold is not None and trio.current_time() < hold.until

    def held(self) -> list[int]:
        return list(self._held)

    async def hold(self, chat_id: int) -> bool:
        """Make sure this process holds ``chat_id``'s lease; False when another live process
        does (or this one is shutting down). Database errors propagate."""
        now = trio.current_time()
        if self.holds(chat_id):
            self._held[chat_id].used = now
            return True
        while (busy := self._in_flight(chat_id)) is not None:
            await busy.wait()  # a release in flight would delete what we take now; a take in
            if self.holds(chat_id):  # flight (the sender's, the router's) may have taken it
                return await self.hold(chat_id)
        if self._closed:
            return False
        self._taking[chat_id] = taking = trio.Event()
        try:
            got = await self.store.acquire(chat_id, self.ttl)
        finally:
            del self._taking[chat_id]
            taking.set()
        if not got.got:
            self._held.pop(chat_id, None)
            return False
        self._held[chat_id] = _Hold(now, now + self.ttl * MARGIN)
        metrics.CHAT_LEASES.set(len(self._held))
        if got.fresh:
            if got.requeued or got.unsure:
                log.warning(
                    "lease.recovered",
                    chat_id=chat_id,
                    inbox_ids=list(got.requeued),
                    outbox_ids=list(got.unsure),
                )
            self.on_taken(chat_id)
        return True

    def _in_flight(self, chat_id: int) -> trio.Event | None:
        releasing = self._releasing.get(chat_id)
        return releasing if releasing is not None else self._taking.get(chat_id)

    async def run(
        self, *, task_status: trio.TaskStatus[ChatLeases] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Renew and release, each third of the ttl, until cancelled."""
        task_status.started(self)
        while True:
            await trio.sleep(self.ttl / 3)
            await self.tick()

    async def tick(self) -> None:
        """One round: release the chats no longer used here, renew the others."""
        now = trio.current_time()
        idle = [c for c, h in self._held.items() if now - h.used >= self.ttl and not self.busy(c)]
        if idle:
            await self._release(idle)
        keep = list(self._held)
        metrics.CHAT_LEASES.set(len(keep))
        if not keep:
            return
        now = trio.current_time()
        try:
            still = await self.store.renew(keep, self.ttl)
        except DatabaseError as exc:
            log.warning("lease.renew_failed", chats=len(keep), error=str(exc))
            return
        for chat_id in keep:
            hold = self._held.get(chat_id)
            if hold is None:
                continue
            if chat_id in still:
                hold.until = max(hold.until, now + self.ttl * MARGIN)
            else:
                del self._held[chat_id]
                metrics.CHAT_LEASES_LOST.inc()
                log.warning("lease.lost", chat_id=chat_id)
        metrics.CHAT_LEASES.set(len(self._held))

    async def release_all(self) -> None:
        """Shutting down: take no more chats and let go of every held one; ``on_released``
        then tells the other processes (they sweep at once instead of at their next sweep)."""
        self._closed = True
        chats = list(self._held)
        if chats:
            await self._release(chats)
            log.info("lease.released_all", chats=len(chats))
            await self.on_released()

    async def _release(self, chats: list[int]) -> None:
        done = trio.Event()
        for chat_id in chats:
            del self._held[chat_id]
            self._releasing[chat_id] = done
        metrics.CHAT_LEASES.set(len(self._held))
        try:
            await self.store.release(chats)
        except DatabaseError as exc:  # they expire on their own
            log.warning("lease.release_failed", chats=len(chats), error=str(exc))
        finally:
            for chat_id in chats:
                if self._releasing.get(chat_id) is done:
                    del self._releasing[chat_id]
            done.set()
