"""``engram doctor`` as a subprocess against the test database: one line per check and the
exit code of the worst severity (0 ok, 3 warning, 4 critical)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import trio

from runtime.db import Database

ROOT = Path(__file__).resolve().parents[3]


async def doctor(tmp_path: Path, database_url: str, **env: str) -> Any:
    environ = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "PYTHONPATH": str(ROOT),
        "ENGRAM_HOME": str(tmp_path / "home"),
        "DATABASE_URL": database_url,
        "EMBEDDING_PROVIDER": "local",
        **env,
    }
    return await trio.run_process(
        [sys.executable, "-m", "actors.cli", "doctor"],
        cwd=tmp_path,  # no stray .env
        env=environ,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )


def lines(result: Any) -> dict[str, str]:
    """check name -> its severity, from doctor's output."""
    rows = [line.split() for line in result.stdout.decode().splitlines()[:-1]]
    return {row[1]: row[0] for row in rows}


async def test_a_healthy_database_exits_0(db: Database, database_url: str, tmp_path: Path) -> None:
    result = await doctor(tmp_path, database_url)
    assert result.returncode == 0, result.stderr.decode()
    out = result.stdout.decode()
    assert out.splitlines()[-1] == "engram doctor: ok"
    assert set(lines(result).values()) == {"ok"}
    assert {"database", "inbox", "outbox", "model", "bot_api", "cost"} <= set(lines(result))


async def test_a_warning_exits_3(db: Database, database_url: str, tmp_path: Path) -> None:
    await db.execute("INSERT INTO outbox (chat_id, text, status) VALUES (7, 'x', 'uncertain')")
    result = await doctor(tmp_path, database_url)
    assert result.returncode == 3, result.stderr.decode()
    assert lines(result)["replies"] == "warning"
    assert result.stdout.decode().splitlines()[-1] == "engram doctor: warning"


async def test_a_critical_check_exits_4(db: Database, database_url: str, tmp_path: Path) -> None:
    await db.execute("INSERT INTO outbox (chat_id, text, status) VALUES (7, 'x', 'uncertain')")
    await db.execute(
        "INSERT INTO api_usage (provider, model, purpose, ok, error) "
        "VALUES ('anthropic', 'claude-x', 'agent', false, 'overloaded')"
    )
    result = await doctor(tmp_path, database_url, DAILY_COST_ALERT_USD="5")
    assert result.returncode == 4, result.stderr.decode()
    found = lines(result)
    assert (found["model"], found["replies"], found["cost"]) == ("critical", "warning", "ok")


async def test_a_database_without_migrations_is_critical(
    raw_db: Database, database_url: str, tmp_path: Path
) -> None:
    result = await doctor(tmp_path, database_url)
    assert result.returncode == 4, result.stderr.decode()
    assert "migrations not applied" in result.stdout.decode()
    assert await raw_db.fetchval("SELECT to_regclass('inbox')") is None  # doctor changed nothing
