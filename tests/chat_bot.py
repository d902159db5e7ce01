"""A whole bot for the chat-command tests: ``serve`` with the real actor system in polling mode
against the strict fake Bot API, the real agent on the strict fake Anthropic server (which must
see no request for a command), the local embedding model, the command table with the memory
commands and their buttons, on a real PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import trio
from fakes.anthropic_api import FakeAnthropic
from fakes.bot_api import DEFAULT_TOKEN, FakeBotApi

from actors.chat.command_base import CommandTable
from actors.settings import load_settings
from actors.wiring import open_bot
from memory.embeddings.providers import LocalEmbedder
from memory.embeddings.store import store_vectors
from memory.patterns.canonical import canonical_hash
from runtime.db import Database
from runtime.shutdown import Shutdown

CHAT, OTHER = 8810001, 8810002
TZ = "Europe/Madrid"
NOW = datetime.now(UTC)


@attrs.define
class Bot:
    fake: FakeBotApi
    claude: FakeAnthropic
    db: Database
    table: CommandTable
    codes: list[int]

    def texts(self, chat: int = CHAT) -> list[str]:
        return self.fake.sent_texts(chat)

    async def say(self, text: str, chat: int = CHAT, *, count: int = 1) -> list[str]:
        """Send ``text`` and wait for ``count`` new messages to the chat; they are returned."""
        before = len(self.texts(chat))
        self.fake.push_message(chat, text)
        await wait_for(lambda: len(self.texts(chat)) >= before + count)
        return self.texts(chat)[before:]

    def last_id(self, chat: int = CHAT) -> int:
        return int(self.fake.sent[chat][-1].message_id)

    def shown(self, message_id: int, chat: int = CHAT) -> str:
        return str(self.fake.message(chat, message_id).text)

    def buttons(self, message_id: int, chat: int = CHAT) -> list[str]:
        return [b["text"] for b in self.fake.buttons(chat, message_id)]

    async def tap(self, message_id: int, label: str, chat: int = CHAT) -> str:
        """Tap a shown button; wait until the tap is handled (its inbox row closed); the text
        Telegram showed on the tap (answerCallbackQuery)."""
        update = self.fake.tap(chat, message_id, label)
        return await self.handled(update)

    async def press(self, data: str, message_id: int, chat: int = CHAT) -> str:
        """A callback query carrying ``data`` on ``message_id`` (a stale or forged button)."""
        update = self.fake.push_callback(chat, data, message_id=message_id)
        return await self.handled(update)

    async def handled(self, update: dict[str, Any]) -> str:
        key = f"update:{update['update_id']}"

        async def closed() -> bool:
            status = await self.db.fetchval("SELECT status FROM inbox WHERE update_key = $1", key)
            return status in ("done", "skipped")

        with trio.fail_after(15):
            while not await closed():  # noqa: ASYNC110 - another process's state
                await trio.sleep(0.05)
        query_id = update["callback_query"]["id"]
        await wait_for(
            lambda: any(
                c.params.get("callback_query_id") == query_id
                for c in self.fake.calls_to("answerCallbackQuery")
            )
        )
        [call] = [
            c
            for c in self.fake.calls_to("answerCallbackQuery")
            if c.params.get("callback_query_id") == query_id
        ]
        await self.delivered()
        return str(call.params.get("text", ""))

    async def delivered(self) -> None:
        """Until every outbox row (replies, edits) is out of the sender's hands."""
        with trio.fail_after(15):
            while await self.db.fetchval(  # noqa: ASYNC110 - the sender's state, in the database
                "SELECT count(*) FROM outbox WHERE status IN ('pending', 'sending')"
            ):
                await trio.sleep(0.05)

    def data_of(self, message_id: int, label: str, chat: int = CHAT) -> str:
        [data] = [
            b["callback_data"] for b in self.fake.buttons(chat, message_id) if b["text"] == label
        ]
        return str(data)


async def wait_for(predicate: Any, limit: float = 15.0) -> None:
    with trio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110
            await trio.sleep(0.03)


