"""Keyed registry: spawn, idle stop at the boundary, crash restart, full policy, drain."""

from __future__ import annotations

from collections import Counter

import attrs
import pytest
import structlog
import trio
import trio.testing

from runtime.actor import Reply
from runtime.errors import (
    ActorStopped,
    DatabaseUnavailable,
    EscalationError,
    MailboxFull,
    RegistryFull,
)
from runtime.registry import Registry
from runtime.supervisor import RestartPolicy


@attrs.frozen
class Note:
    text: str


@attrs.frozen
class Ask:
    text: str
    reply: Reply[str]


Msg = Note | Ask


@attrs.define
class World:
    """Shared test state: what each actor handled, and knobs for blocking and crashing."""

    handled: list[tuple[int, str, float]] = attrs.field(factory=list)
    spawned: Counter[int] = attrs.field(factory=Counter)
    context: list[dict[str, object]] = attrs.field(factory=list)
    gate: trio.Event = attrs.field(factory=trio.Event)

    def factory(self, key: int) -> Chat:
        self.spawned[key] += 1
        return Chat(self, key, self.spawned[key])


@attrs.define
class Chat:
    """Handles 'slow' (1 s), 'block' (until gate), 'boom' (crash after 1 s), 'db down' (the
    database lost after 1 s), 'stuck', asks."""

    world: World
    key: int
    generation: int

    async def handle(self, msg: Msg) -> None:
        self.world.context.append(structlog.contextvars.get_contextvars())
        if msg.text == "slow":
            await trio.sleep(1.0)
        elif msg.text == "block":
            await self.world.gate.wait()
        elif msg.text == "boom":
            await trio.sleep(1.0)
            raise RuntimeError("boom")
        elif msg.text == "db down":
            await trio.sleep(1.0)
            raise DatabaseUnavailable("connection lost")
        else:
            await trio.lowlevel.checkpoint()
        self.world.handled.append((self.key, msg.text, trio.current_time()))
        if isinstance(msg, Ask):
            if msg.text == "bad":
                msg.reply.fail(LookupError("no such thing"))
            else:
                msg.reply.set(f"{self.key}:{msg.text}:{self.generation}")


def _texts(world: World, key: int) -> list[str]:
    return [text for k, text, _ in world.handled if k == key]


def _registry(world: World, **kwargs: object) -> Registry[int, Msg]:
    return Registry[int, Msg]("chats", world.factory, key_name="chat_id", **kwargs)  # type: ignore[arg-type]


async def test_spawn_on_first_message_and_bind_key(autojump_clock: trio.abc.Clock) -> None:
    world = World()
    async with trio.open_nursery() as nursery:
        registry = await nursery.start(_registry(world).run)
        assert len(registry) == 0
        await registry.send(7, Note("a"))
        await registry.send(7, Note("b"))
        await registry.send(8, Note("c"))
        assert sorted(registry.live_keys()) == [7, 8]
        await trio.sleep(1.0)
        await registry.aclose()
    assert _texts(world, 7) == ["a", "b"]
    assert _texts(world, 8) == ["c"]
    assert world.spawned == Counter({7: 1, 8: 1})
    assert sorted(c["chat_id"] for c in world.context) == [7, 7, 8]  # type: ignore[type-var]
    assert structlog.contextvars.get_contextvars() == {}


async def test_request_reply_through_registry(autojump_clock: trio.abc.Clock) -> None:
    world = World()
    async with trio.open_nursery() as nursery:
        registry = await nursery.start(_registry(world).run)
        assert await registry.request(3, lambda r: Ask("hi", r), timeout=1.0) == "3:hi:1"
        with pytest.raises(LookupError):
            await registry.request(3, lambda r: Ask("bad", r), timeout=1.0)
        await registry.aclose()


async def test_idle_actor_stops_after_idle_timeout(autojump_clock: trio.abc.Clock) -> None:
    world = World()
    async with trio.open_nursery() as nursery:
        registry = await nursery.start(_registry(world, idle_timeout=10.0).run)
        await registry.send(1, Note("a"))
        await trio.sleep(9.5)
        assert registry.live_keys() == [1]
        await trio.sleep(1.0)
        assert registry.live_keys() == []
        assert len(registry) == 0
        await registry.send(1, Note("b"))  # a later message spawns a fresh actor
        await trio.sleep(1.0)
        await registry.aclose()
    assert _texts(world, 1) == ["a", "b"]
    assert world.spawned[1] == 2


