"""The composition root (:mod:`actors.wiring`): ``open_bot`` builds the whole bot from settings
and a database, runs it against the strict fakes (Bot API, Anthropic) on a real PostgreSQL and
stops cleanly; every periodic job of ``JOBS`` is started with its interval setting."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
from fakes.anthropic_api import FakeAnthropic
from fakes.bot_api import DEFAULT_TOKEN, FakeBotApi, run_fake_bot_api

from actors.settings import Settings, load_settings
from actors.telegram.poller import Poller
from actors.vault.writer import VaultWriter
from actors.wiring import JOBS, Bot, open_bot
from runtime.db import Database
from runtime.shutdown import Shutdown

CHAT = 8830001


def bot_settings(fake: FakeBotApi, claude: FakeAnthropic, **more: str) -> Settings:
    return load_settings(
        {
            "ENGRAM_PORT": "0",
            "TELEGRAM_BOT_TOKEN": DEFAULT_TOKEN,
            "TELEGRAM_ALLOWED_CHAT_IDS": str(CHAT),
            "TELEGRAM_API_BASE_URL": fake.base_url,
            "ANTHROPIC_API_KEY": claude.api_key,
            "ANTHROPIC_BASE_URL": claude.base_url,
            "EMBEDDING_PROVIDER": "local",
            "SHUTDOWN_DEADLINE": "5",
            **more,
        },
        dotenv=None,
    )


def short_poll(*args: Any, **kwargs: Any) -> Poller:
    return Poller(*args, poll_timeout=1, **kwargs)


@asynccontextmanager
async def serving(settings: Settings, db: Database, codes: list[int]) -> AsyncIterator[Bot]:
    """``open_bot`` served as ``engram serve`` does, until the block ends; the exit code in
    ``codes``."""
    shutdown = Shutdown(deadline=5, signals=())
    async with (
        open_bot(settings, db, shutdown=shutdown, poller_factory=short_poll) as bot,
        trio.open_nursery() as nursery,
    ):

        async def run() -> None:
            codes.append(await bot.serve())

        nursery.start_soon(run)
        with trio.fail_after(20):
            while bot.system.chat_access is None:  # noqa: ASYNC110 - started by serve
                await trio.sleep(0.02)
        yield bot
        shutdown.request_stop("test")


async def wait_for(predicate: Any, limit: float = 15.0) -> None:
    with trio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110
            await trio.sleep(0.03)


@pytest.mark.slow
async def test_open_bot_answers_through_the_fakes_and_stops_cleanly(
    db: Database, fake_claude: FakeAnthropic
) -> None:
    codes: list[int] = []
    async with run_fake_bot_api() as fake:
        async with serving(bot_settings(fake, fake_claude), db, codes) as bot:
            fake_claude.queue_text("Hello from the composed bot")
            fake.push_message(CHAT, "hi")
            await wait_for(lambda: fake.sent_texts(CHAT) == ["Hello from the composed bot"])
            assert len(fake_claude.requests) == 1  # the agent built by open_bot asked the model
            # one Bot API client: the system's is the one the root opened
            assert bot.system.bot is bot.parts.bot
        assert codes == [0]  # a clean stop: every drain ran within the deadline
    assert bot.parts.bot._http.is_closed  # the shared client is closed by open_bot


@pytest.mark.slow
async def test_every_periodic_job_starts_with_its_interval_setting(
    db: Database, fake_claude: FakeAnthropic
) -> None:
    codes: list[int] = []
    async with run_fake_bot_api() as fake:
        settings = bot_settings(
            fake,
            fake_claude,
            MAINTENANCE_INTERVAL="4321",
            HEARTBEAT_INTERVAL="4321",
            MESSAGE_RETENTION_DAYS="7",  # a purge set (the default 0 keeps all: no job runs)
        )
        async with serving(settings, db, codes) as bot:
            assert [job.name for job in JOBS] == [
                "embedding_backfill",
                "purge",
                "chat_indexes",
                "compaction_sweep",
                "heartbeat",
                "pattern_ttl",
            ]
            # the heartbeat in every process, then the vault writer (VAULT=on); the maintenance
            # jobs in the one process holding their lease ("job:<name>")
            runs = {spec.name: job.run for spec, job in zip(JOBS, bot.jobs, strict=True)}
            assert bot.system.background[:-1] == [runs["heartbeat"]]
            assert isinstance(getattr(bot.system.background[-1], "__self__", None), VaultWriter)
            assert bot.system.exclusive == [
                (name, run) for name, run in runs.items() if name != "heartbeat"
            ]
            held = await db.fetch(
                "SELECT name FROM process_leases WHERE name LIKE 'job:%' ORDER BY name"
            )
            assert [r["name"] for r in held] == sorted(
                f"job:{name}" for name in runs if name != "heartbeat"
            )
            for spec, job in zip(JOBS, bot.jobs, strict=True):
                if spec.interval is not None:
                    assert job.interval == getattr(settings, spec.interval) == 4321.0, spec.name
            # each job makes its first pass at start: every one of them was started
            await wait_for(lambda: all(job.passes + job.failures >= 1 for job in bot.jobs))
        assert codes == [0]
