"""A chat that blocked the bot pauses its proactive jobs (issue 22): the real sender, the strict
fake Bot API answering 403 for a blocked chat, the real database; the system's ``on_blocked``
(:meth:`actors.system.BotSystem._blocked`) stores the pause; other errors pause nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
from fakes.bot_api import Failure, FakeBotApi
from queue_rows import outbox_row

from actors.queues import outbox
from actors.scheduler import jobs
from actors.sender.actor import OutboxReady, SenderActor
from actors.sender.policy import SenderSettings
from actors.telegram.client import BotApiClient
from runtime import db as dbmod
from runtime.actor import Address

FAST = SenderSettings(
    chat_interval=0.0,
    global_rate=1000,
    retry_base=0.01,
    jitter=0.0,
    default_retry_after=0.01,
    sweep_interval=None,
)


@asynccontextmanager
async def running(sender: SenderActor) -> AsyncIterator[Address[OutboxReady]]:
    async with trio.open_nursery() as nursery:
        yield await nursery.start(sender.run)
        nursery.cancel_scope.cancel()


async def final(db: dbmod.Database, row_id: int) -> str:
    with trio.fail_after(15):
        while True:
            row = await outbox_row(db, row_id)
            if row is not None and row.status not in outbox.OPEN_STATUSES:
                return row.status
            await trio.sleep(0.02)


async def test_a_403_pauses_the_chats_jobs_and_a_500_does_not(
    db: dbmod.Database, fake: FakeBotApi, bot: BotApiClient
) -> None:
    async def on_blocked(chat_id: int, why: str) -> None:
        await jobs.pause_chat(db, chat_id, why)

    sender = SenderActor(db, bot, settings=FAST, on_blocked=on_blocked)
    async with running(sender) as address:
        fake.block_chat(2)
        row = await outbox.enqueue_reply(db, 2, "a check-in")
        await address.send(OutboxReady(2))
        assert await final(db, row) == "failed"
        fake.fail_next("sendMessage", Failure.server_error(500), times=1)
        other = await outbox.enqueue_reply(db, 3, "after one 500")
        await address.send(OutboxReady(3))
        assert await final(db, other) == "sent"
    assert (await jobs.prefs(db, 2)).paused
    reason = await db.fetchval("SELECT paused_reason FROM chat_proactive WHERE chat_id = 2")
    assert "403" in reason and "blocked" in reason
    assert not (await jobs.prefs(db, 3)).paused
