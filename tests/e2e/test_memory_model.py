"""MEMORY_MODEL: ``engram serve`` (a real process, polling the fake Bot API, answering through the
fake Anthropic API) answers turns with ANTHROPIC_MODEL and does its memory work — compaction
— with MEMORY_MODEL (default claude-haiku-4-5); the model is read from the requests the fake
received. (The merge job's adjudication: tests/actors/cli/test_patterns_cli.py; open_llm's roles:
tests/memory/llm/test_open_llm.py.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trio
from fakes.anthropic_api import FakeAnthropic
from fakes.bot_api import DEFAULT_TOKEN, run_fake_bot_api

from memory.extraction.prompt import EXTRACTION_SYSTEM
from runtime.db import Database

CHAT = 5550777


def _env(fake: FakeAnthropic, bot_url: str, database_url: str, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(
            (
                "ENGRAM_",
                "TELEGRAM_",
                "DATABASE_URL",
                "ANTHROPIC_",
                "OPENAI_",
                "MEMORY_MODEL",
                "LLM_PROVIDER",
            )
        )
    }
    env.update(
        LOG_FORMAT="json",
        DATABASE_URL=database_url,
        ENGRAM_PORT="0",
        TELEGRAM_BOT_TOKEN=DEFAULT_TOKEN,
        TELEGRAM_API_BASE_URL=bot_url,
        TELEGRAM_ALLOWED_CHAT_IDS=str(CHAT),
        ANTHROPIC_API_KEY=fake.api_key,
        ANTHROPIC_BASE_URL=fake.base_url,
        EMBEDDING_PROVIDER="local",
        CONTEXT_TOKEN_BUDGET="1000",  # every turn is over budget: the compactor is asked
        COMPACTION_KEEP_RECENT="4",
    )
    env.update(extra)
    return env


def _system(body: dict[str, object]) -> str:
    system = body.get("system", "")
    if isinstance(system, list):
        return "\n\n".join(str(b["text"]) for b in system if isinstance(b, dict))
    return str(system)


async def _serve_one_turn(
    tmp_path: Path, database_url: str, db: Database, fake: FakeAnthropic, **extra: str
) -> tuple[set[str], set[str]]:
    """Seed 12 old rows, send one message; the models of the turn's and of the compaction's
    requests."""
    old = datetime.now(UTC) - timedelta(days=2)
    for i in range(12):
        await db.execute(
            "INSERT INTO chat_messages (chat_id, role, content, created_at) "
            "VALUES ($1, $2, $3, $4)",
            CHAT,
            "user" if i % 2 == 0 else "assistant",
            f"I swim at the municipal pool every Tuesday ({i}).",
            old + timedelta(minutes=i),
        )
    async with run_fake_bot_api(token=DEFAULT_TOKEN) as bot:
        env = _env(fake, bot.base_url, database_url, **extra)
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-m", "actors.cli", "serve", "--polling"],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            bot.push_message(chat_id=CHAT, text="How was my week?")
            with trio.fail_after(90):
                while not (
                    bot.sent_texts(CHAT)
                    and any(EXTRACTION_SYSTEM in _system(r.body) for r in fake.answered)
                ):
                    assert proc.returncode is None, "engram serve exited"
                    await trio.sleep(0.2)
            proc.send_signal(signal.SIGTERM)
            with trio.fail_after(30):
                assert await proc.wait() == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    turn = {r.body["model"] for r in fake.answered if r.body.get("tools")}
    memory = {r.body["model"] for r in fake.answered if EXTRACTION_SYSTEM in _system(r.body)}
    return turn, memory


@pytest.mark.slow
async def test_serve_compacts_with_the_memory_model(
    tmp_path: Path, database_url: str, db: Database, fake_claude: FakeAnthropic
) -> None:
    turn, memory = await _serve_one_turn(tmp_path, database_url, db, fake_claude)
    assert turn == {"claude-sonnet-4-6"}  # the default chat model
    assert memory == {"claude-haiku-4-5"}  # the default memory model
    models = await db.fetch("SELECT DISTINCT purpose, model FROM api_usage ORDER BY 1")
    assert {(r["purpose"], r["model"]) for r in models} >= {
        ("agent", "claude-sonnet-4-6"),
        ("compaction", "claude-haiku-4-5"),
    }


@pytest.mark.slow
async def test_memory_model_setting_is_used(
    tmp_path: Path, database_url: str, db: Database, fake_claude: FakeAnthropic
) -> None:
    turn, memory = await _serve_one_turn(
        tmp_path,
        database_url,
        db,
        fake_claude,
        ANTHROPIC_MODEL="claude-haiku-4-5",
        MEMORY_MODEL="claude-sonnet-4-5",
    )
    assert (turn, memory) == ({"claude-haiku-4-5"}, {"claude-sonnet-4-5"})
