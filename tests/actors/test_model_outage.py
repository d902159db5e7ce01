"""A model outage is waited out, through the real database and the strict fake Bot API: the
person is told once (not again after a restart), the message is answered when the model is
back, and the chat's later messages after it, in order. (The timer's backoff and deadline on a
MockClock: test_chat_actor.py; the turn's own retries: test_agent.py.)"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress

import attrs
import trio
from fakes.bot_api import FakeBotApi
from fakes.inbox import insert_text
from fakes.memory import Quiet

from actors.agent.turn import TurnInput, TurnReply
from actors.chat.actor import chat_factory
from actors.chat.deps import ChatDeps
from actors.chat.store import SqlChatStore
from actors.chat.turns import MODEL_AWAY
from actors.chat.wakes import Wake
from actors.errors import ModelUnavailable
from actors.queues import inbox
from actors.queues.outbox import OutboxRow
from actors.router import Router
from actors.sender.actor import OutboxReady, SenderActor
from actors.sender.policy import SenderSettings
from actors.telegram.client import BotApiClient
from memory.errors import LLMOverloaded
from runtime.actor import Address
from runtime.db import Database
from runtime.errors import ActorError
from runtime.registry import Registry

CHAT = 600
FAST = SenderSettings(chat_interval=0.0, global_rate=1000, sweep_interval=None, jitter=0.0)


@attrs.define
class Model:
    """Echoes while up; while down, every turn ends as the agent's does after its retries."""

    down: bool = True
    seen: list[str] = attrs.field(factory=list)

    async def run_turn(self, turn: TurnInput) -> TurnReply:
        self.seen.append(turn.text)
        if self.down:
            raise ModelUnavailable(LLMOverloaded("overloaded", provider="f", model="f", status=529))
        return TurnReply(f"echo:{turn.text}")


@asynccontextmanager
async def process(db: Database, model: Model, bot: BotApiClient) -> AsyncIterator[Router]:
    """Sender, chat registry and router, as ``engram serve`` starts them; the chat actor's
    retry timer shrunk to 20 ms doubling up to 100 ms."""
    async with trio.open_nursery() as nursery:
        sender: Address[OutboxReady] = await nursery.start(SenderActor(db, bot, settings=FAST).run)

        def ready(chat_id: int, row: OutboxRow | None) -> None:
            with suppress(ActorError):
                sender.send_nowait(OutboxReady(chat_id, row))

        deps = ChatDeps(
            store=SqlChatStore(db),
            turns=model,
            bot=Quiet(),
            outbox_ready=ready,
            model_retry_base=0.02,
            model_retry_cap=0.1,
        )
        registry: Registry[int, Wake] = Registry(
            "chats", chat_factory(deps), idle_timeout=600, key_name="chat_id"
        )
        await nursery.start(registry.run)
        router = Router(db, registry, Quiet(), deps.running, wakes=deps.wakes, sweep_interval=3600)
        await nursery.start(router.run)
        yield router
        nursery.cancel_scope.cancel()


async def until(condition: Callable[[], bool]) -> None:
    """Poll what other tasks and servers change."""
    with trio.fail_after(15):
        while not condition():  # noqa: ASYNC110
            await trio.sleep(0.01)


async def test_a_model_outage_through_a_restart_is_told_once_and_answered_in_order(
    db: Database, fake: FakeBotApi, bot: BotApiClient
) -> None:
    first, second = (
        await insert_text(db, CHAT, 1, "first"),
        await insert_text(db, CHAT, 2, "second"),
    )
    model = Model()
    async with process(db, model, bot):
        await until(lambda: len(model.seen) >= 4 and len(fake.sent_texts(CHAT)) == 1)
    # a restart while the model is still down: the rows were handed back, uncharged
    for row_id in (first, second):
        row = await inbox.get(db, CHAT, row_id)
        assert row is not None and row.status in inbox.OPEN_STATUSES and row.attempts == 0
    tried = len(model.seen)
    async with process(db, model, bot):
        await until(lambda: len(model.seen) >= tried + 3)
        assert fake.sent_texts(CHAT) == [MODEL_AWAY]  # told once: not again after the restart
        model.down = False
        await until(lambda: len(fake.sent_texts(CHAT)) == 3)
    assert fake.sent_texts(CHAT) == [MODEL_AWAY, "echo:first", "echo:second"]
    assert set(model.seen[:-2]) == {"first"}  # the later message waited behind the first
    assert model.seen[-2:] == ["first", "second"]
    for row_id in (first, second):
        row = await inbox.get(db, CHAT, row_id)
        assert row is not None and (row.status, row.attempts) == ("done", 0)


async def test_a_later_outage_is_told_again(
    db: Database, fake: FakeBotApi, bot: BotApiClient
) -> None:
    model = Model(down=False)
    async with process(db, model, bot) as router:
        await insert_text(db, CHAT, 1, "fine")
        router.wake(CHAT)  # what the webhook does after its insert
        await until(lambda: fake.sent_texts(CHAT) == ["echo:fine"])
        model.down = True
        await insert_text(db, CHAT, 2, "again")
        router.wake(CHAT)
        await until(lambda: len(model.seen) >= 4)
        model.down = False
        await until(lambda: len(fake.sent_texts(CHAT)) == 3)
    # the outage after an answer is a new one: told again (once)
    assert fake.sent_texts(CHAT) == ["echo:fine", MODEL_AWAY, "echo:again"]