@asynccontextmanager
async def running_bot(
    db: Database,
    fake: FakeBotApi,
    claude: FakeAnthropic,
    local: LocalEmbedder,
    env: dict[str, str] | None = None,
) -> AsyncIterator[Bot]:
    """The bot as ``engram serve`` composes it (:func:`actors.wiring.open_bot`), polling the
    fake Bot API with a short poll; ``local`` is the model the bot embeds with; ``env``: more
    settings."""
    from actors.telegram.poller import Poller

    settings = load_settings(
        {
            "ENGRAM_PORT": "0",
            "TELEGRAM_BOT_TOKEN": DEFAULT_TOKEN,
            "TELEGRAM_ALLOWED_CHAT_IDS": f"{CHAT},{OTHER}",
            "TELEGRAM_API_BASE_URL": fake.base_url,
            "ANTHROPIC_API_KEY": claude.api_key,
            "ANTHROPIC_BASE_URL": claude.base_url,
            "EMBEDDING_PROVIDER": "local",
            "SHUTDOWN_DEADLINE": "5",
            "TIMEZONE": TZ,
            **(env or {}),
        },
        dotenv=None,
    )
    shutdown = Shutdown(deadline=5, signals=())
    listening = trio.Event()
    codes: list[int] = []

    def short_poll(*args: Any, **kwargs: Any) -> Poller:
        return Poller(*args, poll_timeout=1, **kwargs)

    async with (
        open_bot(settings, db, shutdown=shutdown, poller_factory=short_poll) as bot,
        trio.open_nursery() as nursery,
    ):
        assert bot.parts.embedder.model == local.model

        async def run() -> None:
            codes.append(await bot.serve(on_listening=lambda _: listening.set()))

        nursery.start_soon(run)
        with trio.fail_after(20):
            await listening.wait()
        yield Bot(fake, claude, db, bot.system.commands, codes)
        shutdown.request_stop("test")


async def add_pattern(
    db: Database,
    local: LocalEmbedder | None,
    content: str,
    *,
    chat: int = CHAT,
    kind: str = "fact",
    strength: float = 1.0,
    confidence: float = 0.8,
    status: str = "active",
    occurs_on: Any = None,
    core: bool = False,
    days_ago: float = 3,
    evidence: str | None = None,
) -> int:
    """A pattern as compaction leaves it: the row, its vector, one observation."""
    seen = NOW - timedelta(days=days_ago)
    pid: int = await db.fetchval(
        "INSERT INTO patterns (chat_id, content, kind, confidence, strength, status, "
        "canonical_hash, first_seen, last_seen, occurs_on, is_core_tenet, pinned_at) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8::timestamptz, $8, $9::date, $10::bool, "
        "CASE WHEN $10::bool THEN $8::timestamptz END) "
        "RETURNING id",
        chat,
        content,
        kind,
        confidence,
        strength,
        status,
        canonical_hash(content),
        seen,
        occurs_on,
        core,
    )
    await db.execute(
        "INSERT INTO pattern_observations (pattern_id, chat_id, evidence, evidence_roles, "
        "observed_at) VALUES ($1, $2, $3, '{user}', $4)",
        pid,
        chat,
        evidence or f"I said: {content}",
        seen,
    )
    if local is not None:
        [vector] = await local.embed([content], purpose="embedding")
        await store_vectors(
            db, "pattern_embeddings", "pattern_id", [(pid, vector, chat)], local.model
        )
    return pid


async def add_messages(db: Database, texts: Sequence[tuple[str, str]], *, chat: int = CHAT) -> None:
    """Conversation rows (role, text), a minute apart, ending an hour ago."""
    start = NOW - timedelta(hours=1, minutes=len(texts))
    for n, (role, text) in enumerate(texts):
        await db.execute(
            "INSERT INTO chat_messages (chat_id, role, content, created_at) "
            "VALUES ($1, $2, $3, $4)",
            chat,
            role,
            text,
            start + timedelta(minutes=n),
        )


async def model_silent(bot: Bot) -> None:
    """No model request, no api_usage row: commands bypass the model."""
    assert bot.claude.requests == []
    assert await bot.db.fetchval("SELECT count(*) FROM api_usage") == 0
