"""Two processes' routers on one database (in one test process, each with its own Ownership):
a chat is woken only where its lease is held; an update reaching the other process wakes the
owner through LISTEN/NOTIFY, a Stop included; the sweep takes over a chat whose owner died."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs
import trio
from engram_outside import update_body

from actors.chat.wakes import RunningTurns, Wake
from actors.ownership import Ownership
from actors.queues import inbox
from actors.router import Router
from actors.sender.actor import SenderActor
from actors.telegram.types import parse_update
from runtime.db import Database


@attrs.define
class Registry:
    sent: list[int] = attrs.field(factory=list)
    woken: trio.Event = attrs.field(factory=trio.Event)

    async def send(self, key: int, msg: Wake) -> None:
        self.sent.append(key)
        self.woken.set()


class Bot:
    async def answer_callback_query(self, callback_query_id: str, text: str | None = None) -> None:
        return None


@attrs.define
class Process:
    own: Ownership
    router: Router
    registry: Registry
    running: RunningTurns

    async def receive(self, db: Database, update_id: int, chat: int, text: str) -> None:
        """As the webhook does: store the update, then tell the router."""
        body = update_body(update_id, chat=chat, text=text)
        row = await inbox.insert_update(db, f"update:{update_id}", update_id, chat, "message", body)
        assert row is not None
        self.router.accepted(row, parse_update(body))


@asynccontextmanager
async def process(db: Database, name: str, ttl: float = 30) -> AsyncIterator[Process]:
    own = Ownership(db, name, ttl)
    registry, running = Registry(), RunningTurns()
    router = Router(
        db,
        registry,
        Bot(),
        running,
        leases=own.chats,
        lease_sql=own.sql,
        sweep_interval=ttl / 2,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(own.run)
        await nursery.start(router.run)
        own.on_wake = router.remote
        yield Process(own, router, registry, running)
        nursery.cancel_scope.cancel()


async def until(event: trio.Event, seconds: float = 10) -> None:
    with trio.fail_after(seconds):
        await event.wait()


async def test_the_owner_is_woken_for_an_update_the_other_process_got(db: Database) -> None:
    async with process(db, "a") as a, process(db, "b") as b:
        await a.receive(db, 1, 5, "hello")
        await until(a.registry.woken)
        assert a.own.chats.holds(5)
        a.router.wakes.release(5)  # its actor took the wake
        a.registry.woken = trio.Event()
        await b.receive(db, 2, 5, "again")  # the proxy sent this one to b
        await until(a.registry.woken)
        assert a.registry.sent == [5, 5]
        assert b.registry.sent == [] and not b.own.chats.holds(5)
        # a Stop for a's running turn, received by b, stops it
        scope = trio.CancelScope()
        a.running.register(5, scope)
        await b.receive(db, 3, 5, "/stop")
        with trio.fail_after(10):
            while not scope.cancel_called:  # noqa: ASYNC110 - set by another task's notice
                await trio.sleep(0.01)
        assert b.registry.sent == []


async def test_a_dead_owners_chat_is_taken_over_by_the_sweep(db: Database) -> None:
    async with process(db, "b", ttl=1.0) as b:
        async with process(db, "a", ttl=1.0) as a:
            await a.receive(db, 1, 9, "first")
            await until(a.registry.woken)
            row = await inbox.take_open(db, 9, 0, 3)  # a's actor has it in hand ...
            assert row[1] is not None
        # ... when a dies (its tasks end; its lease is not released, it expires)
        started = trio.current_time()
        await until(b.registry.woken, seconds=2 * 1.0 + 1)
        took = trio.current_time() - started
        assert b.registry.sent == [9] and b.own.chats.holds(9)
        assert took <= 2 * 1.0 + 0.5  # the ttl, then the sweep (half a ttl)
        rows = await inbox.pending_for_chat(db, 9)
        assert [(r.status, r.crashes) for r in rows] == [("pending", 1)]  # recovered


async def test_a_process_letting_go_makes_the_others_sweep_at_once(db: Database) -> None:
    async with process(db, "b", ttl=60) as b:  # b's own sweep: only every 30 s
        async with process(db, "a", ttl=60) as a:
            await a.receive(db, 1, 4, "first")
            await until(a.registry.woken)
            await a.receive(db, 2, 4, "second")  # stored, a's actor will not get to it ...
            await a.own.chats.release_all()  # ... a rolling restart lets go of the chat
        started = trio.current_time()
        await until(b.registry.woken, seconds=5)
        assert b.registry.sent == [4] and b.own.chats.holds(4)
        assert trio.current_time() - started < 5  # not the 30 s sweep


async def test_the_send_rate_is_shared_by_the_processes_serving_chats(db: Database) -> None:
    sender = SenderActor(db, Bot())  # type: ignore[arg-type]  # never run: only its limiter
    own = Ownership(db, "a", ttl=30)
    own.attach(set(), lambda: sender, lambda chat_id: None, send_rate=30)
    own.on_processes(3)
    assert sender.limiter is not None and sender.limiter.rate == 10
    own.on_processes(1)
    assert sender.limiter.rate == 30
    own.on_processes(100)
    assert sender.limiter.rate == 1  # never nothing
