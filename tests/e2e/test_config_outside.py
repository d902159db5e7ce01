"""Issue 20 rows 5 and 11, from outside: ``engram config``, ``engram migrate`` and ``engram
serve`` run as a user runs them (subprocesses, their own environment, no .env).

Row 5: the database password — in the URL's user information or as a ``?password=`` query
parameter — is in no output, no log line and no error (the unreachable database's included).
Row 11: a bad setting (the README's placeholder token pasted literally, a non-numeric port in
DATABASE_URL, and the other kinds of values) is one ``engram: configuration error: NAME: ...``
line and exit code 2, with no traceback, and nothing is created: no ENGRAM_HOME, no database,
no embedded server."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from engram_outside import Engram, free_port, serve_env
from fakes.bot_api import DEFAULT_TOKEN, run_fake_bot_api

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PW = "Hunter2-database-secret"  # in no output, log line or error
QPW = "Query-password-secret"  # the same, given as ?password=
README_TOKEN = "123456:ABC..."  # the README's command 1, pasted as it stands
README_KEY = "sk-ant-..."


def with_password(url: str, form: str, password: str = PW) -> str:
    """``url`` (``postgresql://user:@host/db?...`` from the test server, which trusts local
    connections and so takes any password) with ``password`` in ``form``."""
    scheme, rest = url.split("://", 1)
    if form == "userinfo":
        user, _, host = rest.rpartition("@")
        return f"{scheme}://{user.split(':')[0]}:{password}@{host}"
    return f"{url}{'&' if '?' in url else '?'}password={password}"


def environ(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A user's environment: nothing of the caller's engram settings, this checkout's code."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ENGRAM_", "TELEGRAM_", "DATABASE_URL", "ANTHROPIC_", "OPENAI_"))
        and k not in ("LLM_PROVIDER", "LOG_LEVEL", "LOG_FORMAT", "EMBEDDING_PROVIDER")
    }
    env.update(
        PYTHONPATH=str(ROOT),
        ENGRAM_HOME=str(tmp_path / "home"),
        ENGRAM_PORT="0",
        EMBEDDING_PROVIDER="local",
        EMBEDDED_PG_SHARED_BUFFERS="128MB",
        XDG_RUNTIME_DIR=env.get("XDG_RUNTIME_DIR", "/tmp"),
    )
    env.update(extra)
    return env


def engram(tmp_path: Path, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "actors.cli", *argv],
        env=environ(tmp_path, **env),
        cwd=tmp_path,  # no stray .env
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def assert_one_configuration_line(result: subprocess.CompletedProcess[str], name: str) -> str:
    """Exit 2, and stderr is exactly ``engram: configuration error: NAME: ...``."""
    lines = result.stderr.splitlines()
    assert result.returncode == 2, result.stderr[-3000:]
    assert len(lines) == 1, result.stderr[-3000:]
    assert lines[0].startswith(f"engram: configuration error: {name}: "), lines[0]
    assert "Traceback" not in result.stderr
    return lines[0]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- row 5: the database password stays secret -------------------------------------------------


@pytest.mark.parametrize("form", ["userinfo", "query"])
def test_config_shows_the_database_url_without_its_password(
    tmp_path: Path, database_url: str, form: str
) -> None:
    url = with_password(database_url, form)
    result = engram(tmp_path, "config", DATABASE_URL=url, TELEGRAM_BOT_TOKEN=DEFAULT_TOKEN)
    assert result.returncode == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if x.startswith("DATABASE_URL="))
    assert "***" in line
    assert "allowed chats:" in result.stdout  # the database was reached with that URL
    # the model in force, not an empty MEMORY_MODEL= (issue 20, deliverable 10)
    assert "MEMORY_MODEL=claude-haiku-4-5 (default for LLM_PROVIDER=anthropic)" in result.stdout
    assert PW not in result.stdout + result.stderr


@pytest.mark.parametrize("form", ["userinfo", "query"])
@pytest.mark.parametrize("command", ["migrate", "config"])
def test_an_unreachable_database_is_named_without_its_password(
    tmp_path: Path, form: str, command: str
) -> None:
    port = closed_port()
    url = with_password(f"postgresql://engram:@127.0.0.1:{port}/engram", form)
    result = engram(tmp_path, "-v", command, DATABASE_URL=url, DB_CONNECT_TIMEOUT="1")
    output = result.stdout + result.stderr
    assert f"127.0.0.1:{port}" in output and "***" in output
    assert PW not in output
    assert "Traceback" not in output
    if command == "migrate":
        assert result.returncode == 1
        assert result.stderr.splitlines()[-1].startswith("engram: database: cannot reach")


async def test_serve_logs_the_database_url_without_its_passwords(
    tmp_path: Path, database_url: str
) -> None:
    """Both forms in one URL: the log of a whole start and stop holds neither password."""
    url = with_password(with_password(database_url, "userinfo"), "query", QPW)
    async with run_fake_bot_api() as bot_api:
        env = serve_env(
            tmp_path / "home",
            bot_api=bot_api.base_url,
            model="http://127.0.0.1:9",
            port=free_port(),
            chats=[4242],
            DATABASE_URL=url,
        )
        env["LOG_LEVEL"] = "DEBUG"
        serve = Engram(env, tmp_path / "engram.log")
        await serve.start()
        try:
            await serve.wait_ready()
        finally:
            assert await serve.stop() == 0, serve.tail()
    log = serve.log_path.read_text()
    assert PW not in log and QPW not in log
    opened = [e for e in serve.log_events() if e.get("event") == "db.open"]
    assert opened and opened[0]["url"].count("***") == 2, opened


# --- row 11: a bad setting is one line, exit 2, and creates nothing ----------------------------


@pytest.mark.parametrize("command", [["serve"], ["serve", "--webhook"], ["migrate"]])
def test_the_readme_placeholder_token_is_one_line_and_creates_nothing(
    tmp_path: Path, command: list[str]
) -> None:
    result = engram(
        tmp_path,
        *command,
        TELEGRAM_BOT_TOKEN=README_TOKEN,
        ANTHROPIC_API_KEY=README_KEY,
        TELEGRAM_SECRET_TOKEN="webhook-secret",
    )
    line = assert_one_configuration_line(result, "TELEGRAM_BOT_TOKEN")
    assert "ABC" not in line  # the token is never quoted, not even a bad one
    assert not (tmp_path / "home").exists(), sorted((tmp_path / "home").rglob("*"))[:10]
    assert result.stdout == ""


@pytest.mark.parametrize("command", ["serve", "migrate", "config"])
def test_a_non_numeric_database_port_is_one_line_without_the_password(
    tmp_path: Path, command: str
) -> None:
    url = f"postgresql://engram:{PW}@localhost:notaport/engram"
    result = engram(
        tmp_path,
        command,
        DATABASE_URL=url,
        TELEGRAM_BOT_TOKEN=DEFAULT_TOKEN,
        ANTHROPIC_API_KEY="sk-ant-test-key-not-real",
    )
    line = assert_one_configuration_line(result, "DATABASE_URL")
    assert "port must be a number" in line
    assert PW not in result.stdout + result.stderr and "notaport" not in line
    assert not (tmp_path / "home").exists()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ENGRAM_HOST", "not a host"),
        ("TELEGRAM_API_BASE_URL", "http://127.0.0.1:notaport"),
        ("TELEGRAM_ALLOWED_CHAT_IDS", "42,٤٢"),
        ("ANTHROPIC_MODEL", "claude sonnet"),
        ("MODEL_RATES", "my-model=cheap"),
        ("ENGRAM_HOME", "/dev/null"),
    ],
)
def test_every_kind_of_bad_value_stops_serve_before_anything_is_created(
    tmp_path: Path, name: str, value: str
) -> None:
    result = engram(
        tmp_path,
        "serve",
        TELEGRAM_BOT_TOKEN=DEFAULT_TOKEN,
        ANTHROPIC_API_KEY="sk-ant-test-key-not-real",
        **{name: value},
    )
    assert_one_configuration_line(result, name)
    assert not (tmp_path / "home").exists()


def test_every_problem_at_once_still_one_line_each(tmp_path: Path) -> None:
    result = engram(
        tmp_path,
        "serve",
        TELEGRAM_BOT_TOKEN=README_TOKEN,
        ANTHROPIC_API_KEY=README_KEY,
        DATABASE_URL=f"postgresql://u:{PW}@h:x/d",
        ENGRAM_PORT="eighty",
    )
    assert result.returncode == 2
    names = [line.split(": ")[2] for line in result.stderr.splitlines()]
    assert names == ["DATABASE_URL", "ENGRAM_PORT", "TELEGRAM_BOT_TOKEN"]
    assert all(x.startswith("engram: configuration error: ") for x in result.stderr.splitlines())
    assert PW not in result.stderr
    assert not (tmp_path / "home").exists()
