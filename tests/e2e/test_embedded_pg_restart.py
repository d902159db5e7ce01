"""The embedded PostgreSQL dies under engram (its postmaster SIGKILLed): engram says why it
stopped (the server log's last lines), starts it again, and the bot goes on answering."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

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
from runtime.embedded_pg import embedded_postgres, last_log_lines

CHAT = 5150


@pytest.fixture
def home() -> Iterator[Path]:
    """A data directory the server's own user can reach: not under pytest's tmp_path, whose
    root another pytest session makes 0700 again when it starts (as root, pgserver runs the
    server as another user)."""
    path = Path(tempfile.mkdtemp(prefix="engram-test-home-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _postmaster_pid(pgdata: Path) -> int:
    return int((pgdata / "postmaster.pid").read_text().split()[0])


async def _wait_new_postmaster(pgdata: Path, old: int, limit: float = 60.0) -> int:
    with trio.fail_after(limit):
        while True:
            try:
                pid = _postmaster_pid(pgdata)
                lines = (pgdata / "postmaster.pid").read_text().splitlines()
                if pid != old and lines and lines[-1].strip() == "ready":
                    return pid
            except (OSError, ValueError, IndexError):
                pass
            await trio.sleep(0.1)


@pytest.mark.slow
async def test_a_killed_embedded_server_is_started_again(home: Path) -> None:
    pgdata = home / "postgres"
    async with embedded_postgres(home, "engram", shared_buffers="128MB", watch_interval=0.2) as url:
        first = _postmaster_pid(pgdata)
        os.kill(first, signal.SIGKILL)
        second = await _wait_new_postmaster(pgdata, first)
        async with dbmod.asyncio_loop(), dbmod.open_database(url, max_size=1) as db:
            assert await db.fetchval("SELECT 41 + 1") == 42
    assert second != first
    assert not (pgdata / "postmaster.pid").exists()  # and stopped on release, as before


def test_last_log_lines(tmp_path: Path) -> None:
    (tmp_path / "log").write_text("one\n\ntwo\nthree\n")
    assert last_log_lines(tmp_path, 2) == ["two", "three"]  # blank lines skipped
    with (tmp_path / "log").open("a") as f:  # a long log: only its end is read
        f.write("x" * 100_000 + "\nLOG:  received fast shutdown request\n")
    assert last_log_lines(tmp_path)[-1] == "LOG:  received fast shutdown request"
    assert last_log_lines(tmp_path / "nowhere") == []


@pytest.mark.slow
async def test_serve_restarts_its_killed_embedded_server_and_answers_later_updates(
    tmp_path: Path, home: Path
) -> None:
    pgdata = home / "postgres"
    async with run_fake_bot_api() as bot_api, run_echo_anthropic() as model:
        port = free_port()
        env = serve_env(
            home,
            bot_api=bot_api.base_url,
            model=model.base_url,
            port=port,
            chats=[CHAT],
            RESTART_MAX="2",
        )
        engram = Engram(env, tmp_path / "engram.log")
        await engram.start()
        try:
            await engram.wait_ready(limit=120)
            async with httpx.AsyncClient(timeout=10) as client:
                assert await post_update(client, port, update_body(1, chat=CHAT)) == 200
                with trio.fail_after(30):
                    while not bot_api.sent_texts(CHAT):  # noqa: ASYNC110
                        await trio.sleep(0.1)
                first = _postmaster_pid(pgdata)
                os.kill(first, signal.SIGKILL)
                await _wait_new_postmaster(pgdata, first)
                # Telegram resends until it gets a 200 (503 while the database is away)
                with trio.fail_after(60):
                    while await post_update(client, port, update_body(2, chat=CHAT)) != 200:  # noqa: ASYNC110
                        await trio.sleep(0.2)
                with trio.fail_after(60):
                    while len(bot_api.sent_texts(CHAT)) < 2:  # noqa: ASYNC110
                        await trio.sleep(0.1)
            assert engram.running  # the outage was waited out, not escalated
            assert await engram.stop() == 0
        finally:
            if engram.running:
                engram.kill()
    answered = [i for text in bot_api.sent_texts(CHAT) for i in answered_ids(text)]
    assert answered == [1, 2]
    died = [e for e in engram.log_events() if e.get("event") == "db.embedded.died"]
    assert len(died) == 1 and died[0]["pid"] == first
    assert any("ready to accept connections" in line for line in died[0]["last_log"])
    assert any(e.get("event") == "db.embedded.restarted" for e in engram.log_events())