async def test_message_at_idle_boundary_is_not_lost(autojump_clock: trio.abc.Clock) -> None:
    """Send exactly when the idle deadline fires; trio runs the two woken tasks in random
    order, so over many rounds both orders occur, including the one where the message lands
    in the mailbox after the actor's receive was cancelled but before it stops."""
    world = World()
    rounds = 60
    async with trio.open_nursery() as nursery:
        registry = await nursery.start(_registry(world, idle_timeout=10.0).run)
        for key in range(rounds):
            await registry.send(key, Note("first"))
            await trio.sleep(10.0)  # the actor's idle deadline is now too
            await registry.send(key, Note("boundary"))
        await trio.sleep(1.0)
        await registry.aclose()
    for key in range(rounds):
        assert _texts(world, key) == ["first", "boundary"], key
    # the race was exercised: some boundary messages were caught by the stopping actor itself
    assert 1 in world.spawned.values()


async def test_crash_restarts_and_keeps_buffered_messages(
    autojump_clock: trio.abc.Clock,
) -> None:
    world = World()
    policy = RestartPolicy(backoff_base=2.0, backoff_cap=8.0, max_restarts=3, window=60.0)
    async with trio.open_nursery() as nursery:
        registry = await nursery.start(_registry(world, policy=policy).run)
        await registry.send(5, Note("boom"))
        await registry.send(5, Note("a"))
        await registry.send(5, Note("b"))
        with pytest.raises(ActorStopped):  # a request in hand when the actor crashed
            await registry.request(6, lambda r: Ask("boom", r), timeout=10.0)
        await trio.sleep(5.0)
        await registry.aclose()
    # 'boom' crashed at t=1 and was dropped; the fresh actor ran at t=1+2 and drained a, b
    assert [(k, t, at) for k, t, at in world.handled if k == 5] == [(5, "a", 3.0), (5, "b", 3.0)]
    assert world.spawned[5] == 2


async def test_repeated_crashes_escalate(autojump_clock: trio.abc.Clock) -> None:
    world = World()
    policy = RestartPolicy(backoff_base=1.0, backoff_cap=8.0, max_restarts=2, window=60.0)
    with pytest.RaisesGroup(EscalationError, flatten_subgroups=True):
        async with trio.open_nursery() as nursery:
            registry = await nursery.start(_registry(world, policy=policy).run)
            for _ in range(4):
                await registry.send(9, Note("boom"))
            await trio.sleep_forever()
    # crashes at 1, 3 (after 1 s backoff + 1 s), 6 (after 2 s + 1 s): the third escalates
    assert trio.current_time() == 6.0
    assert world.spawned[9] == 3


async def test_full_mailbox_in_registry(autojump_clock: trio.abc.Clock) -> None:
    world = World()
    async with trio.open_nursery() as nursery:
        registry = await nursery.start(_registry(world, capacity=2, send_timeout=4.0).run)
        await registry.send(1, Note("block"))
        await trio.sleep(0.5)  # in hand
        await registry.send(1, Note("x"))
        await registry.send(1, Note("y"))
        start = trio.current_time()
        with pytest.raises(MailboxFull):
            await registry.send(1, Note("z"))
        assert trio.current_time() - start == 4.0
        world.gate.set()
        await registry.aclose()
    assert _texts(world, 1) == ["block", "x", "y"]


async def test_full_registry_evicts_least_recently_used_idle_actor(
    autojump_clock: trio.abc.Clock,
) -> None:
    world = World()
    async with trio.open_nursery() as nursery:
        registry = await nursery.start(_registry(world, max_actors=2).run)
        await registry.send(1, Note("a"))
        await trio.sleep(1.0)
        await registry.send(2, Note("a"))
        await trio.sleep(1.0)
        await registry.send(1, Note("b"))  # now 2 is the least recently used
        await trio.sleep(1.0)
        await registry.send(3, Note("a"))
        assert sorted(registry.live_keys()) == [1, 3]
        assert len(registry) == 2
        await trio.sleep(1.0)
        await registry.aclose()
    assert _texts(world, 3) == ["a"]


