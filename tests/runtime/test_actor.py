"""Mailbox overload policy, stop semantics and request/reply of runtime.actor."""

from __future__ import annotations

import math

import attrs
import pytest
import trio
import trio.testing

from runtime.actor import Actor, Address, Mailbox, Reply, serve
from runtime.errors import ActorStopped, MailboxFull, RequestTimeout


@attrs.frozen
class Note:
    text: str


@attrs.frozen
class Ask:
    text: str
    reply: Reply[str]


@attrs.define
class Echo:
    """A small actor: replies upper-cased, fails on 'bad', crashes on 'boom', ignores 'mute'."""

    mailbox: Mailbox[Ask | Note] = attrs.field(factory=lambda: Mailbox[Ask | Note]("echo", 4))
    seen: list[str] = attrs.field(factory=list)

    async def run(
        self, *, task_status: trio.TaskStatus[Address[Ask | Note]] = trio.TASK_STATUS_IGNORED
    ) -> None:
        with self.mailbox.inbox as inbox:
            task_status.started(self.mailbox.address)
            await serve(inbox, self.handle)

    async def handle(self, msg: Ask | Note) -> None:
        await trio.lowlevel.checkpoint()
        self.seen.append(msg.text)
        if isinstance(msg, Note):
            return
        if msg.text == "bad":
            msg.reply.fail(ValueError("bad question"))
        elif msg.text == "boom":
            raise RuntimeError("handler crashed")
        elif msg.text == "slow":
            await trio.sleep(100)
        elif msg.text != "mute":
            msg.reply.set(msg.text.upper())


def test_capacity_must_be_a_positive_int() -> None:
    with pytest.raises(ValueError, match="positive int"):
        Mailbox[Note]("x", math.inf)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="positive int"):
        Mailbox[Note]("x", 0)


def test_echo_is_an_actor() -> None:
    actor: Actor[Ask | Note] = Echo()
    assert actor is not None


async def test_send_nowait_on_full_mailbox_raises_at_once(autojump_clock: trio.abc.Clock) -> None:
    box = Mailbox[Note]("full", 2, send_timeout=3.0)
    box.address.send_nowait(Note("1"))
    box.address.send_nowait(Note("2"))
    start = trio.current_time()
    with pytest.raises(MailboxFull):
        box.address.send_nowait(Note("3"))
    assert trio.current_time() == start
    assert box.buffered == 2


async def test_send_on_full_mailbox_waits_send_timeout_then_raises(
    autojump_clock: trio.abc.Clock,
) -> None:
    box = Mailbox[Note]("full", 1, send_timeout=3.0)
    await box.address.send(Note("1"))
    start = trio.current_time()
    with pytest.raises(MailboxFull):
        await box.address.send(Note("2"))
    assert trio.current_time() - start == 3.0
    assert box.inbox.receive_nowait() == Note("1")
    with pytest.raises(trio.WouldBlock):  # the refused message was not delivered
        box.inbox.receive_nowait()


async def test_send_succeeds_when_room_is_made_in_time(autojump_clock: trio.abc.Clock) -> None:
    box = Mailbox[Note]("full", 1, send_timeout=3.0)
    box.address.send_nowait(Note("1"))

    async def consume_later() -> None:
        await trio.sleep(2.0)
        assert box.inbox.receive_nowait() == Note("1")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume_later)
        await box.address.send(Note("2"))
        assert trio.current_time() == 2.0
    assert box.inbox.receive_nowait() == Note("2")


async def test_send_to_stopped_actor_raises_actor_stopped() -> None:
    box = Mailbox[Note]("gone", 2)
    with box.inbox:
        pass
    assert box.address.closed
    with pytest.raises(ActorStopped):
        box.address.send_nowait(Note("x"))
    with pytest.raises(ActorStopped):
        await box.address.send(Note("x"))


async def test_close_drains_buffer_then_run_returns() -> None:
    echo = Echo()
    async with trio.open_nursery() as nursery:
        address = await nursery.start(echo.run)
        for text in ("a", "b", "c"):
            address.send_nowait(Note(text))
        address.close()
        with pytest.raises(ActorStopped):
            address.send_nowait(Note("late"))
    assert echo.seen == ["a", "b", "c"]


async def test_request_reply_value() -> None:
    async with trio.open_nursery() as nursery:
        address = await nursery.start(Echo().run)
        assert await address.request(lambda r: Ask("hi", r), timeout=1.0) == "HI"
        address.close()


async def test_request_reply_exception() -> None:
    async with trio.open_nursery() as nursery:
        address = await nursery.start(Echo().run)
        with pytest.raises(ValueError, match="bad question"):
            await address.request(lambda r: Ask("bad", r), timeout=1.0)
        address.close()


async def test_request_timeout(autojump_clock: trio.abc.Clock) -> None:
    async with trio.open_nursery() as nursery:
        address = await nursery.start(Echo().run)
        start = trio.current_time()
        with pytest.raises(RequestTimeout):
            await address.request(lambda r: Ask("mute", r), timeout=2.5)
        assert trio.current_time() - start == 2.5
        address.close()


async def test_request_fails_when_actor_stops_without_replying(
    autojump_clock: trio.abc.Clock,
) -> None:
    echo = Echo()
    actor_scope = trio.CancelScope()

    async def run_echo(*, task_status: trio.TaskStatus[Address[Ask | Note]]) -> None:
        with actor_scope:
            await echo.run(task_status=task_status)

    async def stop_soon() -> None:
        await trio.sleep(1.0)
        actor_scope.cancel()

    async with trio.open_nursery() as nursery:
        address = await nursery.start(run_echo)
        nursery.start_soon(stop_soon)
        with pytest.raises(ActorStopped):
            await address.request(lambda r: Ask("slow", r), timeout=50.0)
        assert trio.current_time() == 1.0
    assert echo.seen == ["slow"]


async def test_request_fails_when_actor_crashes_on_it() -> None:
    echo = Echo()
    errors: list[BaseException] = []

    async def run_echo(*, task_status: trio.TaskStatus[Address[Ask | Note]]) -> None:
        try:
            await echo.run(task_status=task_status)
        except RuntimeError as exc:
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        address = await nursery.start(run_echo)
        with pytest.raises(ActorStopped) as info:
            await address.request(lambda r: Ask("boom", r), timeout=5.0)
    assert isinstance(info.value.__cause__, RuntimeError)
    assert len(errors) == 1


async def test_request_to_stopped_actor() -> None:
    box = Mailbox[Ask]("gone", 1)
    box.inbox.close()
    with pytest.raises(ActorStopped):
        await box.address.request(lambda r: Ask("hi", r), timeout=1.0)


def test_reply_is_one_shot() -> None:
    reply: Reply[int] = Reply()
    reply.set(1)
    with pytest.raises(RuntimeError):
        reply.set(2)
    with pytest.raises(RuntimeError):
        reply.fail(ValueError())
    reply.fail_if_open(ValueError())  # the kernel's variant is a no-op once resolved
    assert reply.done


async def test_proxy_repoint_sends_to_new_mailbox() -> None:
    first, second = Mailbox[Note]("a", 2), Mailbox[Note]("b", 2)
    proxy = first.address.proxy()
    proxy.send_nowait(Note("1"))
    proxy.repoint(second.address)
    proxy.send_nowait(Note("2"))
    assert first.inbox.receive_nowait() == Note("1")
    assert second.inbox.receive_nowait() == Note("2")
