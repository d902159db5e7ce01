"""The first hour, as a new user meets it, through the real ``engram`` command in a subprocess:
the mode follows what is configured, every missing setting is reported at once, a token
Telegram rejects is the same configuration error from every command, ``engram serve`` prints a
pairing code and every line of its stderr is JSON, the CLI is lazy and quiet."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from fakes.bot_api import DEFAULT_TOKEN, Failure, FakeBotApi, run_fake_bot_api

from actors.cli.main import serve_mode
from actors.settings import load_settings
from actors.telegram.pairing import PAIRED
from actors.telegram.types import ALLOWED_UPDATES

ROOT = Path(__file__).resolve().parents[2]
WRONG_TOKEN = "123456789:WrongSecretWrongSecretWrongSecret_xyz"
REJECTED = "engram: configuration error: TELEGRAM_BOT_TOKEN: Telegram rejected the token"
WEBHOOK_URL = "https://bot.example.org/api/telegram"
SECRET = "webhook-secret_0123"


def environ(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ENGRAM_", "TELEGRAM_", "DATABASE_URL", "ANTHROPIC_", "OPENAI_"))
        and k not in ("LLM_PROVIDER", "LOG_LEVEL", "LOG_FORMAT", "EMBEDDING_PROVIDER")
    }
    env.update(
        ENGRAM_HOME=str(tmp_path / "home"),
        ENGRAM_PORT="0",
        LOG_FORMAT="json",
        ANTHROPIC_API_KEY="sk-ant-test-key-not-real",
        ANTHROPIC_BASE_URL="http://127.0.0.1:9",  # never called in these tests
        EMBEDDING_PROVIDER="local",
        SHUTDOWN_DEADLINE="3",
    )
    env.update(extra)
    return env


async def engram(tmp_path: Path, *argv: str, **env: str) -> subprocess.CompletedProcess[bytes]:
    return await trio.run_process(
        [sys.executable, "-m", "actors.cli", *argv],
        env=environ(tmp_path, **env),
        cwd=tmp_path,  # no stray .env
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )


# --- a lazy, quiet CLI --------------------------------------------------------------------------


def test_version_help_and_usage_errors_import_nothing_heavy(tmp_path: Path) -> None:
    heavy = (
        "trio",
        "asyncpg",
        "anthropic",
        "openai",
        "httpx",
        "numpy",
        "structlog",
        "quart",
        "hypercorn",
        "actors.system",
        "actors.telegram.client",
        "memory.patterns",
    )
    probe = (
        "import sys\n"
        "from actors.cli.main import main\n"
        "try:\n"
        "    main(sys.argv[1:])\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        f"heavy = {heavy!r}\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(heavy))\n"
        "print('LOADED', code, loaded, file=sys.stderr)\n"
    )
    for argv, code in (
        (["--version"], 0),
        (["--help"], 0),
        (["no-such-command"], 2),
        (["serve", "--polling", "--webhook"], 2),
    ):
        proc = subprocess.run(
            [sys.executable, "-c", probe, *argv],
            env=environ(tmp_path),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert f"LOADED {code} []" in proc.stderr, (argv, proc.stderr)
    version = subprocess.run(
        [sys.executable, "-m", "actors.cli", "--version"],
        env=environ(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert re.fullmatch(r"engram (\d+\.\d+\.\d+\S*|unknown)\n", version.stdout), version.stdout
    assert version.returncode == 0 and version.stderr == ""


async def test_help_lists_the_new_commands(tmp_path: Path) -> None:
    result = await engram(tmp_path, "--help")
    out = result.stdout.decode()
    for command in ("serve", "chats", "config", "systemd-unit", "telegram", "migrate"):
        assert re.search(rf"^\s+{command}\s", out, re.M), command
    serve_help = (await engram(tmp_path, "serve", "--help")).stdout.decode()
    assert "--polling" in serve_help and "--webhook" in serve_help


async def test_config_shows_effective_values(tmp_path: Path, database_url: str) -> None:
    result = await engram(
        tmp_path,
        "config",
        DATABASE_URL=database_url,
        PATTERN_DEDUP_THRESHOLD="0.95",
        TELEGRAM_ALLOWED_CHAT_IDS="42",
        TELEGRAM_BOT_TOKEN=DEFAULT_TOKEN,
    )
    out = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode()
    lines = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert lines["PATTERN_DEDUP_THRESHOLD"] == "0.95 (setting)"
    assert lines["PATTERN_MIN_SIMILARITY"] == "0.05 (default for wordllama-l2-supercat-256)"
    assert lines["TELEGRAM_BOT_TOKEN"] == "(set)" and DEFAULT_TOKEN not in out
    assert "allowed chats: 42 (setting)" in out
    assert "serve mode: long polling" in out
    assert result.stderr == b""  # quiet: the database's INFO lines are not shown


async def test_systemd_unit_is_printed_for_this_installation(tmp_path: Path) -> None:
    result = await engram(tmp_path, "systemd-unit", "--user", "bot", "--workdir", "/srv/engram")
    unit = result.stdout.decode()
    assert result.returncode == 0 and result.stderr == b""
    lines = unit.splitlines()
    exec_start = next(line for line in lines if line.startswith("ExecStart="))
    assert exec_start.endswith(" serve") and sys.executable.rsplit("/", 1)[0] in exec_start
    for line in (
        "User=bot",
        "WorkingDirectory=/srv/engram",
        "EnvironmentFile=/srv/engram/.env",
        "RestartPreventExitStatus=2",
        "KillSignal=SIGTERM",
        "[Install]",
    ):
        assert line in lines, line
    assert "{" not in unit  # every placeholder filled


# --- mode selection -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "url", "mode"),
    [
        ([], "", "polling"),
        (["--webhook"], "", "webhook"),
        ([], WEBHOOK_URL, "webhook"),
        (["--polling"], WEBHOOK_URL, "polling"),
        (["--polling"], "", "polling"),
    ],
)
def test_serve_mode_follows_what_is_configured(flags: list[str], url: str, mode: str) -> None:
    from actors.cli.main import build_parser

    settings = load_settings({"TELEGRAM_WEBHOOK_URL": url}, dotenv=None)
    args: argparse.Namespace = build_parser().parse_args(["serve", *flags])
    assert serve_mode(settings, args) == mode


async def test_webhook_url_must_be_https(tmp_path: Path) -> None:
    result = await engram(tmp_path, "serve", TELEGRAM_WEBHOOK_URL="http://bot.example.org/x")
    assert result.returncode == 2
    assert b"TELEGRAM_WEBHOOK_URL: must be an https:// URL" in result.stderr


@pytest.mark.slow
async def test_serve_registers_the_configured_webhook(tmp_path: Path, database_url: str) -> None:
    async with (
        run_fake_bot_api() as fake,
        serving(
            tmp_path,
            fake,
            DATABASE_URL=database_url,
            TELEGRAM_WEBHOOK_URL=WEBHOOK_URL,
            TELEGRAM_SECRET_TOKEN=SECRET,
        ) as bot,
    ):
        await wait_for(lambda: fake.webhook.get("url"))
        assert fake.webhook["url"] == WEBHOOK_URL
        assert fake.webhook["secret_token"] == SECRET
        assert fake.webhook["allowed_updates"] == list(ALLOWED_UPDATES)
        assert fake.calls_to("getUpdates") == []  # webhook mode: no polling
    assert SECRET not in bot.stderr and DEFAULT_TOKEN.split(":")[1] not in bot.stderr


# --- every problem at once ----------------------------------------------------------------------


async def test_serve_reports_every_missing_setting_at_once(tmp_path: Path) -> None:
    result = await engram(
        tmp_path,
        "serve",
        ENGRAM_PORT="eighty",
        ANTHROPIC_API_KEY="",
        TELEGRAM_WEBHOOK_URL=WEBHOOK_URL,
    )
    assert result.returncode == 2
    lines = result.stderr.decode().splitlines()
    assert [line.split(":")[2].strip() for line in lines] == [
        "ENGRAM_PORT",
        "TELEGRAM_BOT_TOKEN",
        "ANTHROPIC_API_KEY",
        "TELEGRAM_SECRET_TOKEN",
    ]
    assert all(line.startswith("engram: configuration error: ") for line in lines)
    assert result.stdout == b""


@pytest.mark.slow
async def test_polling_needs_no_webhook_secret(tmp_path: Path) -> None:
    # the settings are complete for polling: start-up goes on and fails on the database (1)
    result = await engram(
        tmp_path,
        "serve",
        TELEGRAM_BOT_TOKEN=DEFAULT_TOKEN,
        DB_CONNECT_TIMEOUT="1",
        DATABASE_URL="postgresql://engram@127.0.0.1:9/engram",
    )
    assert result.returncode == 1, result.stderr
    assert b"TELEGRAM_SECRET_TOKEN" not in result.stderr


# --- one error per cause ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [
        ["telegram", "info"],
        ["telegram", "delete-webhook"],
        ["telegram", "set-webhook", "--url", WEBHOOK_URL],
        ["serve"],
        ["serve", "--polling"],
        ["serve", "--webhook"],
        ["serve", "--url-from-setting"],
    ],
    ids=lambda argv: " ".join(argv),
)
async def test_a_rejected_token_is_the_same_error_from_every_command(
    tmp_path: Path, database_url: str, argv: list[str]
) -> None:
    env = {
        "TELEGRAM_BOT_TOKEN": WRONG_TOKEN,
        "DATABASE_URL": database_url,
        "TELEGRAM_SECRET_TOKEN": SECRET,
    }
    if argv[-1] == "--url-from-setting":
        argv, env["TELEGRAM_WEBHOOK_URL"] = ["serve"], WEBHOOK_URL
    async with run_fake_bot_api() as fake:
        result = await engram(tmp_path, *argv, TELEGRAM_API_BASE_URL=fake.base_url, **env)
    err = result.stderr.decode()
    assert result.returncode == 2, err
    assert err.splitlines()[-1] == REJECTED
    assert [line for line in err.splitlines() if line.startswith("engram:")] == [REJECTED]
    assert "WrongSecret" not in err + result.stdout.decode()


async def test_bot_api_errors_say_what_telegram_said_and_which_method_is_missing() -> None:
    from actors.telegram.client import BotApiClient
    from actors.telegram.errors import BadRequest, ServerError, UnsupportedMethod

    async with (
        run_fake_bot_api() as fake,
        BotApiClient(DEFAULT_TOKEN, base_url=fake.base_url) as bot,
    ):
        fake.fail_next("sendMessage", Failure.bad_request("chat not found"))
        with pytest.raises(BadRequest) as refused:
            await bot.send_message(42, "hi")
        assert str(refused.value) == "sendMessage: 400 Bad Request: chat not found"
        with pytest.raises(UnsupportedMethod) as missing:  # Telegram's own 404 for a method
            await bot.call("getBusinessConnection", {})
        assert "does not support getBusinessConnection (404 Not Found)" in str(missing.value)
        fake.unsupport("getWebhookInfo", 501, "method not found")
        with pytest.raises(UnsupportedMethod) as emulator:
            await bot.get_webhook_info()
        assert str(emulator.value).startswith(
            "getWebhookInfo: this Bot API server does not support getWebhookInfo (501 "
        )
        fake.unsupport("getWebhookInfo", 500, "<html>internal error</html>")
        with pytest.raises(ServerError) as broken:  # a body that is no Bot API answer says so
            await bot.get_webhook_info()
        assert str(broken.value) == (
            "getWebhookInfo: 500 Internal Server Error (not a Bot API answer: "
            "<html>internal error</html>)"
        )


async def test_commands_log_only_warnings_unless_verbose(tmp_path: Path, database_url: str) -> None:
    quiet = await engram(tmp_path, "migrate", DATABASE_URL=database_url)
    assert quiet.returncode == 0 and quiet.stderr == b""
    assert quiet.stdout.decode().startswith("applied ")
    loud = await engram(tmp_path, "-v", "migrate", DATABASE_URL=database_url)
    assert loud.returncode == 0
    events = [json.loads(line)["event"] for line in loud.stderr.decode().splitlines()]
    assert "db.open" in events
    assert loud.stdout.decode() == "applied 0 migration(s)\n"  # the output alone on stdout


# --- serve: the pairing code, and JSON on every stderr line ---------------------------------------


@attrs.define
class Serving:
    """A running ``engram serve``: its stdout so far, and its stderr once it has stopped."""

    proc: trio.Process
    out: list[str] = attrs.field(factory=list)
    err: list[bytes] = attrs.field(factory=list)

    @property
    def stderr(self) -> str:
        return b"".join(self.err).decode()


@asynccontextmanager
async def serving(tmp_path: Path, fake: FakeBotApi, **env: str) -> AsyncIterator[Serving]:
    """``engram serve`` against the fake; SIGTERM at the end, which must exit 0."""
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "actors.cli", "serve"],
        env=environ(
            tmp_path, TELEGRAM_BOT_TOKEN=DEFAULT_TOKEN, TELEGRAM_API_BASE_URL=fake.base_url, **env
        ),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    running = Serving(proc)

    async def read(stream: Any, into: Any) -> None:
        async for chunk in stream:
            into(chunk)

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read, proc.stdout, lambda c: running.out.append(c.decode()))
            nursery.start_soon(read, proc.stderr, running.err.append)
            try:
                yield running
            finally:
                if proc.returncode is None:
                    proc.send_signal(signal.SIGTERM)
                with trio.fail_after(30):
                    await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, running.stderr[-3000:]


async def wait_for(predicate: Any, limit: float = 60.0) -> None:
    """Poll state another process changes (no event to wait on)."""
    with trio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110
            await trio.sleep(0.1)


async def test_serve_prints_a_pairing_code_and_every_stderr_line_is_json(
    tmp_path: Path, database_url: str
) -> None:
    async with (
        run_fake_bot_api() as fake,
        serving(tmp_path, fake, DATABASE_URL=database_url, LOG_LEVEL="DEBUG") as bot,
    ):
        await wait_for(lambda: re.search(r"/start ([A-Z0-9]{8,})", "".join(bot.out)))
        text = "".join(bot.out)
        match = re.search(r"/start ([A-Z0-9]{8,})", text)
        assert match is not None
        code = match.group(1)
        assert f"https://t.me/engram_test_bot?start={code}" in text
        fake.push_message(31337, f"/start {code}")
        await wait_for(lambda: PAIRED in fake.sent_texts(31337))
    err = bot.stderr
    lines = err.splitlines()
    events = [json.loads(line) for line in lines]  # every line of stderr is one JSON object
    assert {"pairing.open", "pairing.paired", "serve.listening"} <= {e["event"] for e in events}
    assert any(e.get("logger") == "httpx" for e in events)  # a stdlib record, rendered as JSON
    assert DEFAULT_TOKEN.split(":")[1] not in err
