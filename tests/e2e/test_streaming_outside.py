"""Streamed replies and Stop from outside (issue 23): ``engram serve --webhook`` as a
subprocess, the strict fake Bot API (drafts, the Stop update) and the fake Anthropic API
streaming at a fixed pace.

* the draft grows while the model writes (one draft id, the Stop button offered, never faster
  than DRAFT_INTERVAL) and the reply is sent once, whole;
* Stop (Telegram's button) ends the generation within a second: what was written is sent,
  marked "(stopped)", the tokens are charged, and the next message is answered normally;
* Stop (the button or ``/stop``) while the turn still reads memory (a slow embedding, before
  the model is asked): "(stopped)" within a second, the message kept, the next one answered;
* SIGKILL mid-stream: after the restart the message is answered exactly once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from itertools import pairwise
from pathlib import Path

import attrs
import httpx
import pytest
import trio
from engram_outside import Engram, free_port, post_update, serve_env
from fakes.anthropic_api import FakeAnthropic, run_fake_anthropic
from fakes.bot_api import FakeBotApi, run_fake_bot_api
from fakes.openai_api import EMBEDDINGS, Failure, run_fake_openai
from fakes.sse import StreamTiming

from runtime.db import Database

pytestmark = pytest.mark.slow

CHAT = 4023301
STORY = " ".join(f"w{n}" for n in range(160)) + " The end."


async def wait_for(predicate: Callable[[], object], limit: float = 30.0) -> None:
    with trio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110 - another process's doing
            await trio.sleep(0.02)


@attrs.define
class Outside:
    engram: Engram
    bot: FakeBotApi
    model: FakeAnthropic
    client: httpx.AsyncClient

    async def post(self, update: dict[str, object]) -> None:
        assert await post_update(self.client, self.engram.port, update) == 200


@asynccontextmanager
async def outside(tmp_path: Path, database_url: str, **extra: str) -> AsyncIterator[Outside]:
    async with (
        run_fake_bot_api() as bot,
        run_fake_anthropic() as model,
        httpx.AsyncClient(timeout=10) as client,
    ):
        model.default_text = STORY
        model.timing = StreamTiming(first_token_delay=0.3, tokens_per_second=40)
        env = serve_env(
            tmp_path,
            bot_api=bot.base_url,
            model=model.base_url,
            port=free_port(),
            chats=[CHAT],
            DATABASE_URL=database_url,
            **extra,
        )
        engram = Engram(env, tmp_path / "engram.log")
        await engram.start()
        try:
            await engram.wait_ready()
            yield Outside(engram, bot, model, client)
        finally:
            if engram.running:
                assert await engram.stop() == 0, engram.tail()


async def test_the_draft_grows_and_the_reply_is_sent_once(
    tmp_path: Path, database_url: str
) -> None:
    async with outside(tmp_path, database_url) as o:
        await o.post(o.bot.push_message(CHAT, "tell me a story"))
        await wait_for(lambda: o.bot.sent_texts(CHAT))
        await trio.sleep(0.5)
        assert o.bot.sent_texts(CHAT) == [STORY]
        drafts = o.bot.drafts_of(CHAT)
        texts = [d.text for d in drafts if d.text]
        assert len(texts) >= 3  # about 4 s of writing, at most one draft per 0.8 s
        assert all(b.startswith(a[:20]) for a, b in pairwise(texts))
        assert len(texts[-1]) > len(texts[0]) and STORY.startswith(texts[-1])
        assert len({d.draft_id for d in drafts}) == 1 and all(d.can_stop for d in drafts)
        times = [d.time for d in drafts if d.text]
        assert min(b - a for a, b in pairwise(times)) >= 0.7
        assert o.model.requests[0].body["stream"] is True


async def test_stop_sends_what_was_written_within_a_second(
    tmp_path: Path, db: Database, database_url: str
) -> None:
    async with outside(tmp_path, database_url) as o:
        await o.post(o.bot.push_message(CHAT, "tell me a story"))
        await wait_for(lambda: any(d.text for d in o.bot.drafts_of(CHAT)))
        await trio.sleep(1.0)
        pressed = trio.current_time()
        await o.post(o.bot.press_stop(CHAT))
        await wait_for(lambda: o.bot.sent_texts(CHAT), limit=5)
        took = trio.current_time() - pressed
        (reply,) = o.bot.sent_texts(CHAT)
        assert took < 1.0, took
        assert reply.endswith("(stopped)") and reply.startswith("w0 w1")
        assert len(reply) < len(STORY)
        row = await db.fetchrow(
            "SELECT ok, error, output_tokens, cost_usd FROM api_usage WHERE purpose = 'agent'"
        )
        assert row is not None and row["error"] == "cancelled" and row["cost_usd"] > 0
        assert row["output_tokens"] > 0
        kept = await db.fetchval(
            "SELECT content FROM chat_messages WHERE chat_id = $1 AND role = 'assistant'", CHAT
        )
        assert kept and STORY.startswith(kept.split("\n\n")[0])
        o.model.timing = StreamTiming()
        o.model.default_text = "A short answer."
        await o.post(o.bot.push_message(CHAT, "and now?"))
        await wait_for(lambda: len(o.bot.sent_texts(CHAT)) == 2)
        assert o.bot.sent_texts(CHAT)[-1] == "A short answer."


@pytest.mark.parametrize("how", ["button", "/stop"])
async def test_stop_while_memory_is_read_answers_stopped_within_a_second(
    tmp_path: Path, db: Database, database_url: str, how: str
) -> None:
    async with (
        run_fake_openai() as embedder,
        outside(
            tmp_path,
            database_url,
            EMBEDDING_PROVIDER="openai",
            OPENAI_API_KEY=embedder.api_key,
            OPENAI_BASE_URL=embedder.base_url,
        ) as o,
    ):
        o.model.timing = StreamTiming()
        o.model.default_text = "A short answer."
        embedder.fail_next(EMBEDDINGS, Failure.slow(8.0))  # the turn's query: memory is slow
        asked = len(embedder.calls_to(EMBEDDINGS))
        await o.post(o.bot.push_message(CHAT, "tell me a story"))
        await wait_for(
            lambda: (
                [c for c in embedder.calls_to(EMBEDDINGS)[asked:] if c.status is None]
                and any(d.can_stop for d in o.bot.drafts_of(CHAT))
            )
        )
        pressed = trio.current_time()
        stop = o.bot.press_stop(CHAT) if how == "button" else o.bot.push_message(CHAT, "/stop")
        await o.post(stop)
        await wait_for(lambda: o.bot.sent_texts(CHAT), limit=5)
        took = trio.current_time() - pressed
        assert took < 1.0, took
        assert o.bot.sent_texts(CHAT)[0] == "(stopped)"
        assert o.model.requests == []  # stopped before the model was asked
        rows = await db.fetch(
            "SELECT role, content FROM chat_messages WHERE chat_id = $1 ORDER BY id", CHAT
        )
        assert [(r["role"], r["content"]) for r in rows] == [("user", "tell me a story")]
        await o.post(o.bot.push_message(CHAT, "and now?"))
        await wait_for(lambda: "A short answer." in o.bot.sent_texts(CHAT))
        assert o.bot.sent_texts(CHAT).count("(stopped)") == 1


async def test_a_crash_mid_stream_answers_once_after_the_restart(
    tmp_path: Path, database_url: str
) -> None:
    async with outside(tmp_path, database_url) as o:
        await o.post(o.bot.push_message(CHAT, "tell me a story"))
        await wait_for(lambda: len([d for d in o.bot.drafts_of(CHAT) if d.text]) >= 2)
        o.engram.kill()
        await o.engram.wait()
        assert o.bot.sent_texts(CHAT) == []  # only the draft was lost
        o.model.timing = StreamTiming(tokens_per_second=400)
        await o.engram.start()
        await o.engram.wait_ready()
        await wait_for(lambda: o.bot.sent_texts(CHAT))
        await trio.sleep(2.0)  # nothing more comes
        assert o.bot.sent_texts(CHAT) == [STORY]
