"""Settings: parsing, validation, secrets, and the one-line start-up error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.errors import SettingsError
from runtime.settings import FIELDS, Settings, load_settings


def test_defaults() -> None:
    s = load_settings({}, dotenv=None)
    assert s.host == "127.0.0.1"
    assert s.port == 8080
    assert s.timezone == "Europe/Madrid"
    assert s.database_url == ""
    assert s.telegram_allowed_chat_ids == frozenset()
    assert (s.llm_provider, s.anthropic_model) == ("anthropic", "claude-sonnet-4-5")
    assert s.message_retention_days == 7


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ENGRAM_PORT", "eighty"),
        ("ENGRAM_PORT", "70000"),
        ("TIMEZONE", "Mars/Olympus"),
        ("LOG_LEVEL", "chatty"),
        ("DATABASE_URL", "mysql://x"),
        ("TELEGRAM_ALLOWED_CHAT_IDS", "12,abc"),
        ("TELEGRAM_SECRET_TOKEN", "has spaces!"),

        ("SHUTDOWN_DEADLINE", "-1"),
    ],
)
def test_bad_value_names_the_variable(name: str, value: str) -> None:
    with pytest.raises(SettingsError) as info:
        load_settings({name: value}, dotenv=None)
    assert info.value.name == name
    assert str(info.value).startswith(f"{name}: ")


def test_singular_allowed_chat_id_alias() -> None:
    s = load_settings({"TELEGRAM_ALLOWED_CHAT_ID": "42"}, dotenv=None)
    assert s.telegram_allowed_chat_ids == frozenset({42})
    s = load_settings({"TELEGRAM_ALLOWED_CHAT_IDS": "1, -100200"}, dotenv=None)
    assert s.telegram_allowed_chat_ids == frozenset({1, -100200})


def test_dotenv_is_read_and_environment_wins(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text('# comment\nENGRAM_PORT=9000\nexport LOG_LEVEL="debug"\nTIMEZONE=UTC\n')
    s = load_settings({"TIMEZONE": "Asia/Tokyo"}, dotenv=env_file)
    assert (s.port, s.log_level, s.timezone) == (9000, "DEBUG", "Asia/Tokyo")


def test_secrets_never_in_repr() -> None:
    s = load_settings(
        {"TELEGRAM_BOT_TOKEN": "123456:SECRETSECRET", "TELEGRAM_SECRET_TOKEN": "sk-ant-xyz123"},
        dotenv=None,
    )
    assert "SECRETSECRET" not in repr(s)
    assert "sk-ant-xyz123" not in repr(s)
    assert s.telegram_bot_token.reveal() == "123456:SECRETSECRET"
    assert sorted(s.secrets()) == ["123456:SECRETSECRET", "sk-ant-xyz123"]


def test_every_field_declared_once() -> None:
    envs = [f.env for f in FIELDS]
    assert len(envs) == len(set(envs))
    assert {f.attr for f in FIELDS} == set(Settings.__annotations__)


def test_readme_documents_every_variable() -> None:
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    missing = [f.env for f in FIELDS if f"`{f.env}`" not in readme]
    assert missing == []


def test_bad_setting_stops_cli_with_one_line_and_exit_2(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ENGRAM_", "TELEGRAM_"))}
    env["ENGRAM_PORT"] = "not-a-port"
    proc = subprocess.run(
        [sys.executable, "-m", "actors.cli", "migrate"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "ENGRAM_PORT" in lines[0]
