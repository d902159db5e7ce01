"""Helpers of the dashboard's outside tests (tests/e2e/test_dashboard_*.py): ``engram serve``
with ``DASHBOARD_TOKEN`` against the fakes, and rows to show (patterns, costs)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from engram_outside import REPO, Engram, free_port, serve_env
from fakes.anthropic_api import run_fake_anthropic
from fakes.bot_api import run_fake_bot_api

from runtime.db import Database

TOKEN = "dash-token-0123456789abcdef"
A, B = 4025001, 4025002


async def add_pattern(db: Database, chat: int, content: str, kind: str = "fact") -> int:
    pid = int(
        await db.fetchval(
            "INSERT INTO patterns (chat_id, content, kind, canonical_hash, first_seen, last_seen,"
            " confidence) VALUES ($1, $2, $3, md5($2), now(), now(), 0.9) RETURNING id",
            chat,
            content,
            kind,
        )
    )
    await db.execute(
        "INSERT INTO pattern_observations (pattern_id, chat_id, evidence) VALUES ($1, $2, $3)",
        pid,
        chat,
        f"I said: {content}",
    )
    return pid


async def add_usage(db: Database, chat: int) -> None:
    for days, purpose, cost in ((0, "agent", 0.012), (1, "compaction", 0.004), (2, "agent", 0.02)):
        await db.execute(
            "INSERT INTO api_usage (chat_id, provider, model, purpose, input_tokens,"
            " output_tokens, cost_usd, latency_ms, created_at)"
            " VALUES ($1, 'anthropic', 'claude-sonnet-4-6', $2, 1200, 300, $3, 900,"
            " now() - make_interval(days => $4))",
            chat,
            purpose,
            cost,
            days,
        )


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, html[:500]
    return match.group(1)


@asynccontextmanager
async def serving(tmp_path: Path, database_url: str, **extra: str) -> AsyncIterator[Engram]:
    async with run_fake_bot_api() as bot, run_fake_anthropic() as model:
        env = serve_env(
            tmp_path,
            bot_api=bot.base_url,
            model=model.base_url,
            port=free_port(),
            chats=[A, B],
            DATABASE_URL=database_url,
            **extra,
        )
        engram = Engram(env, tmp_path / "engram.log")
        await engram.start()
        try:
            await engram.wait_ready()
            yield engram
        finally:
            if engram.running:
                assert await engram.stop() == 0, engram.tail()


def link(engram: Engram, *args: str) -> str:
    """``engram dashboard link ...`` as the operator runs it; the URL it prints."""
    out = subprocess.run(
        [sys.executable, "-m", "actors.cli", "dashboard", "link", *args],
        env={**engram.env, "PYTHONPATH": str(REPO)},
        cwd=engram.cwd,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.splitlines()[0]
