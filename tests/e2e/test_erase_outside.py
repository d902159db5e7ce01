"""A whole chat erased, from outside (issue 24 item 5): ``engram serve --webhook`` as a
subprocess on its own PostgreSQL, the strict fake Bot API (taps are callback queries posted to
the webhook) and a scripted fake model. A real conversation (model turns: messages, usage rows),
``/remember`` (a pattern with its vectors), ``/remind`` (a scheduled job), ``/active on`` (the
chat's proactive row), a vault folder; then ``/forget everything`` → ``[Erase everything…]`` →
the typed word: no table with a ``chat_id`` column (read from the catalogue) holds a row of the
chat but the reply saying so, its vault folder is gone, the other chat keeps everything, and the
chat talks again afterwards, from nothing."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import trio
from engram_outside import Engram, free_port, post_update, serve_env
from fakes.anthropic_api import run_fake_anthropic
from fakes.bot_api import run_fake_bot_api

from runtime.db import Database

pytestmark = pytest.mark.slow

CHAT, OTHER = 4024501, 4024502


async def chat_tables(db: Database) -> list[str]:
    """Every table with a ``chat_id`` column, from the catalogue (not from engram's code)."""
    rows = await db.fetch(
        "SELECT c.table_name::text AS t FROM information_schema.columns c "
        "JOIN information_schema.tables t USING (table_schema, table_name) "
        "WHERE c.table_schema = 'public' AND c.column_name = 'chat_id' "
        "AND t.table_type = 'BASE TABLE' ORDER BY 1"
    )
    return [str(r["t"]) for r in rows]


async def count_chat_rows(db: Database, chat: int) -> dict[str, int]:
    """Per table with ``chat_id``, the chat's rows (only tables with some)."""
    found = {}
    for table in await chat_tables(db):
        n = int(await db.fetchval(f'SELECT count(*) FROM "{table}" WHERE chat_id = $1', chat))
        if n:
            found[table] = n
    return found


async def test_forget_everything_leaves_nothing_of_the_chat(
    tmp_path: Path, db: Database, database_url: str
) -> None:
    async with (
        run_fake_bot_api() as bot,
        run_fake_anthropic() as model,
        httpx.AsyncClient(timeout=10) as client,
    ):
        model.default_text = "Noted."
        env = serve_env(
            tmp_path,
            bot_api=bot.base_url,
            model=model.base_url,
            port=free_port(),
            chats=[CHAT, OTHER],
            DATABASE_URL=database_url,
        )
        engram = Engram(env, tmp_path / "engram.log")

        async def wait_for(predicate: object, limit: float = 30.0) -> None:
            with trio.fail_after(limit):
                while not predicate():  # type: ignore[operator]  # noqa: ASYNC110
                    await trio.sleep(0.05)

        async def say(text: str, chat: int = CHAT) -> str:
            before = len(bot.sent_texts(chat))
            assert await post_update(client, engram.port, bot.push_message(chat, text)) == 200
            await wait_for(lambda: len(bot.sent_texts(chat)) > before)
            return bot.sent_texts(chat)[-1]

        await engram.start()
        try:
            await engram.wait_ready()
            for chat in (CHAT, OTHER):
                assert await say("I live in Lisbon and play the cello", chat) == "Noted."
                assert (await say("/remember I play the cello", chat)).startswith("✓")
                await say("/remind tomorrow 9:00 call mum", chat)
                await say("/active on", chat)
            folder = tmp_path / "vault" / str(CHAT)
            (folder / "daily").mkdir(parents=True, exist_ok=True)  # the vault writer's, maybe
            (folder / "MEMORY.md").write_text("I play the cello")
            before = await count_chat_rows(db, CHAT)
            assert {"chat_messages", "patterns", "cron_jobs", "api_usage", "inbox"} <= set(before)
            other = await count_chat_rows(db, OTHER)

            asked = await say("/forget everything")
            assert asked.startswith("Erase everything of this chat? ")
            message = bot.sent[CHAT][-1].message_id
            edits = len(bot.edits)
            tap = bot.tap(CHAT, message, "Erase everything…")
            assert await post_update(client, engram.port, tap) == 200
            await wait_for(lambda: len(bot.edits) > edits)
            assert "ERASE" in str(bot.message(CHAT, message).text)
            done = await say("ERASE")
            assert done.startswith("✓ Erased everything of this chat: ")

            async def settled() -> bool:
                n = await db.fetchval(
                    "SELECT count(*) FROM outbox WHERE chat_id = $1 AND status <> 'sent'", CHAT
                )
                return bool(n == 0)

            with trio.fail_after(15):
                while not await settled():  # noqa: ASYNC110 - the serve's sender
                    await trio.sleep(0.05)
            for table in await chat_tables(db):
                rows = await db.fetch(f'SELECT * FROM "{table}" WHERE chat_id = $1', CHAT)
                if table == "outbox":  # the reply saying it is done: the one row left
                    assert [r["text"] for r in rows] == [done], table
                else:
                    assert rows == [], table
            assert not folder.exists()
            assert await count_chat_rows(db, OTHER) == other
            # the chat talks again, from nothing
            assert await say("Hello again") == "Noted."
            request = model.requests[-1].raw.decode()
            assert "cello" not in request and "Lisbon" not in request
        finally:
            if engram.running:
                assert await engram.stop() == 0, engram.tail()
