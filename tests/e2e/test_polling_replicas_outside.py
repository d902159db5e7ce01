"""Two ``engram serve`` processes in polling mode on one database: Telegram allows one
``getUpdates`` consumer, so only the process holding the "poller" lease polls (the fake Bot
API answers a second, concurrent consumer 409 Conflict, as Telegram does); the other stands by
and takes polling over when the first is killed. Every update is answered once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import trio
from engram_outside import Engram, answered_ids, free_port, run_echo_anthropic, serve_env
from fakes.bot_api import FakeBotApi, run_fake_bot_api

CHATS = [8101, 8102, 8103]


class Polling(Engram):
    """``engram serve`` without ``--webhook``: long polling (no TELEGRAM_WEBHOOK_URL set)."""

    async def start(self) -> None:
        log = self.log_path.open("ab")
        try:
            self.proc = await trio.lowlevel.open_process(
                [sys.executable, "-m", "actors.cli", "serve"],
                env=self.env,
                cwd=self.cwd,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        finally:
            log.close()


def polling(tmp_path: Path, name: str, bot: str, model: str, url: str) -> Polling:
    home = tmp_path / name
    home.mkdir()
    env = serve_env(home, bot_api=bot, model=model, port=free_port(), chats=CHATS)
    env.update(DATABASE_URL=url, ENGRAM_INSTANCE=name, CHAT_LEASE_TTL="2")
    return Polling(env, home / "engram.log")


async def answered(fake: FakeBotApi, count: int) -> list[int]:
    with trio.fail_after(60):
        while True:
            ids = [i for c in CHATS for t in fake.sent_texts(c) for i in answered_ids(t)]
            if len(ids) >= count:
                return ids
            await trio.sleep(0.1)


@pytest.mark.slow
async def test_one_process_polls_and_the_other_takes_over(
    tmp_path: Path, database_url: str
) -> None:
    async with run_fake_bot_api() as fake, run_echo_anthropic() as model:
        a = polling(tmp_path, "a", fake.base_url, model.base_url, database_url)
        b = polling(tmp_path, "b", fake.base_url, model.base_url, database_url)
        await a.start()
        await a.wait_ready()
        await b.start()
        await b.wait_ready()
        for n, chat in enumerate(CHATS * 2):
            fake.push_message(chat, f"msg {n + 1}")
        first = await answered(fake, 6)
        assert sorted(first) == list(range(1, 7))  # each once
        a.kill()  # b takes polling over once a's lease runs out
        await a.wait()
        for n, chat in enumerate(CHATS):
            fake.push_message(chat, f"msg {n + 7}")
        ids = await answered(fake, 9)
        assert sorted(ids) == list(range(1, 10))
        conflicts = [c for c in fake.calls_to("getUpdates") if c.status == 409]
        assert conflicts == []  # never two consumers at once
        assert b.running
        assert await b.stop() == 0
