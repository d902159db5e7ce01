"""Router: wake coalescing, /stop cancellation, callback acks, recovery wake-up."""

from __future__ import annotations

import attrs
import trio
import trio.testing

from actors.chat.wakes import RunningTurns, Wake
from actors.queues import inbox
from actors.router import Router, is_stop_command
from actors.telegram.types import parse_update
from runtime.db import Database


@attrs.define
class Registry:
    sent: list[int] = attrs.field(factory=list)

    async def send(self, key: int, msg: Wake) -> None:
        self.sent.append(key)


@attrs.define
class Bot:
    answered: list[str] = attrs.field(factory=list)

    async def answer_callback_query(self, callback_query_id: str, text: str | None = None) -> None:
        self.answered.append(callback_query_id)


def message(update_id: int, chat: int, text: str) -> dict[str, object]:
    return {
        "update_id": update_id,
        "message": {
            "message_id": update_id,
            "date": 0,
            "text": text,
            "chat": {"id": chat, "type": "private"},
        },
    }


async def test_wakes_are_coalesced_per_chat(db: Database) -> None:
    registry, bot = Registry(), Bot()
    router = Router(db, registry, bot, RunningTurns(), sweep_interval=3600)
    async with trio.open_nursery() as nursery:
        await nursery.start(router.run)
        for i in range(50):
            router.accepted(i, parse_update(message(i, 1 + i % 2, "hi")))
        await trio.testing.wait_all_tasks_blocked()
        assert sorted(registry.sent) == [1, 2]  # one pending wake per chat, not 50
        router.wakes.release(1)  # the chat actor took its wake
        router.accepted(99, parse_update(message(99, 1, "again")))
        await trio.testing.wait_all_tasks_blocked()
        assert sorted(registry.sent) == [1, 1, 2]
        nursery.cancel_scope.cancel()


async def test_stop_cancels_and_callbacks_are_answered(db: Database) -> None:
    registry, bot, running = Registry(), Bot(), RunningTurns()
    router = Router(db, registry, bot, running, sweep_interval=3600)
    scope = trio.CancelScope()
    running.register(5, scope)
    async with trio.open_nursery() as nursery:
        await nursery.start(router.run)
        router.accepted(1, parse_update(message(1, 5, "/stop@engram_bot please")))
        cq = {
            "update_id": 2,
            "callback_query": {
                "id": "cb1",
                "from": {"id": 5, "is_bot": False, "first_name": "A"},
                "data": "x",
                "message": {"message_id": 1, "date": 0, "chat": {"id": 5, "type": "private"}},
            },
        }
        router.accepted(2, parse_update(cq))
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert scope.cancel_called
    assert bot.answered == ["cb1"]
    assert not is_stop_command(parse_update(message(3, 5, "stop it")))


async def test_recovery_wakes_chats_with_open_rows(db: Database) -> None:
    await inbox.insert_update(db, "update:1", 1, 77, "message", message(1, 77, "x"))
    await inbox.insert_update(db, "update:2", 2, 78, "message", message(2, 78, "y"))
    await inbox.mark_done(db, 78, [2])
    registry = Registry()
    router = Router(db, registry, Bot(), RunningTurns(), sweep_interval=3600)
    async with trio.open_nursery() as nursery:
        await nursery.start(router.run)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert registry.sent == [77]


async def test_start_returns_rows_left_processing_counting_a_crash_once(db: Database) -> None:
    a = await inbox.insert_update(db, "update:1", 1, 77, "message", message(1, 77, "x"))
    b = await inbox.insert_update(db, "update:2", 2, 77, "message", message(2, 77, "y"))
    assert a is not None and b is not None
    _, claimed = await inbox.take_open(db, 77, 0, 3)  # in hand when the process died
    assert claimed == a
    registry = Registry()
    router = Router(db, registry, Bot(), RunningTurns(), sweep_interval=0.05)
    async with trio.open_nursery() as nursery:
        await nursery.start(router.run)
        rows = {r.id: r for r in await inbox.pending_for_chat(db, 77)}
        assert (rows[a].status, rows[a].crashes, rows[a].attempts) == ("pending", 1, 0)
        assert (rows[b].status, rows[b].crashes) == ("pending", 0)
        await inbox.take_open(db, 77, 0, 3)  # this process's actor claims it again
        await trio.sleep(0.3)  # several sweeps: they wake, they do not count crashes
        nursery.cancel_scope.cancel()
    row = await inbox.get(db, 77, a)
    assert row is not None and (row.status, row.crashes) == ("processing", 1)
    assert registry.sent[0] == 77
