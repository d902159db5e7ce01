"""Forgetting forgets, from outside (issue 20, rows 3 and 7): ``engram serve --webhook`` as a
subprocess on its own PostgreSQL, the strict fake Bot API (taps are callback queries on the
buttons shown, posted to the webhook) and a scripted fake model.

* Row 3 — after ``/forget <topic>`` → "Forget all" → "also delete the messages", the topic is
  in no column of any table of the serve's database (every table of the catalogue, every column
  cast to text: patterns, evidence, aliases, full-text columns, tool rows, inbox payloads,
  outbox texts, button tokens...), and the next request to the model does not contain it.
* Row 7 — ``/forget -word`` is not "everything but word": it offers nothing when nothing
  mentions the word, and only the messages that mention it when some do.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio
from db_scan import rows_containing
from engram_outside import Engram, free_port, post_update, serve_env
from fakes.anthropic_api import FakeAnthropic, run_fake_anthropic
from fakes.bot_api import FakeBotApi, run_fake_bot_api

from runtime.db import Database

pytestmark = pytest.mark.slow

CHAT = 4020301
TOPIC = "Zephyrine"  # in no text of the test but the ones to forget


async def wait_for(predicate: Callable[[], object], limit: float = 30.0) -> None:
    with trio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110 - another process's doing
            await trio.sleep(0.05)


@attrs.define
class Outside:
    engram: Engram
    bot: FakeBotApi
    model: FakeAnthropic
    client: httpx.AsyncClient

    async def post(self, update: dict[str, Any]) -> None:
        assert await post_update(self.client, self.engram.port, update) == 200

    async def say(self, text: str) -> str:
        """Send ``text``; the bot's reply."""
        before = len(self.bot.sent_texts(CHAT))
        await self.post(self.bot.push_message(CHAT, text))
        await wait_for(lambda: len(self.bot.sent_texts(CHAT)) > before)
        return self.bot.sent_texts(CHAT)[-1]

    def labels(self, message_id: int) -> list[str]:
        return [b["text"] for b in self.bot.buttons(CHAT, message_id)]

    async def tap(self, message_id: int, label: str) -> str:
        """Tap a shown button; the message's text once the tap's edit arrived."""
        edits = len(self.bot.edits)
        await self.post(self.bot.tap(CHAT, message_id, label))
        await wait_for(lambda: len(self.bot.edits) > edits)
        return str(self.bot.message(CHAT, message_id).text)


@asynccontextmanager
async def outside(tmp_path: Path, database_url: str) -> AsyncIterator[Outside]:
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
            chats=[CHAT],
            DATABASE_URL=database_url,
        )
        engram = Engram(env, tmp_path / "engram.log")
        await engram.start()
        try:
            await engram.wait_ready()
            yield Outside(engram, bot, model, client)
        finally:
            if engram.running:
                assert await engram.stop() == 0, engram.tail()


async def add_pattern(db: Database, content: str, kind: str) -> int:
    """A pattern as compaction leaves it: the row, its evidence, a second wording."""
    pid = int(
        await db.fetchval(
            "INSERT INTO patterns (chat_id, content, kind, canonical_hash, first_seen, last_seen, "
            "confidence) VALUES ($1, $2, $3, md5($2), now(), now(), 0.9) RETURNING id",
            CHAT,
            content,
            kind,
        )
    )
    await db.execute(
        "INSERT INTO pattern_observations (pattern_id, chat_id, evidence) VALUES ($1, $2, $3)",
        pid,
        CHAT,
        f"I said: {content}",
    )
    await db.execute(
        "INSERT INTO pattern_aliases (pattern_id, chat_id, content) VALUES ($1, $2, $3)",
        pid,
        CHAT,
        f"In other words: {content}",
    )
    return pid


async def test_row3_forget_all_and_the_messages_leaves_the_topic_nowhere(
    tmp_path: Path, db: Database, database_url: str
) -> None:
    login = await add_pattern(db, f"User finds {TOPIC} login flows confusing", "belief")
    goal = await add_pattern(db, f"User wants the {TOPIC} integration done by Q2", "goal")
    hiking = await add_pattern(db, "User enjoys hiking on weekends", "preference")
    async with outside(tmp_path, database_url) as o:
        # a turn with a tool call and its result, both quoting the topic
        o.model.queue_tool_use("recall_memory", {"query": TOPIC})
        o.model.queue_text(f"Sorry, {TOPIC} again.")
        assert await o.say(f"My {TOPIC} login failed again") == f"Sorry, {TOPIC} again."
        assert await o.say("The weather is nice") == "Noted."

        asked = await o.say(f"/forget {TOPIC}")
        message = o.bot.sent[CHAT][-1].message_id
        assert asked.startswith(f"Memories about “{TOPIC}”:")
        labels = o.labels(message)
        assert "Forget all" in labels
        shown = await o.tap(message, "Forget all")
        assert TOPIC not in shown.split("\n", 1)[1]  # the forgotten text is not quoted
        [delete] = [b for b in o.labels(message) if b.startswith("Also delete")]
        shown = await o.tap(message, delete)
        assert TOPIC not in shown and "login flows" not in shown
        assert o.labels(message) == []

        seen = len(o.model.requests)
        assert await o.say("What do you know about me?") == "Noted."
        [request] = o.model.requests[seen:]
        assert TOPIC.lower() not in request.raw.decode().lower()
        assert b"hiking" in request.raw  # the rest is still remembered
    # every column of every table of the database
    assert await rows_containing(db, [TOPIC]) == {}
    assert await db.fetchval("SELECT count(*) FROM patterns WHERE id = ANY($1)", [login, goal]) == 0
    assert await db.fetchval("SELECT status FROM patterns WHERE id = $1", hiking) == "active"
    forgets = await db.fetch("SELECT pattern_id, actor FROM pattern_audit WHERE action = 'forget'")
    assert sorted((r["pattern_id"], r["actor"]) for r in forgets) == [
        (login, "person"),
        (goal, "person"),
    ]
    assert (
        await db.fetchval(
            "SELECT count(*) FROM chat_messages WHERE content = $1", "The weather is nice"
        )
        == 1
    )


async def test_row7_forget_minus_word_offers_only_what_mentions_the_word(
    tmp_path: Path, db: Database, database_url: str
) -> None:
    said = ["I love hiking", "The weather is nice", "Coffee is great"]
    async with outside(tmp_path, database_url) as o:
        for text in said:
            assert await o.say(text) == "Noted."
        # nothing mentions zebras: nothing to forget, nothing offered
        nothing = await o.say("/forget -zebra")
        assert nothing.startswith("I have nothing about")
        assert o.labels(o.bot.sent[CHAT][-1].message_id) == []
        for form in ["x or -x", "!x", '"-x"']:
            assert (await o.say(f"/forget {form}")).startswith("I have nothing about"), form

        await o.say("/forget -weather")
        message = o.bot.sent[CHAT][-1].message_id
        assert o.labels(message) == ["Also delete the 1 message that mention it"]
        await o.tap(message, "Also delete the 1 message that mention it")
    rows = await db.fetch(
        "SELECT content FROM chat_messages WHERE chat_id = $1 AND role = 'user' ORDER BY id", CHAT
    )
    assert [r["content"] for r in rows] == ["I love hiking", "Coffee is great"]
    assert await db.fetchval("SELECT count(*) FROM chat_messages WHERE content = 'Noted.'") == 3
