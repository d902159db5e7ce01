"""``engram telegram ...`` against the strict fake Bot API: handlers called directly, and the
whole CLI (run_cli: settings, logging, exit codes) in a subprocess."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from fakes.bot_api import DEFAULT_TOKEN, Failure, FakeBotApi

from actors.cli.telegram import generate_secret_token, register, valid_secret_token
from actors.settings import Settings, load_settings
from actors.telegram.types import ALLOWED_UPDATES
from runtime.cli import base_parser
from runtime.errors import SettingsError
from runtime.parsers import Secret

ROOT = Path(__file__).resolve().parents[3]
TOKEN_SECRET = DEFAULT_TOKEN.split(":", 1)[1]
URL = "https://bot.example.org/api/telegram"
CONFIGURED_SECRET = "configured-Secret_0123456789"


def settings_for(fake: FakeBotApi | None, tmp_path: Path, **env: str) -> Settings:
    values = {"ENGRAM_HOME": str(tmp_path), "TELEGRAM_BOT_TOKEN": DEFAULT_TOKEN}
    if fake is not None:
        values["TELEGRAM_API_BASE_URL"] = fake.base_url
    values.update(env)
    return load_settings(values, dotenv=None)


def parse(*argv: str) -> argparse.Namespace:
    parser, sub = base_parser()
    register(sub)
    return parser.parse_args(["telegram", *argv])


async def run(settings: Settings, *argv: str) -> int:
    args = parse(*argv)
    code: int = await args.handler(settings, args)
    return code


def assert_no_token(text: str) -> None:
    assert DEFAULT_TOKEN not in text
    assert TOKEN_SECRET not in text


# --- secret tokens -----------------------------------------------------------------------------


def test_generated_secret_tokens_are_valid_and_random() -> None:
    tokens = {generate_secret_token() for _ in range(50)}
    assert len(tokens) == 50
    for token in tokens:
        assert re.fullmatch(r"[A-Za-z0-9_-]{32,256}", token)


@pytest.mark.parametrize(
    ("token", "ok"),
    [
        ("a", True),
        ("A-z_09", True),
        ("x" * 256, True),
        ("", False),
        ("x" * 257, False),
        ("has space", False),
        ("dot.", False),
        ("é", False),
    ],
)
def test_secret_token_validation(token: str, ok: bool) -> None:
    assert valid_secret_token(token) is ok


# --- set-webhook -------------------------------------------------------------------------------


async def test_set_webhook_generates_and_prints_a_secret_once(
    fake: FakeBotApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await run(settings_for(fake, tmp_path), "set-webhook", "--url", URL) == 0
    (call,) = fake.calls_to("setWebhook")
    secret = call.params["secret_token"]
    assert valid_secret_token(secret) and len(secret) >= 32
    assert call.params["allowed_updates"] == list(ALLOWED_UPDATES)
    assert call.params["url"] == URL
    assert call.params.get("drop_pending_updates") in (None, False)
    assert fake.webhook["secret_token"] == secret
    out = capsys.readouterr().out
    assert out.count(secret) == 1
    assert f"TELEGRAM_SECRET_TOKEN={secret}\n" in out
    assert ".env" in out and "only this once" in out
    assert_no_token(out)


async def test_set_webhook_uses_the_configured_secret(
    fake: FakeBotApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = settings_for(fake, tmp_path, TELEGRAM_SECRET_TOKEN=CONFIGURED_SECRET)
    assert await run(settings, "set-webhook", "--url", URL, "--drop-pending") == 0
    (call,) = fake.calls_to("setWebhook")
    assert call.params["secret_token"] == CONFIGURED_SECRET
    assert call.params["allowed_updates"] == list(ALLOWED_UPDATES)
    assert call.params["drop_pending_updates"] is True
    out = capsys.readouterr().out
    assert CONFIGURED_SECRET not in out
    assert "configured TELEGRAM_SECRET_TOKEN" in out
    assert_no_token(out)


async def test_set_webhook_drop_pending_clears_the_queue(fake: FakeBotApi, tmp_path: Path) -> None:
    fake.push_message(42, "old")
    assert await run(settings_for(fake, tmp_path), "set-webhook", "--url", URL) == 0
    assert len(fake.pending_updates) == 1
    assert (
        await run(settings_for(fake, tmp_path), "set-webhook", "--url", URL, "--drop-pending") == 0
    )
    assert fake.pending_updates == []


@pytest.mark.parametrize(
    "url", ["http://bot.example.org/api/telegram", "bot.example.org/api/telegram", "https://"]
)
async def test_set_webhook_refuses_non_https_urls(
    fake: FakeBotApi, tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str
) -> None:
    assert await run(settings_for(fake, tmp_path), "set-webhook", "--url", url) == 2
    assert fake.calls == []
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "https" in err


async def test_set_webhook_refuses_an_invalid_configured_secret(
    fake: FakeBotApi, tmp_path: Path
) -> None:
    settings = settings_for(fake, tmp_path).replace(telegram_secret_token=Secret("bad secret!"))
    with pytest.raises(SettingsError) as info:
        await run(settings, "set-webhook", "--url", URL)
    assert info.value.name == "TELEGRAM_SECRET_TOKEN"
    assert "bad secret" not in str(info.value)
    assert fake.calls == []


# --- delete-webhook and info -------------------------------------------------------------------


async def test_delete_webhook(
    fake: FakeBotApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = settings_for(fake, tmp_path)
    await run(settings, "set-webhook", "--url", URL)
    fake.push_message(42, "pending")
    assert await run(settings, "delete-webhook") == 0
    assert fake.webhook == {}
    assert len(fake.pending_updates) == 1
    assert fake.calls_to("deleteWebhook")[0].params == {"drop_pending_updates": False}
    assert "webhook deleted" in capsys.readouterr().out
    assert await run(settings, "delete-webhook", "--drop-pending") == 0
    assert fake.calls_to("deleteWebhook")[1].params == {"drop_pending_updates": True}
    assert fake.pending_updates == []
    assert "dropped" in capsys.readouterr().out


async def test_info_shows_bot_and_webhook_never_the_token(
    fake: FakeBotApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = settings_for(fake, tmp_path, TELEGRAM_SECRET_TOKEN=CONFIGURED_SECRET)
    await run(settings, "set-webhook", "--url", URL)
    fake.push_message(42, "pending")
    capsys.readouterr()
    assert await run(settings, "info") == 0
    out = capsys.readouterr().out
    assert "@engram_test_bot" in out
    assert URL in out
    assert "pending updates:  1" in out
    assert ", ".join(ALLOWED_UPDATES) in out
    assert_no_token(out)
    assert CONFIGURED_SECRET not in out


async def test_info_without_webhook_says_polling(
    fake: FakeBotApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await run(settings_for(fake, tmp_path), "info") == 0
    out = capsys.readouterr().out
    assert "@engram_test_bot" in out and "long polling" in out
    assert_no_token(out)


async def test_info_on_a_server_without_get_webhook_info_says_so(
    fake: FakeBotApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.unsupport("getWebhookInfo", 501, "Not Implemented")
    assert await run(settings_for(fake, tmp_path), "info") == 0
    out = capsys.readouterr().out
    assert "@engram_test_bot" in out
    assert "webhook:          unknown (getWebhookInfo: this Bot API server does not support" in out


async def test_info_prints_what_it_read_when_get_webhook_info_fails(
    fake: FakeBotApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.fail_next("getWebhookInfo", Failure.server_error(500))
    assert await run(settings_for(fake, tmp_path), "info") == 0
    out = capsys.readouterr().out
    assert "bot:              @engram_test_bot" in out
    assert "webhook:          unknown (" in out and "500" in out
    assert "commands (menu):" in out and "unknown" not in out.split("commands (menu):")[1]
    assert_no_token(out)


async def test_info_fails_only_when_nothing_could_be_read(
    fake: FakeBotApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for method in ("getMe", "getWebhookInfo", "getMyCommands"):
        fake.fail_next(method, Failure.server_error(502, "Bad Gateway"))
    assert await run(settings_for(fake, tmp_path), "info") == 1
    captured = capsys.readouterr()
    assert captured.out.count("unknown (") == 3
    assert "nothing could be read" in captured.err
    assert_no_token(captured.out + captured.err)


@pytest.mark.parametrize("argv", [["info"], ["delete-webhook"], ["set-webhook", "--url", URL]])
async def test_missing_bot_token_is_a_settings_error(tmp_path: Path, argv: list[str]) -> None:
    settings = settings_for(None, tmp_path, TELEGRAM_BOT_TOKEN="")
    with pytest.raises(SettingsError) as info:
        await run(settings, *argv)
    assert info.value.name == "TELEGRAM_BOT_TOKEN"


# --- the whole CLI in a subprocess -------------------------------------------------------------

CLI = (
    "import sys\n"
    "from actors.settings import load_settings\n"
    "from runtime.cli import base_parser, run_cli\n"
    "from actors.cli.telegram import register\n"
    "parser, sub = base_parser()\n"
    "register(sub)\n"
    "sys.exit(run_cli(parser, sys.argv[1:], load=load_settings))\n"
)


async def cli(tmp_path: Path, *argv: str, **env: str) -> Any:
    environ = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "PYTHONPATH": str(ROOT),
        "ENGRAM_HOME": str(tmp_path / "home"),
        "LOG_LEVEL": "DEBUG",
        "LOG_FORMAT": "json",
        **env,
    }
    return await trio.run_process(
        [sys.executable, "-c", CLI, "telegram", *argv],
        cwd=tmp_path,  # no stray .env
        env=environ,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )


async def test_cli_missing_token_exits_2_with_one_line(tmp_path: Path) -> None:
    result = await cli(tmp_path, "info")
    assert result.returncode == 2
    err = result.stderr.decode()
    assert err.count("\n") == 1
    assert "TELEGRAM_BOT_TOKEN" in err
    assert result.stdout == b""


async def test_cli_info_end_to_end_never_shows_the_token(fake: FakeBotApi, tmp_path: Path) -> None:
    await fake._set_webhook({"url": URL, "secret_token": CONFIGURED_SECRET})
    result = await cli(
        tmp_path, "info", TELEGRAM_BOT_TOKEN=DEFAULT_TOKEN, TELEGRAM_API_BASE_URL=fake.base_url
    )
    out, err = result.stdout.decode(), result.stderr.decode()
    assert result.returncode == 0, err
    assert "@engram_test_bot" in out and URL in out
    assert_no_token(out)
    assert_no_token(err)


async def test_cli_rejected_token_exits_2_without_the_token(
    fake: FakeBotApi, tmp_path: Path
) -> None:
    wrong = "123456789:WrongSecretWrongSecretWrongSecret_xyz"
    result = await cli(
        tmp_path, "info", TELEGRAM_BOT_TOKEN=wrong, TELEGRAM_API_BASE_URL=fake.base_url
    )
    err = result.stderr.decode()
    assert result.returncode == 2
    assert err.splitlines()[-1] == (
        "engram: configuration error: TELEGRAM_BOT_TOKEN: Telegram rejected the token"
    )
    assert "WrongSecret" not in err + result.stdout.decode()


async def test_cli_telegram_error_exits_1(fake: FakeBotApi, tmp_path: Path) -> None:
    result = await cli(
        tmp_path,
        "set-webhook",
        "--url",
        "https://bot.example.org:9999/api/telegram",  # a port Telegram refuses
        TELEGRAM_BOT_TOKEN=DEFAULT_TOKEN,
        TELEGRAM_API_BASE_URL=fake.base_url,
    )
    err = result.stderr.decode()
    assert result.returncode == 1
    assert err.splitlines()[-1].startswith("engram: error: setWebhook: 400")
    assert "TELEGRAM_SECRET_TOKEN=" not in result.stdout.decode()
    assert_no_token(err + result.stdout.decode())


async def test_cli_set_webhook_end_to_end(fake: FakeBotApi, tmp_path: Path) -> None:
    result = await cli(
        tmp_path,
        "set-webhook",
        "--url",
        URL,
        TELEGRAM_BOT_TOKEN=DEFAULT_TOKEN,
        TELEGRAM_API_BASE_URL=fake.base_url,
    )
    out, err = result.stdout.decode(), result.stderr.decode()
    assert result.returncode == 0, err
    secret = fake.webhook["secret_token"]
    assert f"TELEGRAM_SECRET_TOKEN={secret}" in out
    assert secret not in err
    assert_no_token(out + err)
