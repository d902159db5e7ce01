"""The proactive lane from outside: ``engram serve --webhook`` as a subprocess on its own
PostgreSQL, the strict fake Bot API, a fake model, PROACTIVE_TICK shortened.

* ``/remind in 3 seconds test`` is confirmed with the resolved local time (no model call), the
  scheduler puts the reminder's run in the chat's inbox at its time, not before, and the chat
  actor sends it to the Bot API as ``⏰ test`` (no model call), recorded as ``sent``;
* ``/active on`` creates the chat's routine jobs (every routine of ``all_routines``), then
  ``/active off``: no routine job is left enabled and no routine run is enqueued.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
import trio
from engram_outside import Engram, free_port, post_update, serve_env
from fakes.anthropic_api import run_fake_anthropic
from fakes.bot_api import FakeBotApi, run_fake_bot_api

from runtime.db import Database

pytestmark = pytest.mark.slow

CHAT = 4022001


async def wait_for(predicate: Callable[[], object], limit: float = 30.0) -> None:
    with trio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110 - another process's doing
            await trio.sleep(0.05)


async def say(client: httpx.AsyncClient, bot: FakeBotApi, port: int, text: str) -> str:
    before = len(bot.sent_texts(CHAT))
    assert await post_update(client, port, bot.push_message(CHAT, text)) == 200
    await wait_for(lambda: len(bot.sent_texts(CHAT)) > before)
    return bot.sent_texts(CHAT)[-1]


async def routine_rows(db: Database) -> list[tuple[dict[str, object], object]]:
    rows = await db.fetch(
        "SELECT payload, received_at FROM inbox WHERE kind = 'routine' AND chat_id = $1", CHAT
    )
    return [(json.loads(r["payload"])["engram_run"], r["received_at"]) for r in rows]


async def test_remind_runs_at_its_time_and_active_off_enqueues_nothing(
    tmp_path: Path, db: Database, database_url: str
) -> None:
    async with (
        run_fake_bot_api() as bot,
        run_fake_anthropic() as model,
        httpx.AsyncClient(timeout=10) as client,
    ):
        env = serve_env(
            tmp_path,
            bot_api=bot.base_url,
            model=model.base_url,
            port=free_port(),
            chats=[CHAT],
            DATABASE_URL=database_url,
            PROACTIVE_TICK="0.5",
        )
        engram = Engram(env, tmp_path / "engram.log")
        await engram.start()
        try:
            await engram.wait_ready()
            port = engram.port
            confirm = await say(client, bot, port, "/remind in 3 seconds test")
            assert confirm.startswith("I'll remind you on ") and confirm.endswith(": test")
            run_at = await db.fetchval("SELECT run_at FROM cron_jobs WHERE chat_id = $1", CHAT)
            assert await routine_rows(db) == []  # not before its time
            with trio.fail_after(20):
                while not await routine_rows(db):  # noqa: ASYNC110 - another process's doing
                    await trio.sleep(0.2)
            [(run, received)] = await routine_rows(db)
            assert run["kind"] == "reminder" and run["payload"] == {"text": "test"}
            assert run_at <= received < run_at + timedelta(seconds=3), engram.tail()
            with trio.fail_after(20):
                while "⏰ test" not in bot.sent_texts(CHAT):  # noqa: ASYNC110
                    await trio.sleep(0.2)
            outcome = await db.fetchval(
                "SELECT outcome FROM proactive_runs WHERE chat_id = $1 AND name LIKE 'reminder%'",
                CHAT,
            )
            assert outcome == "sent"

            on = await say(client, bot, port, "/active on")
            assert on.startswith("Check-ins are on"), on
            names = await db.fetch(
                "SELECT name FROM cron_jobs WHERE chat_id = $1 AND kind = 'routine' AND enabled",
                CHAT,
            )
            assert {r["name"] for r in names} == {
                "nightly-reflection",
                "weekly-recap",
                "weight-trend",
                "on-this-day",
                "event-reminders",
            }
            off = await say(client, bot, port, "/active off")
            assert off == "Check-ins are off. Reminders you asked for still come."
            enabled = await db.fetchval(
                "SELECT count(*) FROM cron_jobs WHERE chat_id = $1 AND kind = 'routine' "
                "AND enabled",
                CHAT,
            )
            assert enabled == 0
            await trio.sleep(2)  # four ticks
            assert len(await routine_rows(db)) == 1  # the reminder's run only
            assert model.requests == []  # commands: no model call
        finally:
            if engram.running:
                assert await engram.stop() == 0, engram.tail()
