"""``/readyz`` through the real app of the composed bot (:func:`actors.wiring.open_bot` served as
``engram serve`` does): the heartbeat's latest checks are in the body with their severity, and a
critical check does not make the process unready (503 stays the database's)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio
from fakes.anthropic_api import FakeAnthropic
from fakes.bot_api import DEFAULT_TOKEN, run_fake_bot_api

from actors.scheduler.heartbeat import Heartbeat
from actors.settings import load_settings
from actors.telegram.poller import Poller
from actors.wiring import open_bot
from runtime.db import Database
from runtime.shutdown import Shutdown

CHAT = 8830002


def short_poll(*args: Any, **kwargs: Any) -> Poller:
    return Poller(*args, poll_timeout=1, **kwargs)


@pytest.mark.slow
async def test_readyz_shows_the_heartbeat_and_stays_200_on_a_critical_check(
    db: Database, fake_claude: FakeAnthropic
) -> None:
    # the model failed its last call and never succeeded this week: critical
    await db.execute(
        "INSERT INTO api_usage (provider, model, purpose, ok, error) "
        "VALUES ('anthropic', 'claude-x', 'agent', false, 'overloaded')"
    )
    async with run_fake_bot_api() as fake:
        settings = load_settings(
            {
                "ENGRAM_PORT": "0",
                "TELEGRAM_BOT_TOKEN": DEFAULT_TOKEN,
                "TELEGRAM_ALLOWED_CHAT_IDS": str(CHAT),
                "TELEGRAM_API_BASE_URL": fake.base_url,
                "ANTHROPIC_API_KEY": fake_claude.api_key,
                "ANTHROPIC_BASE_URL": fake_claude.base_url,
                "EMBEDDING_PROVIDER": "local",
                "SHUTDOWN_DEADLINE": "5",
                "HEARTBEAT_INTERVAL": "3600",
            },
            dotenv=None,
        )
        shutdown = Shutdown(deadline=5, signals=())
        binds: list[str] = []
        listening = trio.Event()

        def on_listening(urls: list[str]) -> None:
            binds.extend(urls)
            listening.set()

        codes: list[int] = []
        async with (
            open_bot(settings, db, shutdown=shutdown, poller_factory=short_poll) as bot,
            trio.open_nursery() as nursery,
        ):

            async def run() -> None:
                codes.append(await bot.serve(on_listening))

            nursery.start_soon(run)
            with trio.fail_after(20):
                await listening.wait()
            (beat,) = [job for job in bot.jobs if isinstance(job, Heartbeat)]
            with trio.fail_after(20):
                while beat.passes == 0:  # noqa: ASYNC110 - its first pass runs at start
                    await trio.sleep(0.05)
            async with httpx.AsyncClient(base_url=binds[0]) as client:
                ready = await client.get("/readyz")
            shutdown.request_stop("test")
        assert codes == [0]
        # the one alert went to the first allowed chat, through the outbox and the sender
        alerts = [t for t in fake.sent_texts(CHAT) if "engram health" in t]
    assert ready.status_code == 200
    body = ready.json()
    assert body["status"] == "ready" and body["checks"] == {"database": "ok"}
    heartbeat = body["heartbeat"]
    assert heartbeat["status"] == "critical"
    assert heartbeat["checks"]["model"]["severity"] == "critical"
    assert heartbeat["checks"]["model"]["detail"].startswith("failing:")
    assert heartbeat["checks"]["inbox"] == {"severity": "ok", "detail": "empty"}
    row = await db.fetchrow("SELECT chat_id, text FROM outbox WHERE text LIKE '%engram health%'")
    assert row is not None and row["chat_id"] == CHAT and "model: critical" in row["text"]
    assert len(alerts) <= 1
