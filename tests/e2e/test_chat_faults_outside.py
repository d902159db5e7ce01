"""Issue 20 rows 2 and 10 from outside. Row 2: nothing an allowed chat sends stops
``engram serve``. A chat sends ``/memory why ²`` (which ``str.isdigit`` accepts and ``int``
refuses) again and again, with other bad ids and ordinary messages in between, faster than the
restart budget allows crashes (``RESTART_MAX=2``): the process stays up, each command gets one
short line, and another chat is still answered. Row 10: a burst to one chat is answered in a
few model calls."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from engram_outside import (
    Engram,
    answered_ids,
    free_port,
    post_update,
    run_echo_anthropic,
    serve_env,
    update_body,
)
from fakes.bot_api import run_fake_bot_api

from runtime import db as dbmod

CHAT, OTHER = 4242001, 4242002
MSG = re.compile(r"\bmsg (\d+)\b")
BAD_IDS = [
    "/memory why ²",
    "/memory pin ³",
    "/memory why ²",
    "/memory unpin ١٢",
    "/memory forget ⁴²",
    "/memory why ²",
    "/memory merge ² ³",
    "/memory why 99999999999999999999999",
    "/memory why \u202e12",
    "/memory why ²",
]


async def wait_texts(bot_api: Any, chat: int, count: int, engram: Engram) -> list[str]:
    with trio.fail_after(60):
        while len(bot_api.sent_texts(chat)) < count:
            assert engram.running, engram.tail()
            await trio.sleep(0.1)
    return list(bot_api.sent_texts(chat))


@pytest.mark.slow
async def test_bad_ids_from_one_chat_never_stop_the_process(
    database_url: str, tmp_path: Path
) -> None:
    async with run_fake_bot_api() as bot_api, run_echo_anthropic() as model:
        env = serve_env(
            tmp_path,
            bot_api=bot_api.base_url,
            model=model.base_url,
            port=free_port(),
            chats=[CHAT, OTHER],
            DATABASE_URL=database_url,
            RESTART_MAX="2",
            RESTART_WINDOW="60",
        )
        engram = Engram(env, tmp_path / "engram.log")
        await engram.start()
        try:
            await engram.wait_ready(limit=120)
            async with httpx.AsyncClient(timeout=10) as client:
                update = 1
                for text in BAD_IDS:
                    body = update_body(update, chat=CHAT, text=text)
                    assert await post_update(client, engram.port, body) == 200
                    update += 1
                    body = update_body(update, chat=CHAT)  # "msg <n>": the model echoes it
                    assert await post_update(client, engram.port, body) == 200
                    update += 1
                texts = await wait_texts(bot_api, CHAT, 2 * len(BAD_IDS), engram)
                await trio.sleep(3)  # past the restart window's backoffs: still alive?
                assert engram.running, engram.tail()
                other = update_body(update, chat=OTHER)
                assert await post_update(client, engram.port, other) == 200
                other_texts = await wait_texts(bot_api, OTHER, 1, engram)
                assert engram.running, engram.tail()
                ready = await client.get(f"http://127.0.0.1:{engram.port}/readyz")
        finally:
            code = await engram.stop()
    assert ready.status_code == 200
    assert code == 0, engram.tail(40)
    assert len(texts) == 2 * len(BAD_IDS)  # one answer each, nothing more
    commands = [t for t in texts if not t.startswith("re ")]
    echoes = [t for t in texts if t.startswith("re ")]
    assert sorted(echoes) == sorted(f"re {n}" for n in range(2, 2 * len(BAD_IDS) + 1, 2))
    assert len(commands) == len(BAD_IDS)
    assert all(t.startswith("Usage: /memory ") and "\n" not in t for t in commands), commands
    assert other_texts == [f"re {update}"]
    events = [e.get("event") for e in engram.log_events()]
    assert "registry.actor_crashed" not in events


@pytest.mark.slow
async def test_a_burst_to_one_chat_is_answered_in_a_few_model_calls(
    database_url: str, tmp_path: Path
) -> None:
    """200 messages posted to one chat in about a second give far fewer model requests than
    messages; every message is stored (its inbox row done, its text in the conversation) and
    answered exactly once."""
    count = 200
    async with run_fake_bot_api() as bot_api, run_echo_anthropic() as model:
        model.delay = 0.5  # a model call takes a while: the burst queues behind it
        env = serve_env(
            tmp_path,
            bot_api=bot_api.base_url,
            model=model.base_url,
            port=free_port(),
            chats=[CHAT],
            DATABASE_URL=database_url,
            CHAT_TURNS_PER_MINUTE="6",
        )  # the default
        engram = Engram(env, tmp_path / "engram.log")
        await engram.start()
        try:
            await engram.wait_ready(limit=120)
            async with httpx.AsyncClient(timeout=10) as client:
                for n in range(1, count + 1):
                    body = update_body(n, chat=CHAT)
                    assert await post_update(client, engram.port, body) == 200
            with trio.fail_after(120):
                while True:
                    texts = bot_api.sent_texts(CHAT)
                    answered = sorted(i for t in texts for i in answered_ids(t))
                    if len(answered) >= count:
                        break
                    assert engram.running, engram.tail()
                    await trio.sleep(0.2)
            async with dbmod.asyncio_loop(), dbmod.open_database(database_url) as database:
                statuses = await database.fetch(
                    "SELECT status, count(*) AS n FROM inbox WHERE chat_id = $1 GROUP BY status",
                    CHAT,
                )
                stored = await database.fetch(
                    "SELECT content FROM chat_messages WHERE chat_id = $1 AND role = 'user'", CHAT
                )
        finally:
            code = await engram.stop()
    calls = len(model.requests)
    assert calls <= count // 10, calls  # before: one request (or more) per message
    assert answered == list(range(1, count + 1))  # each once
    assert {r["status"]: r["n"] for r in statuses} == {"done": count}
    in_conversation = sorted(int(m) for r in stored for m in MSG.findall(r["content"]))
    assert in_conversation == list(range(1, count + 1))
    assert code == 0
