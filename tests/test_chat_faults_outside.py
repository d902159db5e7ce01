"""Issue 20 row 2 from outside: nothing an allowed chat sends stops ``engram serve``. A chat
sends ``/memory why ²`` (which ``str.isdigit`` accepts and ``int`` refuses) again and again, with
other bad ids and ordinary messages in between, faster than the restart budget allows crashes
(``RESTART_MAX=2``): the process stays up, each command gets one short line, and another chat
is still answered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from engram_outside import (
    Engram,
    free_port,
    post_update,
    run_echo_anthropic,
    serve_env,
    update_body,
)
from fakes.bot_api import run_fake_bot_api

CHAT, OTHER = 4242001, 4242002
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
        env = serve_env(tmp_path, bot_api=bot_api.base_url, model=model.base_url,
                        port=free_port(), chats=[CHAT, OTHER], DATABASE_URL=database_url,
                        RESTART_MAX="2", RESTART_WINDOW="60")  # fmt: skip
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