async def test_full_registry_without_idle_actor_raises_after_send_timeout(
    autojump_clock: trio.abc.Clock,
) -> None:
    world = World()
    async with trio.open_nursery() as nursery:
        registry = await nursery.start(_registry(world, max_actors=2, send_timeout=3.0).run)
        await registry.send(1, Note("block"))
        await registry.send(2, Note("a"))
        await registry.send(2, Note("block"))
        await trio.sleep(1.0)  # both busy (1 in a handler, 2 in a handler)
        start = trio.current_time()
        with pytest.raises(RegistryFull):
            await registry.send(3, Note("a"))
        assert trio.current_time() - start == 3.0
        assert sorted(registry.live_keys()) == [1, 2]

        async def release_later() -> None:
            await trio.sleep(1.0)
            world.gate.set()

        nursery.start_soon(release_later)
        await registry.send(3, Note("late"))  # room is made by eviction once 1 or 2 is idle
        await trio.sleep(1.0)
        await registry.aclose()
    assert _texts(world, 3) == ["late"]


async def test_aclose_finishes_in_hand_and_drains_buffer(autojump_clock: trio.abc.Clock) -> None:
    world = World()
    async with trio.open_nursery() as nursery:
        registry = await nursery.start(_registry(world).run)
        for text in ("slow", "a", "b"):
            await registry.send(4, Note(text))
        await trio.sleep(0.5)
        await registry.aclose()
        assert trio.current_time() == 1.0
        with pytest.raises(ActorStopped):
            await registry.send(4, Note("late"))
    assert _texts(world, 4) == ["slow", "a", "b"]


@attrs.define
class Buffering:
    """A TimedHandler: buffers notes and flushes them 1.5 s after the last one."""

    flushed: list[tuple[list[str], float]]
    pending: list[str] = attrs.field(factory=list)
    due: float | None = None

    async def handle(self, msg: Msg) -> None:
        self.pending.append(msg.text)
        self.due = trio.current_time() + 1.5

    def deadline(self) -> float | None:
        return self.due

    async def on_deadline(self) -> None:
        self.flushed.append((self.pending, trio.current_time()))
        self.pending, self.due = [], None


async def test_timed_handler_fires_at_deadline_and_is_not_idle_while_pending(
    autojump_clock: trio.testing.MockClock,
) -> None:
    flushed: list[tuple[list[str], float]] = []
    reg: Registry[int, Note] = Registry("t", lambda key: Buffering(flushed), idle_timeout=1.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(reg.run)
        t0 = trio.current_time()
        await reg.send(1, Note("a"))
        await trio.sleep(1.0)
        await reg.send(1, Note("b"))  # resets the 1.5 s timer; idle_timeout (1 s) must not stop it
        await trio.sleep(5.0)
        [(notes, at)] = flushed
        assert notes == ["a", "b"] and at == pytest.approx(t0 + 2.5)
        assert reg.live_keys() == []  # idle after the flush, stopped 1 s later
        await reg.aclose()


async def test_timed_handler_flushes_on_close(autojump_clock: trio.testing.MockClock) -> None:
    flushed: list[tuple[list[str], float]] = []
    reg: Registry[int, Note] = Registry("t", lambda key: Buffering(flushed), idle_timeout=100.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(reg.run)
        await reg.send(1, Note("x"))
        await trio.sleep(0.1)
        t_close = trio.current_time()
        await reg.aclose()
    [(notes, at)] = flushed
    assert notes == ["x"] and at == pytest.approx(t_close)


async def test_crashes_on_an_unreachable_database_never_escalate(
    autojump_clock: trio.abc.Clock,
) -> None:
    world = World()
    policy = RestartPolicy(
        backoff_base=0.5, backoff_cap=30.0, max_restarts=1, window=600.0, outage_backoff_cap=2.0
    )
    async with trio.open_nursery() as nursery:
        registry = await nursery.start(_registry(world, policy=policy).run)
        for _ in range(8):  # eight times the budget, all on the database
            await registry.send(1, Note("db down"))
        await registry.send(1, Note("after"))
        await trio.sleep(60.0)
        assert _texts(world, 1) == ["after"]  # the actor is alive and serving
        assert world.spawned[1] == 9  # restarted after each crash
        await registry.aclose()
