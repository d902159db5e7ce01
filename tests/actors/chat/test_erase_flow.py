"""``/forget everything`` end to end through the strict fake Bot API (taps are real callback
queries on the buttons shown), a real PostgreSQL and the bot as ``engram serve`` composes it:
the question with its counts, ``[Cancel]`` keeps everything, ``[Erase everything…]`` asks for
the typed word, the word erases every row of the chat (in every table with ``chat_id``) and
its vault folder, the reply being the one row left; the other chat keeps everything; the word
without a request is an ordinary message; no model call throughout."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from chat_bot import (
    CHAT,
    OTHER,
    Bot,
    add_messages,
    add_pattern,
    model_silent,
    running_bot,
    wait_for,
)
from fakes.anthropic_api import FakeAnthropic
from fakes.bot_api import run_fake_bot_api

from actors.chat.erase_command import ASK, CANCELLED, NOT_YOURS, vault_folder
from memory.embeddings.providers import LocalEmbedder
from memory.erase.chat import chat_tables, count_chat_rows
from runtime.db import Database

GROUP = -1008810003


@pytest.fixture
async def bot(
    db: Database,
    fake_claude: FakeAnthropic,
    local: LocalEmbedder,
    tmp_path: Path,
) -> AsyncIterator[Bot]:
    vault = {
        "VAULT_DIR": str(tmp_path / "vault"),
        "TELEGRAM_ALLOWED_CHAT_IDS": f"{CHAT},{OTHER},{GROUP}",
    }
    async with (
        run_fake_bot_api() as fake,
        running_bot(db, fake, fake_claude, local, vault) as running,
    ):
        yield running
    assert running.codes == [0]


async def memories(bot: Bot, local: LocalEmbedder, chat: int) -> None:
    await add_pattern(bot.db, local, "User lives in Lisbon", chat=chat)
    await add_pattern(bot.db, local, "User plays the cello", chat=chat, kind="preference")
    await add_messages(bot.db, [("user", "I live in Lisbon"), ("assistant", "Nice!")], chat=chat)


@pytest.mark.slow
async def test_forget_everything_erases_the_whole_chat(
    bot: Bot, local: LocalEmbedder, tmp_path: Path
) -> None:
    db = bot.db
    await memories(bot, local, CHAT)
    await memories(bot, local, OTHER)
    folder = vault_folder(tmp_path / "vault", tmp_path / "home")(CHAT)
    assert folder is not None and folder.parent == tmp_path / "vault"
    folder.mkdir(parents=True)
    (folder / "MEMORY.md").write_text("User lives in Lisbon")

    [asked] = await bot.say("/forget everything")
    assert asked.startswith("Erase everything of this chat? 2 messages, 2 memories, ")
    message = bot.last_id()
    assert bot.buttons(message) == ["Erase everything…", "Cancel"]
    assert await bot.tap(message, "Cancel") == "Nothing was erased."
    assert bot.shown(message) == CANCELLED
    assert (await count_chat_rows(db, CHAT))["patterns"] == 2

    await bot.say("/forget everything")
    message = bot.last_id()
    assert await bot.tap(message, "Erase everything…") == "Type the word to confirm."
    assert bot.shown(message) == ASK
    assert bot.buttons(message) == ["Cancel"]
    other = await count_chat_rows(db, OTHER)

    [done] = await bot.say("erase")
    assert done.startswith("✓ Erased everything of this chat: 2 messages, 2 memories")
    await bot.delivered()
    left = await count_chat_rows(db, CHAT)
    # the chat's lease may be held again (this process serves the chat: operational, no text
    # of the person's); besides it, the reply just sent and nothing else
    assert left.pop("chat_leases", 1) == 1
    assert left == {"outbox": 1}
    assert await db.fetchval("SELECT text FROM outbox WHERE chat_id = $1", CHAT) == done
    for table in await chat_tables(db):
        n = await db.fetchval(f'SELECT count(*) FROM "{table}" WHERE chat_id = $1', CHAT)
        assert n == {"outbox": 1, "chat_leases": n}.get(table, 0), table
    assert not folder.exists()
    assert await count_chat_rows(db, OTHER) == other
    # the old Cancel button is dead, and nothing waits for the word any more
    assert await bot.tap(message, "Cancel") == "This button has expired."
    await model_silent(bot)


@pytest.mark.slow
async def test_the_word_alone_or_someone_elses_tap_erases_nothing(
    bot: Bot, local: LocalEmbedder
) -> None:
    db = bot.db
    await memories(bot, local, CHAT)
    await memories(bot, local, GROUP)
    before, group = await count_chat_rows(db, CHAT), await count_chat_rows(db, GROUP)
    # no request waiting: the word is an ordinary message, for the model
    [answer] = await bot.say("ERASE")
    assert answer == bot.claude.default_text
    assert len(bot.claude.requests) == 1
    after = await count_chat_rows(db, CHAT)
    assert after["patterns"] == before["patterns"] == 2
    assert after["chat_messages"] == before["chat_messages"] + 2
    # in a group, only who asked may confirm
    sent = len(bot.texts(GROUP))
    bot.fake.push_message(GROUP, "/forget everything", user_id=77)
    await wait_for(lambda: len(bot.texts(GROUP)) > sent)
    message = bot.last_id(GROUP)
    assert bot.buttons(message, GROUP) == ["Erase everything…", "Cancel"]
    await bot.tap(message, "Erase everything…", GROUP)  # tapped by user 1000, not 77
    assert bot.shown(message, GROUP) == NOT_YOURS
    assert await db.fetchval("SELECT count(*) FROM erase_requests") == 0
    [ordinary] = await bot.say("ERASE", GROUP)
    assert ordinary == bot.claude.default_text
    assert (await count_chat_rows(db, GROUP))["patterns"] == group["patterns"]
