"""Helpers of the outside attack tests (tests/e2e/test_web_attack_outside.py): ``engram serve
--webhook`` with DASHBOARD_TOKEN and METRICS_TOKEN against the fakes, one pattern in each of two
chats, and checks of its answers and its log."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import httpx
from engram_outside import SECRET, Engram, free_port, run_echo_anthropic, serve_env
from fakes.bot_api import FakeBotApi, run_fake_bot_api

from actors.web.errors import CODES
from runtime.db import Database

CHAT, OTHER = 5527001, 5527002
TOKEN = "attack-dashboard-token-0123456789"
METRICS = "attack-metrics-token-0123456789"
SLOTS = 24  # HTTP connections the server holds at once
HUGE = "9" * 30  # past BIGINT
BAD_INTS = ("abc", "-1", "0", HUGE, "1.5", "1e3", "%00", "%D9%A3", "+1", " ", "0x10")


@attrs.define
class Target:
    engram: Engram
    bot: FakeBotApi
    home: Path
    pattern: int  # CHAT's
    theirs: int  # OTHER's

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.engram.port}"


@asynccontextmanager
async def target(tmp_path: Path, db: Database, database_url: str) -> AsyncIterator[Target]:
    ids = []
    for chat, content in ((CHAT, "User keeps bees"), (OTHER, "User is allergic to penicillin")):
        ids.append(
            int(
                await db.fetchval(
                    "INSERT INTO patterns (chat_id, content, kind, canonical_hash, first_seen,"
                    " last_seen) VALUES ($1, $2, 'fact', md5($2), now(), now()) RETURNING id",
                    chat,
                    content,
                )
            )
        )
    async with run_fake_bot_api() as bot, run_echo_anthropic() as model:
        env = serve_env(
            tmp_path,
            bot_api=bot.base_url,
            model=model.base_url,
            port=free_port(),
            chats=[CHAT, OTHER],
            DATABASE_URL=database_url,
            DASHBOARD_TOKEN=TOKEN,
            HTTP_MAX_CONNECTIONS=str(SLOTS),
            METRICS_TOKEN=METRICS,
        )
        engram = Engram(env, tmp_path / "engram.log")
        await engram.start()
        try:
            await engram.wait_ready()
            yield Target(engram, bot, tmp_path, ids[0], ids[1])
        finally:
            if engram.running:
                assert await engram.stop() == 0, engram.tail()


def api_error(r: httpx.Response, status: int | tuple[int, ...], code: str | None = None) -> None:
    """``r`` is the API's JSON error with ``status`` (and ``code``)."""
    wanted = (status,) if isinstance(status, int) else status
    assert r.status_code in wanted, (r.request.url, r.status_code, r.text[:300])
    assert r.headers["content-type"].startswith("application/json"), r.text[:300]
    error = r.json()["error"]
    assert CODES[error["code"]] == r.status_code
    if code is not None:
        assert error["code"] == code, (r.request.url, error)


async def login(t: Target) -> tuple[httpx.AsyncClient, str]:
    web = httpx.AsyncClient(timeout=10)
    r = await web.post(f"{t.base}/dashboard/login", data={"token": TOKEN})
    assert r.status_code == 302, r.text
    page = await web.get(f"{t.base}/dashboard/chats/{CHAT}/memory")
    csrf = page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    return web, csrf


def assert_log_clean(engram: Engram) -> None:
    text = engram.log_path.read_text(errors="replace")
    assert "Traceback" not in text, text[text.find("Traceback") - 500 :][:3000]
    for secret in (TOKEN, METRICS, SECRET):
        assert secret not in text
    errors = [e for e in engram.log_events() if e.get("level") in ("error", "critical")]
    assert errors == [], errors[:3]
    assert [e for e in engram.log_events() if e["event"] == "(not json)"] == []
