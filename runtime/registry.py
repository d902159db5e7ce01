"""Keyed actors (one per chat): spawned on demand, stopped when idle, restarted on crash.

``Registry(name, factory, ...)`` runs in its own nursery (``await nursery.start(reg.run)``
returns the registry once ready). The first message for a key spawns an actor whose body is
``factory(key)``: any object with ``async def handle(self, msg)``. Each actor owns a bounded
:class:`~runtime.actor.Mailbox` and handles one message at a time with ``key_name=key`` bound
in the structlog contextvars (so logs inside carry e.g. ``chat_id``).

* Idle stop: after ``idle_timeout`` seconds without a message the actor checks its mailbox
  once more with ``receive_nowait()`` and, if it is empty, unregisters and closes it with no
  await in between, so a message arriving at the idle boundary is handled, never lost (a later
  message spawns a fresh actor).
* Crash: an ``Exception`` from ``handle`` is logged, the message in hand is dropped (its request,
  if any, fails with ActorStopped), the buffered messages are kept, and a fresh handler from
  ``factory(key)`` continues after the ``policy`` backoff. Past ``policy.max_restarts`` crashes
  within ``policy.window`` an :class:`EscalationError` cancels the registry's nursery; a crash on
  an unreachable database is restarted without being charged (``runtime.supervisor``).
* Mailbox overload: as in :mod:`runtime.actor` (``send`` waits up to ``send_timeout`` then
  raises MailboxFull; ``send_nowait`` raises MailboxFull at once).
* Full registry (``max_actors`` live actors): the least-recently-used *idle* actor (empty
  mailbox, waiting for a message, not restarting) is evicted gracefully to make room. If none is
  idle, ``send`` waits for room up to ``send_timeout``, then raises :class:`RegistryFull`. An
  evicted actor leaves its slot when its task has exited, so at most ``max_actors`` run.
* ``aclose()`` refuses new messages (ActorStopped) and closes every mailbox: each actor finishes
  the message in hand, drains its buffer, and stops; ``aclose`` returns once all have stopped.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable
from typing import Any, Generic, Protocol, TypeVar

import attrs
import structlog
import trio

from runtime import metrics
from runtime.actor import DEFAULT_CAPACITY, DEFAULT_SEND_TIMEOUT, Mailbox, Reply
from runtime.errors import ActorStopped, MailboxFull, RegistryFull, RequestTimeout
from runtime.supervisor import CrashBudget, RestartPolicy, is_database_outage

__all__ = ["Handler", "Registry", "TimedHandler"]

K = TypeVar("K", bound=Hashable)
M = TypeVar("M")
T = TypeVar("T")
M_contra = TypeVar("M_contra", contravariant=True)

log = structlog.get_logger(__name__)


class Handler(Protocol[M_contra]):
    """The per-key actor body: handles one message at a time."""

    async def handle(self, msg: M_contra) -> None: ...


class TimedHandler(Handler[M_contra], Protocol):
    """A handler with its own timer (e.g. a fragment buffer waiting 1.5 s for the next part).

    While ``deadline()`` returns a time, the actor is not idle: it wakes at that time (trio
    clock) and calls ``on_deadline()``; when its mailbox closes (shutdown, eviction) it calls
    ``on_deadline()`` once more before stopping, so nothing buffered is dropped.
    """

    def deadline(self) -> float | None: ...

    async def on_deadline(self) -> None: ...


class _Stop(enum.Enum):
    STOP = enum.auto()
    TIMER = enum.auto()


@attrs.define(eq=False)
class _Slot(Generic[K, M]):
    """Bookkeeping of one live keyed actor."""

    key: K
    mailbox: Mailbox[M]
    last_used: float
    waiting: bool = False  # idle in receive(): not handling, not restarting


@attrs.define(eq=False)
class Registry(Generic[K, M]):
    """Keyed actors with on-demand spawn, idle stop, crash restart and a live-actor bound."""

    name: str
    factory: Callable[[K], Handler[M]]
    capacity: int = DEFAULT_CAPACITY
    send_timeout: float = DEFAULT_SEND_TIMEOUT
    idle_timeout: float = 300.0
    max_actors: int = 1000
    policy: RestartPolicy = attrs.field(factory=RestartPolicy)
    key_name: str = "key"
    _slots: dict[K, _Slot[K, M]] = attrs.field(init=False, factory=dict)
    _live: int = attrs.field(init=False, default=0)
    _nursery: trio.Nursery | None = attrs.field(init=False, default=None)
    _changed: trio.Event = attrs.field(init=False, factory=trio.Event)
    _closing: trio.Event = attrs.field(init=False, factory=trio.Event)
    _stopped: trio.Event = attrs.field(init=False, factory=trio.Event)

    def __attrs_post_init__(self) -> None:
        if self.max_actors < 1:
            raise ValueError("max_actors must be >= 1")
        if self.idle_timeout <= 0:
            raise ValueError("idle_timeout must be > 0")

    # --- lifetime -----------------------------------------------------------------------------

    async def run(
        self, *, task_status: trio.TaskStatus[Registry[K, M]] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Own the actors' nursery until :meth:`aclose` has drained every actor."""
        if self._nursery is not None or self._stopped.is_set():
            raise RuntimeError(f"registry {self.name!r} already ran")
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started(self)
                log.info("registry.started", registry=self.name)
                await self._closing.wait()
        finally:
            self._closing.set()
            self._stopped.set()
            self._wake()
            log.info("registry.stopped", registry=self.name)

    async def aclose(self) -> None:
        """Refuse new messages, close every mailbox, wait until every actor has drained."""
        self._closing.set()
        self._wake()
        for slot in list(self._slots.values()):
            slot.mailbox.address.close()
        if self._nursery is None:
            self._stopped.set()
        await self._stopped.wait()

    def __len__(self) -> int:
        """Number of live actor tasks (an evicted or idle-stopped actor counts until it exits)."""
        return self._live

    def __contains__(self, key: object) -> bool:
        """``key`` has a registered actor."""
        return key in self._slots

    def live_keys(self) -> list[K]:
        """Keys with a registered actor (one that accepts messages)."""
        return list(self._slots)

    # --- sending ------------------------------------------------------------------------------

    async def send(self, key: K, msg: M) -> None:
        """Deliver ``msg`` to ``key``'s actor, spawning it if needed.

        Waits at most ``send_timeout`` in all; raises RegistryFull (no room for a new actor),
        MailboxFull (mailbox stayed full) or ActorStopped (registry closing).
        """
        await self._deliver(key, msg, trio.current_time() + self.send_timeout)

    async def request(
        self,
        key: K,
        build: Callable[[Reply[T]], M],
        *,
        timeout: float,  # noqa: ASYNC109 - the reply deadline is part of the contract
    ) -> T:
        """Send ``build(reply)`` to ``key``'s actor and return its reply (see runtime.actor)."""
        reply: Reply[T] = Reply()
        msg = build(reply)
        with trio.move_on_after(timeout):
            deadline = min(trio.current_time() + self.send_timeout, trio.current_time() + timeout)
            mailbox = await self._deliver(key, msg, deadline, reply)
            try:
                return await reply.wait()
            finally:
                mailbox.untrack(msg)
        raise RequestTimeout(f"no reply from {self.name}[{key!r}] within {timeout:g}s")

    async def _deliver(
        self, key: K, msg: M, deadline: float, reply: Reply[Any] | None = None
    ) -> Mailbox[M]:
        slot: _Slot[K, M] | None = None
        with trio.move_on_at(deadline):
            slot = await self._slot_for(key)
        if slot is None:
            log.warning("registry.full", registry=self.name, max_actors=self.max_actors)
            raise RegistryFull(f"registry {self.name!r} stayed full ({self.max_actors})")
        mailbox = slot.mailbox
        if reply is not None:
            mailbox.track(msg, reply)
        delivered = False
        try:
            try:  # no await between finding the slot and this send, so it cannot idle-stop
                mailbox.send_nowait(msg)
            except MailboxFull:  # a non-empty mailbox is never idle-stopped nor evicted
                await mailbox.send(msg, deadline=deadline)
            delivered = True
        finally:
            if not delivered:
                mailbox.untrack(msg)
        await trio.lowlevel.cancel_shielded_checkpoint()  # the fast path still checkpoints
        return mailbox

    async def _slot_for(self, key: K) -> _Slot[K, M]:
        """The key's slot, spawned if needed. Returns with no await after the lookup."""
        while True:
            if self._closing.is_set() or self._nursery is None:
                raise ActorStopped(f"registry {self.name!r} is not running")
            slot = self._slots.get(key)
            if slot is not None:
                return slot
            if self._live < self.max_actors:
                return self._spawn(key)
            victim = self._lru_idle()
            if victim is not None:
                log.info("registry.evicting", registry=self.name, evicted=repr(victim.key))
                self._retire(victim)
            await self._changed.wait()  # an actor exits (evicted, idle, crashed out)

    # --- actors -------------------------------------------------------------------------------

    def _lru_idle(self) -> _Slot[K, M] | None:
        idle = [s for s in self._slots.values() if s.waiting and s.mailbox.buffered == 0]
        return min(idle, key=lambda s: s.last_used, default=None)

    def _spawn(self, key: K) -> _Slot[K, M]:
        assert self._nursery is not None
        mailbox = Mailbox[M](f"{self.name}[{key!r}]", self.capacity, send_timeout=self.send_timeout)
        slot = _Slot(key, mailbox, trio.current_time())
        self._slots[key] = slot
        self._live += 1
        self._nursery.start_soon(self._run_slot, slot)
        return slot

    def _retire(self, slot: _Slot[K, M]) -> None:
        """Unregister and close for sending (no await): the actor drains and exits."""
        if self._slots.get(slot.key) is slot:
            del self._slots[slot.key]
        slot.mailbox.address.close()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def _run_slot(self, slot: _Slot[K, M]) -> None:
        budget: CrashBudget | None = None  # at the first crash: its two deques are ~1.5 KB
        live = metrics.LIVE_ACTORS.labels(self.name)
        live.inc()
        try:
            with slot.mailbox.inbox:
                while True:
                    try:
                        await self._serve(slot, self.factory(slot.key))
                        return
                    except Exception as exc:
                        slot.waiting = False
                        if budget is None:
                            budget = CrashBudget(slot.mailbox.name, self.policy)
                        delay = budget.crashed(exc)
                        outage = is_database_outage(exc)
                        log.warning(
                            "registry.actor_database_unavailable"
                            if outage
                            else "registry.actor_crashed",
                            registry=self.name,
                            crashes=budget.recent,
                            backoff=delay,
                            buffered=slot.mailbox.buffered,
                            exc_info=None if outage else exc,
                            error=str(exc) if outage else None,
                            **{self.key_name: slot.key},
                        )
                        await trio.sleep(delay)
        finally:
            live.dec()
            self._retire(slot)
            self._live -= 1
            self._wake()

    async def _serve(self, slot: _Slot[K, M], handler: Handler[M]) -> None:
        inbox = slot.mailbox.inbox
        timed = _deadline_of(handler)
        while True:
            msg = await self._next(slot, timed)
            if msg is _Stop.STOP or msg is _Stop.TIMER:
                if timed is not None and timed() is not None:
                    with structlog.contextvars.bound_contextvars(**{self.key_name: slot.key}):
                        await handler.on_deadline()  # type: ignore[attr-defined]
                    slot.last_used = trio.current_time()
                if msg is _Stop.STOP:
                    return
                continue
            try:
                with structlog.contextvars.bound_contextvars(**{self.key_name: slot.key}):
                    await handler.handle(msg)
            except Exception as exc:
                inbox.crashed(msg, exc)
                log.warning(
                    "registry.message_dropped",
                    registry=self.name,
                    message=type(msg).__name__,
                    **{self.key_name: slot.key},
                )
                raise
            finally:
                slot.last_used = trio.current_time()

    async def _next(
        self, slot: _Slot[K, M], timed: Callable[[], float | None] | None = None
    ) -> M | _Stop:
        """Next message; TIMER at the handler's deadline; STOP when closed or idle."""
        inbox = slot.mailbox.inbox
        due = timed() if timed is not None else None
        if due is not None:
            slot.waiting = False  # holding buffered state: not idle, not evictable
            with trio.move_on_at(due):
                try:
                    return await inbox.receive()
                except trio.EndOfChannel:
                    return _Stop.STOP
            return _Stop.TIMER
        slot.waiting = True
        if self._live >= self.max_actors:
            self._wake()  # an idle actor can now be evicted for a waiting sender
        try:
            with trio.move_on_after(self.idle_timeout):
                try:
                    return await inbox.receive()
                except trio.EndOfChannel:
                    return _Stop.STOP
            try:  # idle: look once more, then unregister and close with no await in between
                return inbox.receive_nowait()
            except trio.WouldBlock:
                log.debug("registry.actor_idle", registry=self.name, **{self.key_name: slot.key})
                self._retire(slot)
                return _Stop.STOP
            except trio.EndOfChannel:
                return _Stop.STOP
        finally:
            slot.waiting = False


def _deadline_of(handler: object) -> Callable[[], float | None] | None:
    """The handler's ``deadline`` method when it is a :class:`TimedHandler`, else None."""
    deadline = getattr(handler, "deadline", None)
    if callable(deadline) and callable(getattr(handler, "on_deadline", None)):
        return deadline  # type: ignore[no-any-return]
    return None
