"""A crash is charged to no one: whole "processes" (router, chat actors, sender) on the real
database and the strict fake Bot API, killed and started again. A row claimed when its process
died is answered once without an attempt charged; an update that kills the process every time
is skipped at the crash cap, the person told, and the chat's later messages answered."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

import attrs
import pytest
import trio
from fakes.bot_api import FakeBotApi
from fakes.inbox import insert_text
from fakes.memory import Quiet

from actors.agent.turn import TurnInput, TurnReply
from actors.chat.actor import GAVE_UP, chat_factory
from actors.chat.deps import ChatDeps
from actors.chat.store import SqlChatStore
from actors.chat.wakes import Wake
from actors.queues import inbox, outbox
from actors.queues.outbox import OutboxRow
from actors.router import Router
from actors.sender.actor import OutboxReady, SenderActor
from actors.sender.policy import SenderSettings
from actors.telegram.client import BotApiClient
from runtime.actor import Address
from runtime.db import Database
from runtime.errors import ActorError, leaf_exceptions
from runtime.registry import Registry

CHAT = 500
FAST = SenderSettings(chat_interval=0.0, global_rate=1000, sweep_interval=None, jitter=0.0)


class Killed(BaseException):
    """Stands for the process dying: nothing in engram catches it."""


@attrs.define
class Turns:
    """Echoes; an update saying "poison" kills the process during its turn."""

    seen: list[str] = attrs.field(factory=list)

    async def run_turn(self, turn: TurnInput) -> TurnReply:
        self.seen.append(turn.text)
        if turn.text == "poison":
            raise Killed
        return TurnReply(f"echo:{turn.text}")


@asynccontextmanager
async def process(
    db: Database, turns: Turns, bot: BotApiClient | None = None
) -> AsyncIterator[None]:
    """What ``engram serve`` starts, in its order: the sender (with ``bot``), the chat
    registry, the router (whose start is the crash recovery)."""
    async with trio.open_nursery() as nursery:
        sender: Address[OutboxReady] | None = None
        if bot is not None:
            sender = await nursery.start(SenderActor(db, bot, settings=FAST).run)

        def ready(chat_id: int, row: OutboxRow | None) -> None:
            if sender is not None:
                with suppress(ActorError):
                    sender.send_nowait(OutboxReady(chat_id, row))

        deps = ChatDeps(store=SqlChatStore(db), turns=turns, bot=Quiet(), outbox_ready=ready)
        registry: Registry[int, Wake] = Registry(
            "chats", chat_factory(deps), idle_timeout=600, key_name="chat_id"
        )
        await nursery.start(registry.run)
        router = Router(db, registry, Quiet(), deps.running, wakes=deps.wakes, sweep_interval=3600)
        await nursery.start(router.run)
        yield
        nursery.cancel_scope.cancel()


async def wait_sent(db: Database, count: int) -> list[OutboxRow]:
    with trio.fail_after(15):
        while True:
            rows = await outbox.next_pending(db, CHAT)
            done = await db.fetchval("SELECT count(*) FROM outbox WHERE status = 'sent'")
            if not rows and done == count:
                return rows
            await trio.sleep(0.02)


async def test_a_restart_after_a_claim_charges_no_attempt_and_answers_once(
    db: Database, fake: FakeBotApi, bot: BotApiClient
) -> None:
    row_id = await insert_text(db, CHAT, 1, "hello")
    _, claimed = await inbox.take_open(db, CHAT, 0, 3)  # a process claimed it, then died
    assert claimed == row_id
    turns = Turns()
    async with process(db, turns, bot):
        await wait_sent(db, 1)
    assert turns.seen == ["hello"] and fake.sent_texts(CHAT) == ["echo:hello"]
    row = await inbox.get(db, CHAT, row_id)
    assert row is not None and (row.status, row.attempts, row.crashes) == ("done", 0, 1)


async def test_an_update_that_kills_the_process_every_time_is_skipped_at_the_crash_cap(
    db: Database, fake: FakeBotApi, bot: BotApiClient
) -> None:
    poison = await insert_text(db, CHAT, 1, "poison")
    later = [
        await insert_text(db, CHAT, 2, "after one"),
        await insert_text(db, CHAT, 3, "after two"),
    ]
    turns = Turns()
    for crashes in range(inbox.MAX_CRASHES):
        with trio.fail_after(15), pytest.raises(BaseExceptionGroup) as died:
            async with process(db, turns):
                await trio.sleep_forever()
        assert Killed in [type(e) for e in leaf_exceptions(died.value)]
        row = await inbox.get(db, CHAT, poison)
        assert row is not None and (row.status, row.attempts, row.crashes) == (
            "processing",
            0,
            crashes,
        )
    assert turns.seen == ["poison"] * inbox.MAX_CRASHES
    # the next start finds it in its turn at the cap: skipped, the person told, the rest goes on
    async with process(db, turns, bot):
        await wait_sent(db, 3)
    assert turns.seen[inbox.MAX_CRASHES :] == ["after one", "after two"]
    assert fake.sent_texts(CHAT) == [GAVE_UP, "echo:after one", "echo:after two"]
    row = await inbox.get(db, CHAT, poison)
    assert row is not None and (row.status, row.crashes) == ("skipped", inbox.MAX_CRASHES)
    assert "crashes" in (row.last_error or "")
    for row_id in later:
        stored = await inbox.get(db, CHAT, row_id)
        assert stored is not None and (stored.status, stored.attempts, stored.crashes) == (
            "done",
            0,
            0,
        )
