"""The markdown vault from outside: ``engram serve --webhook`` as a subprocess on its own
PostgreSQL, the strict fake Bot API and a scripted fake model.

* VAULT=on: a conversation turn reaches ``<VAULT_DIR>/<chat>/daily/<today>.md`` within
  moments of the reply (written after the commit, debounced); a pattern the database holds at
  start gets its page and its line in ``MEMORY.md``; ``/forget`` → "Forget all" → "Also
  delete..." leaves the topic in no file of the vault (the pattern's page deleted, the daily
  page rewritten).
* VAULT=off: the same turn writes nothing under VAULT_DIR.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import trio
from engram_outside import Engram, free_port, post_update, serve_env
from fakes.anthropic_api import run_fake_anthropic
from fakes.bot_api import FakeBotApi, run_fake_bot_api

from runtime.db import Database

pytestmark = pytest.mark.slow

CHAT = 4020424
TOPIC = "Quetzalia"  # in no text of the test but the ones to forget


async def wait_for(predicate: Callable[[], object], limit: float = 30.0) -> None:
    with trio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110 - another process's doing
            await trio.sleep(0.05)


def vault_text(folder: Path) -> dict[str, str]:
    if not folder.is_dir():
        return {}
    return {str(p.relative_to(folder)): p.read_text() for p in folder.rglob("*.md")}


@asynccontextmanager
async def serving(
    tmp_path: Path, database_url: str, **extra: str
) -> AsyncIterator[tuple[FakeBotApi, httpx.AsyncClient, Engram]]:
    async with (
        run_fake_bot_api() as bot,
        run_fake_anthropic() as model,
        httpx.AsyncClient(timeout=10) as client,
    ):
        model.default_text = "Noted, the kettle it is."
        env = serve_env(
            tmp_path / "home",
            bot_api=bot.base_url,
            model=model.base_url,
            port=free_port(),
            chats=[CHAT],
            DATABASE_URL=database_url,
            VAULT_DIR=str(tmp_path / "vault"),
            VAULT_DEBOUNCE="0.2",
            TIMEZONE="UTC",
            **extra,
        )
        engram = Engram(env, tmp_path / "engram.log")
        await engram.start()
        try:
            await engram.wait_ready()
            yield bot, client, engram
        finally:
            if engram.running:
                assert await engram.stop() == 0, engram.tail()


async def say(bot: FakeBotApi, client: httpx.AsyncClient, port: int, text: str) -> str:
    before = len(bot.sent_texts(CHAT))
    assert await post_update(client, port, bot.push_message(CHAT, text)) == 200
    await wait_for(lambda: len(bot.sent_texts(CHAT)) > before)
    return bot.sent_texts(CHAT)[-1]


async def tap(
    bot: FakeBotApi, client: httpx.AsyncClient, port: int, message: int, label: str
) -> None:
    edits = len(bot.edits)
    assert await post_update(client, port, bot.tap(CHAT, message, label)) == 200
    await wait_for(lambda: len(bot.edits) > edits)


async def test_the_vault_follows_turns_and_forgetting(
    tmp_path: Path, db: Database, database_url: str
) -> None:
    pid = await db.fetchval(
        "INSERT INTO patterns (chat_id, content, kind, canonical_hash, first_seen, last_seen, "
        "confidence) VALUES ($1, $2, 'goal', 'h', now(), now(), 0.9) RETURNING id",
        CHAT,
        f"Wants to visit {TOPIC} next spring",
    )
    folder = tmp_path / "vault" / str(CHAT)
    async with serving(tmp_path, database_url) as (bot, client, engram):
        # the start-up sweep writes what the database already holds
        await wait_for(lambda: any(k.startswith(f"patterns/{pid}-") for k in vault_text(folder)))
        assert f"Wants to visit {TOPIC} next spring" in vault_text(folder)["MEMORY.md"]
        # a turn: the daily page has both sides within moments of the reply
        assert await say(bot, client, engram.port, "I bought a new kettle today") == (
            "Noted, the kettle it is."
        )

        def day_has_turn() -> bool:
            days = [t for k, t in vault_text(folder).items() if k.startswith("daily/")]
            return any("I bought a new kettle today" in d and "kettle it is" in d for d in days)

        await wait_for(day_has_turn, limit=10)
        await say(bot, client, engram.port, f"I keep dreaming about {TOPIC}")
        await wait_for(
            lambda: any(TOPIC in t for k, t in vault_text(folder).items() if k.startswith("daily/"))
        )
        # /forget: the pattern and the messages that mention it
        await say(bot, client, engram.port, f"/forget {TOPIC}")
        message = bot.sent[CHAT][-1].message_id
        await tap(bot, client, engram.port, message, "Forget")  # the one memory
        [delete] = [
            b["text"] for b in bot.buttons(CHAT, message) if b["text"].startswith("Also delete")
        ]
        await tap(bot, client, engram.port, message, delete)
        await wait_for(lambda: not any(TOPIC in t for t in vault_text(folder).values()), limit=10)
        files = vault_text(folder)
        assert not any(k.startswith(f"patterns/{pid}-") for k in files)
        assert any("I bought a new kettle today" in t for t in files.values())  # the rest stays
    events = [e.get("event") for e in engram.log_events()]
    assert "vault.write_failed" not in events


async def test_vault_off_writes_nothing(tmp_path: Path, db: Database, database_url: str) -> None:
    async with serving(tmp_path, database_url, VAULT="off") as (bot, client, engram):
        assert await say(bot, client, engram.port, "I bought a new kettle today") == (
            "Noted, the kettle it is."
        )
        await trio.sleep(1.0)  # five debounces
    assert not (tmp_path / "vault").exists()
    assert await db.fetchval("SELECT count(*) FROM chat_messages WHERE chat_id = $1", CHAT) == 2
