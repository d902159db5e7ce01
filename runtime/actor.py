"""Actor kernel: bounded typed mailboxes, send handles, one-shot replies, the actor loop.

A :class:`Mailbox` is a bounded trio memory channel (``capacity`` is a positive int, never
``math.inf``). Its send end belongs to the mailbox and is used through :class:`Address`
handles; its receive end belongs to exactly one actor, through the :class:`Inbox`, which the
actor closes with ``with inbox:``.

Overload policy (the mailbox rejects, it never grows):

* ``Address.send_nowait(msg)`` raises :class:`MailboxFull` at once when the mailbox is full.
* ``await Address.send(msg)`` waits for room at most ``Mailbox.send_timeout`` seconds (settable),
  then raises :class:`MailboxFull`; the message is not delivered.
* Sending to an actor that is stopped or stopping (mailbox closed) raises :class:`ActorStopped`.

Stopping: ``Address.close()`` refuses new messages; the actor finishes the message in hand,
drains what is buffered, and its ``run`` returns normally.

Request/reply: ``await address.request(build, timeout=...)`` makes a one-shot :class:`Reply`,
sends ``build(reply)`` (a message carrying the slot) and waits. The replier calls
``reply.set(value)`` or ``reply.fail(error)``; the requester gets the value or the error raised,
:class:`RequestTimeout` after ``timeout`` seconds, or :class:`ActorStopped` when the actor stops
(or crashes while handling that message) without replying.

An actor is any object with ``async def run(self, *, task_status=trio.TASK_STATUS_IGNORED)``
that calls ``task_status.started(address)`` once ready (see :class:`Actor`); :func:`serve` is the
standard message loop. An exception escaping ``handle`` is a crash: ``run`` raises and the
supervisor restarts a fresh actor.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Generic, Protocol, TypeVar

import attrs
import structlog
import trio

from runtime.errors import ActorStopped, MailboxFull, RequestTimeout

__all__ = [
    "DEFAULT_CAPACITY",
    "DEFAULT_SEND_TIMEOUT",
    "Actor",
    "Address",
    "Inbox",
    "Mailbox",
    "Reply",
    "serve",
]

M = TypeVar("M")
T = TypeVar("T")
M_co = TypeVar("M_co", covariant=True)

log = structlog.get_logger(__name__)

DEFAULT_CAPACITY = 64
DEFAULT_SEND_TIMEOUT = 5.0


class Reply(Generic[T]):
    """One-shot reply slot carried by a request message; resolve it exactly once."""

    __slots__ = ("_done", "_error", "_value")

    def __init__(self) -> None:
        self._done = trio.Event()
        self._value: T | None = None
        self._error: Exception | None = None

    @property
    def done(self) -> bool:
        """True once a value or an error has been set."""
        return self._done.is_set()

    def set(self, value: T) -> None:
        """Reply with a value. Raises RuntimeError if the slot is already resolved."""
        self._check_open()
        self._value = value
        self._done.set()

    def fail(self, error: Exception) -> None:
        """Reply with an error, raised in the requester. RuntimeError if already resolved."""
        self._check_open()
        self._error = error
        self._done.set()

    def fail_if_open(self, error: Exception) -> None:
        """Resolve with ``error`` unless already resolved (used by the kernel)."""
        if not self.done:
            self.fail(error)

    async def wait(self) -> T:
        """Wait for the reply; return the value or raise the error."""
        await self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]

    def _check_open(self) -> None:
        if self.done:
            raise RuntimeError("reply already sent")


@attrs.define(eq=False)
class Mailbox(Generic[M]):
    """A bounded mailbox: ``address`` is the sending side, ``inbox`` the owning actor's side."""

    name: str
    capacity: int = DEFAULT_CAPACITY
    send_timeout: float = DEFAULT_SEND_TIMEOUT
    address: Address[M] = attrs.field(init=False)
    inbox: Inbox[M] = attrs.field(init=False)
    _send: trio.MemorySendChannel[M] = attrs.field(init=False)
    _recv: trio.MemoryReceiveChannel[M] = attrs.field(init=False)
    _pending: dict[int, Reply[Any]] = attrs.field(init=False, factory=dict)
    _closing: bool = attrs.field(init=False, default=False)
    _stopped: bool = attrs.field(init=False, default=False)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.capacity, int) or self.capacity < 1:
            raise ValueError(f"mailbox capacity must be a positive int, got {self.capacity!r}")
        if self.send_timeout < 0:
            raise ValueError("send_timeout must be >= 0")
        self._send, self._recv = trio.open_memory_channel[M](self.capacity)
        self.address = Address(self)
        self.inbox = Inbox(self)

    @property
    def buffered(self) -> int:
        """Number of messages waiting in the mailbox."""
        return self._send.statistics().current_buffer_used

    @property
    def closed(self) -> bool:
        """True once the mailbox refuses new messages (actor stopping or stopped)."""
        return self._closing or self._stopped

    @property
    def stopped(self) -> bool:
        """True once the owning actor has closed its inbox."""
        return self._stopped

    def track(self, msg: object, reply: Reply[Any]) -> None:
        """Remember that ``msg`` carries ``reply`` (failed if the actor stops or crashes)."""
        self._pending[id(msg)] = reply

    def untrack(self, msg: object) -> None:
        """Forget the reply slot of ``msg``."""
        self._pending.pop(id(msg), None)

    def send_nowait(self, msg: M) -> None:
        """See :meth:`Address.send_nowait`."""
        if self._stopped:
            raise ActorStopped(f"actor {self.name!r} is stopped")
        try:
            self._send.send_nowait(msg)
        except trio.WouldBlock:
            raise MailboxFull(f"mailbox of {self.name!r} is full ({self.capacity})") from None
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise ActorStopped(f"actor {self.name!r} is stopped") from None

    async def send(self, msg: M, *, deadline: float | None = None) -> None:
        """See :meth:`Address.send`; ``deadline`` (trio time) overrides ``send_timeout``."""
        if deadline is None:
            deadline = trio.current_time() + self.send_timeout
        if self._stopped:
            raise ActorStopped(f"actor {self.name!r} is stopped")
        with trio.move_on_at(deadline):
            try:
                await self._send.send(msg)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                raise ActorStopped(f"actor {self.name!r} is stopped") from None
            return
        log.warning("mailbox.full", actor=self.name, capacity=self.capacity)
        raise MailboxFull(f"mailbox of {self.name!r} stayed full until the send deadline")

    async def request(
        self,
        build: Callable[[Reply[T]], M],
        timeout: float,  # noqa: ASYNC109 - the reply deadline is part of the contract
    ) -> T:
        """See :meth:`Address.request`."""
        reply: Reply[T] = Reply()
        msg = build(reply)
        self.track(msg, reply)
        try:
            with trio.move_on_after(timeout):
                await self.send(msg)
                return await reply.wait()
        finally:
            self.untrack(msg)
        raise RequestTimeout(f"no reply from {self.name!r} within {timeout:g}s")

    def close_sending(self) -> None:
        """Refuse new messages; the receiver still gets what is buffered."""
        self._closing = True
        self._send.close()

    def close(self) -> None:
        """Stop: refuse messages, drop the buffer, fail every pending request."""
        if self._stopped:
            return
        self._stopped = True
        self.close_sending()
        self._recv.close()
        pending = list(self._pending.values())
        self._pending.clear()
        for reply in pending:
            reply.fail_if_open(ActorStopped(f"actor {self.name!r} stopped without replying"))

    def crashed(self, msg: object, error: Exception) -> None:
        """The handler of ``msg`` crashed: fail its request with ActorStopped from ``error``."""
        reply = self._pending.pop(id(msg), None)
        if reply is not None and not reply.done:
            stopped = ActorStopped(f"actor {self.name!r} crashed handling the request")
            stopped.__cause__ = error
            reply.fail(stopped)

    async def receive(self) -> M:
        return await self._recv.receive()

    def receive_nowait(self) -> M:
        return self._recv.receive_nowait()


