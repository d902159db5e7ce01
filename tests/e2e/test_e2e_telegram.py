"""End to end through the real process composition: webhook or polling -> inbox -> chat actor
-> turn -> outbox -> sender -> the strict fake Bot API, on a real PostgreSQL; and crash recovery.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import httpx
import pytest
import trio
from fakes.bot_api import DEFAULT_TOKEN, FakeBotApi, run_fake_bot_api

from actors.agent.turn import TurnInput, TurnReply
from actors.settings import load_settings
from actors.system import BotSystem
from actors.telegram.client import BotApiClient
from runtime import db as dbmod
from runtime.serve import serve
from runtime.shutdown import Shutdown

pytestmark = pytest.mark.slow  # the whole bot end to end (a few seconds each)

CHAT = 5550001
SECRET = "e2e-secret_token"


@attrs.define
class EchoAgent:
    """A turn handler for tests: echoes, or blocks forever on 'hang' (a turn that never ends)."""

    turns: list[TurnInput] = attrs.field(factory=list)
    prefix: str = ""

    async def run_turn(self, turn: TurnInput) -> TurnReply:
        self.turns.append(turn)
        if self.prefix:
            return TurnReply(f"{self.prefix}: {turn.text}")
        if turn.text == "hang":
            await trio.sleep_forever()
        return TurnReply(f"<b>echo</b>: {turn.text}", parse_mode="HTML")


@attrs.define
class Running:
    url: str
    shutdown: Shutdown
    codes: list[int]


@asynccontextmanager
async def running_bot(
    db: dbmod.Database, fake: FakeBotApi, agent: EchoAgent, *, polling: bool = False
) -> AsyncIterator[Running]:
    settings = load_settings(
        {
            "ENGRAM_PORT": "0",
            "TELEGRAM_BOT_TOKEN": DEFAULT_TOKEN,
            "TELEGRAM_SECRET_TOKEN": SECRET,
            "TELEGRAM_ALLOWED_CHAT_IDS": str(CHAT),
            "TELEGRAM_API_BASE_URL": fake.base_url,
            "SHUTDOWN_DEADLINE": "5",
        },
        dotenv=None,
    )
    shutdown = Shutdown(deadline=5, signals=())
    listening = trio.Event()
    urls: list[str] = []
    codes: list[int] = []

    def on_listening(binds: list[str]) -> None:
        urls.extend(binds)
        listening.set()

    def build(s: Any, d: dbmod.Database, sh: Shutdown) -> BotSystem:
        def bot() -> BotApiClient:
            return BotApiClient(DEFAULT_TOKEN, base_url=fake.base_url)

        system = BotSystem(s, d, sh, polling=polling, turns=agent, bot_factory=bot)
        if polling:
            from actors.telegram.poller import Poller

            def short_poll(*args: Any, **kwargs: Any) -> Poller:
                return Poller(*args, poll_timeout=1, **kwargs)

            system.poller_factory = short_poll
        return system

    async def run() -> None:
        codes.append(await serve(settings, db, build, on_listening=on_listening, shutdown=shutdown))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        with trio.fail_after(20):
            await listening.wait()
        yield Running(urls[0], shutdown, codes)
        shutdown.request_stop("test")


async def wait_for(predicate: Any, limit: float = 15.0) -> None:
    """Poll a condition on state other processes/servers change (no event to wait on)."""
    with trio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110
            await trio.sleep(0.05)


def update(fake: FakeBotApi, text: str) -> dict[str, Any]:
    return fake.push_message(CHAT, text)


async def post(url: str, body: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient() as client:
        return await client.post(
            f"{url}/api/telegram",
            json=body,
            headers={"X-Telegram-Bot-Api-Secret-Token": SECRET},
        )


async def test_webhook_update_is_answered_through_the_whole_pipeline(db: dbmod.Database) -> None:
    agent = EchoAgent()
    async with run_fake_bot_api() as fake, running_bot(db, fake, agent) as bot:
        body = fake.push_message(CHAT, "hello there")
        response = await post(bot.url, body)
        assert response.status_code == 200
        # durable before the ack
        row = await db.fetchrow(
            "SELECT status FROM inbox WHERE update_key = $1", f"update:{body['update_id']}"
        )
        assert row is not None
        await wait_for(lambda: fake.sent_texts(CHAT))
        assert fake.sent_texts(CHAT) == ["<b>echo</b>: hello there"]
        again = await post(bot.url, body)  # Telegram retry: acknowledged, nothing else
        assert again.status_code == 200
        await trio.sleep(0.5)
        assert len(agent.turns) == 1
    assert bot.codes == [0]
    statuses = await db.fetch("SELECT status FROM inbox")
    assert [r["status"] for r in statuses] == ["done"]
    sent = await db.fetchrow("SELECT status, telegram_message_ids FROM outbox")
    assert sent is not None and sent["status"] == "sent" and len(sent["telegram_message_ids"]) == 1


async def test_polling_update_is_answered(db: dbmod.Database) -> None:
    agent = EchoAgent()
    async with run_fake_bot_api() as fake, running_bot(db, fake, agent, polling=True):
        update(fake, "via polling")
        await wait_for(lambda: fake.sent_texts(CHAT))
        assert fake.sent_texts(CHAT) == ["<b>echo</b>: via polling"]
    offset = await db.fetchval("SELECT value FROM bot_state WHERE key = 'polling_offset'")
    assert offset is not None


async def test_crash_after_inbox_insert_is_recovered_once(db: dbmod.Database) -> None:
    """Kill the system mid-turn (no drain: like a crash), restart: processed once, reply sent."""
    agent = EchoAgent()
    async with run_fake_bot_api() as fake:
        body = fake.push_message(CHAT, "hang")
        with trio.CancelScope() as crash:
            async with running_bot(db, fake, agent) as bot:
                assert (await post(bot.url, body)).status_code == 200
                await wait_for(lambda: len(agent.turns) == 1)
                crash.cancel()  # the process dies: no drain, no commit
        assert crash.cancelled_caught
        status = await db.fetchval("SELECT status FROM inbox")
        assert status in ("pending", "processing")
        assert await db.fetchval("SELECT count(*) FROM outbox") == 0
        assert fake.sent_texts(CHAT) == []

        after = EchoAgent(prefix="recovered")
        async with running_bot(db, fake, after):
            await wait_for(lambda: fake.sent_texts(CHAT))
            await trio.sleep(1.0)  # a second processing or send would show up by now
        assert fake.sent_texts(CHAT) == ["recovered: hang"]
        assert len(after.turns) == 1
        assert await db.fetchval("SELECT status FROM inbox") == "done"
        assert await db.fetchval("SELECT count(*) FROM outbox WHERE status = 'sent'") == 1