class Address(Generic[M]):
    """Handle used to send to an actor; cheap to share between tasks."""

    __slots__ = ("_box",)

    def __init__(self, box: Mailbox[M]) -> None:
        self._box = box

    def __repr__(self) -> str:
        return f"<Address {self._box.name!r}>"

    @property
    def name(self) -> str:
        return self._box.name

    @property
    def closed(self) -> bool:
        """True once the actor behind this address refuses messages."""
        return self._box.closed

    def proxy(self) -> Address[M]:
        """A new handle to the same mailbox, which can later be :meth:`repoint`-ed."""
        return Address(self._box)

    def repoint(self, other: Address[M]) -> None:
        """Send to ``other``'s mailbox from now on (used for a supervisor's restarted child)."""
        self._box = other._box

    def send_nowait(self, msg: M) -> None:
        """Deliver ``msg`` now, or raise MailboxFull (full) / ActorStopped (closed)."""
        self._box.send_nowait(msg)

    async def send(self, msg: M) -> None:
        """Deliver ``msg``, waiting at most the mailbox's ``send_timeout`` for room.

        Raises MailboxFull if no room was made in time, ActorStopped if the actor is closed.
        """
        await self._box.send(msg)

    async def request(
        self,
        build: Callable[[Reply[T]], M],
        *,
        timeout: float,  # noqa: ASYNC109 - the reply deadline is part of the contract
    ) -> T:
        """Send ``build(reply)`` and return the reply's value (or raise its error).

        Raises RequestTimeout after ``timeout`` seconds, ActorStopped if the actor stops or
        crashes without replying, MailboxFull if the request could not be delivered.
        """
        return await self._box.request(build, timeout)

    def close(self) -> None:
        """Refuse new messages; the actor finishes and drains what is buffered, then stops."""
        self._box.close_sending()


class Inbox(Generic[M]):
    """The receive end of a mailbox, owned by one actor; close it with ``with inbox:``."""

    __slots__ = ("_box",)

    def __init__(self, box: Mailbox[M]) -> None:
        self._box = box

    def __enter__(self) -> Inbox[M]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._box.close()

    def close(self) -> None:
        """Stop: refuse messages, drop the buffer, fail every pending request."""
        self._box.close()

    async def receive(self) -> M:
        """Next message; raises trio.EndOfChannel once closed and drained."""
        return await self._box.receive()

    def receive_nowait(self) -> M:
        """Next buffered message; trio.WouldBlock if none, trio.EndOfChannel if closed."""
        return self._box.receive_nowait()

    def crashed(self, msg: object, error: Exception) -> None:
        """The handler of ``msg`` crashed: fail its request (ActorStopped from ``error``)."""
        self._box.crashed(msg, error)

    def __aiter__(self) -> Inbox[M]:
        return self

    async def __anext__(self) -> M:
        try:
            return await self._box.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None


class Actor(Protocol[M]):
    """A long-lived actor: ``run`` calls ``task_status.started(address)`` once ready."""

    async def run(self, *, task_status: trio.TaskStatus[Address[M]] = ...) -> None: ...


async def serve(inbox: Inbox[M], handle: Callable[[M], Awaitable[None]]) -> None:
    """Handle messages one at a time until the mailbox is closed and drained.

    An exception from ``handle`` fails the in-hand request (if any) and propagates: a crash.
    """
    async for msg in inbox:
        try:
            await handle(msg)
        except Exception as exc:
            inbox.crashed(msg, exc)
            raise
