"""Settings: parsing, validation, secrets, and the one-line start-up error."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from actors.chat.settings import ChatSettings
from actors.scheduler.heartbeat_settings import HeartbeatSettings
from actors.scheduler.routine_settings import RoutineSettings
from actors.scheduler.settings import ProactiveSettings
from actors.settings import Settings, load_settings
from actors.telegram.settings import TelegramSettings
from actors.web.settings import WebSettings
from memory.llm.settings import LLMSettings
from memory.settings import MemorySettings
from memory.vault.settings import VaultSettings
from runtime.errors import SettingsError
from runtime.process_settings import ProcessSettings
from runtime.settings import SettingsSection

SECTIONS: tuple[type[SettingsSection], ...] = (
    ProcessSettings,
    TelegramSettings,
    LLMSettings,
    MemorySettings,
    ChatSettings,
    ProactiveSettings,
    RoutineSettings,
    HeartbeatSettings,
    VaultSettings,
    WebSettings,
)


def test_defaults() -> None:
    s = load_settings({}, dotenv=None)
    assert s.host == "127.0.0.1"
    assert s.port == 8080
    assert s.timezone == "Europe/Madrid"
    assert s.database_url == ""
    assert s.telegram_allowed_chat_ids == frozenset()
    assert (s.llm_provider, s.anthropic_model) == ("anthropic", "claude-sonnet-4-6")
    assert (s.model_for("chat"), s.model_for("memory")) == ("claude-sonnet-4-6", "claude-haiku-4-5")
    assert s.prompt_cache_ttl == "5m"
    assert s.message_retention_days == 0  # the exact words kept (issue 24)


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


def test_memory_model_defaults_follow_the_provider() -> None:
    s = load_settings({"MEMORY_MODEL": "claude-sonnet-4-6"}, dotenv=None)
    assert s.model_for("memory") == "claude-sonnet-4-6"
    s = load_settings({"LLM_PROVIDER": "openai", "OPENAI_MODEL": "qwen3-8b"}, dotenv=None)
    assert (s.model_for("chat"), s.model_for("memory")) == ("qwen3-8b", "qwen3-8b")
    s = load_settings({"LLM_PROVIDER": "openai", "MEMORY_MODEL": "qwen3-1.7b"}, dotenv=None)
    assert (s.model_for("chat"), s.model_for("memory")) == ("gpt-4o-mini", "qwen3-1.7b")
    with pytest.raises(SettingsError) as info:
        load_settings({"PROMPT_CACHE_TTL": "10m"}, dotenv=None)
    assert info.value.name == "PROMPT_CACHE_TTL"


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
        {
            "TELEGRAM_BOT_TOKEN": "123456:SECRETSECRET_secretsecret_SECRETSECRET",
            "TELEGRAM_SECRET_TOKEN": "sk-ant-xyz123",
        },
        dotenv=None,
    )
    assert "SECRETSECRET" not in repr(s)
    assert "sk-ant-xyz123" not in repr(s)
    assert s.telegram_bot_token.reveal() == "123456:SECRETSECRET_secretsecret_SECRETSECRET"
    assert sorted(s.secrets()) == ["123456:SECRETSECRET_secretsecret_SECRETSECRET", "sk-ant-xyz123"]


def test_every_field_declared_once() -> None:
    envs = [f.env for f in Settings.fields]
    assert len(envs) == len(set(envs))
    assert {f.attr for f in Settings.fields} == {a.name for a in attrs.fields(Settings)}


@pytest.mark.parametrize("section", SECTIONS, ids=lambda cls: cls.__name__)
def test_each_section_declares_exactly_its_own_fields(section: type[SettingsSection]) -> None:
    assert section.fields, section
    assert {f.attr for f in section.fields} == {a.name for a in attrs.fields(section)}
    assert len({f.env for f in section.fields}) == len(section.fields)


def test_sections_share_no_variable_and_settings_is_all_of_them() -> None:
    declared = [(f.env, section.__name__) for section in SECTIONS for f in section.fields]
    envs = [env for env, _ in declared]
    assert [pair for pair in declared if envs.count(pair[0]) > 1] == []
    attrs_by_section = [{a.name for a in attrs.fields(section)} for section in SECTIONS]
    for i, mine in enumerate(attrs_by_section):
        for theirs in attrs_by_section[i + 1 :]:
            assert mine.isdisjoint(theirs)
    assert Settings.fields == tuple(f for section in SECTIONS for f in section.fields)
    assert all(issubclass(Settings, section) for section in SECTIONS)


def test_a_section_loads_on_its_own() -> None:
    from runtime.settings import load_settings as load_section

    llm = load_section(LLMSettings, {"LLM_PROVIDER": "OpenAI", "ENGRAM_PORT": "x"}, dotenv=None)
    assert llm.llm_provider == "openai"  # other sections' variables are not read
    assert not hasattr(llm, "port")
    with pytest.raises(SettingsError) as info:
        load_section(ProcessSettings, {"DB_POOL_MIN": "5", "DB_POOL_MAX": "2"}, dotenv=None)
    assert info.value.name == "DB_POOL_MIN"


def test_cross_field_checks_run_on_the_combined_settings() -> None:
    with pytest.raises(SettingsError) as info:
        load_settings({"RESTART_BACKOFF_BASE": "40", "RESTART_BACKOFF_CAP": "10"}, dotenv=None)
    assert info.value.name == "RESTART_BACKOFF_BASE"


def test_readme_documents_every_variable() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    missing = [f.env for f in Settings.fields if f"`{f.env}`" not in readme]
    assert missing == []
    table = re.findall(r"^\| `([A-Z][A-Z0-9_]+)` \|", readme, flags=re.MULTILINE)
    assert table == [f.env for f in Settings.fields]  # the same order as `engram config`


def test_bad_setting_stops_cli_with_one_line_and_exit_2(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ENGRAM_", "TELEGRAM_"))}
    env["ENGRAM_PORT"] = "not-a-port"
    proc = subprocess.run(
        [sys.executable, "-m", "actors.cli", "migrate"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "ENGRAM_PORT" in lines[0]


def test_every_bad_variable_is_reported_at_once() -> None:
    from runtime.errors import SettingsErrors

    with pytest.raises(SettingsErrors) as info:
        load_settings(
            {"ENGRAM_PORT": "eighty", "TIMEZONE": "Mars/Olympus", "LOG_LEVEL": "chatty"},
            dotenv=None,
        )
    # in the configuration table's order, each with its reason
    assert [p.name for p in info.value.problems] == ["ENGRAM_PORT", "LOG_LEVEL", "TIMEZONE"]
    assert "Mars/Olympus" in str(info.value.problems[2])
    # what could be loaded is there, the bad values replaced by their defaults
    partial = info.value.partial
    assert isinstance(partial, Settings)
    assert (partial.port, partial.timezone, partial.log_level) == (8080, "Europe/Madrid", "INFO")


def test_cross_field_checks_report_every_problem() -> None:
    from runtime.errors import settings_problems

    env = {
        "DB_POOL_MIN": "5",
        "DB_POOL_MAX": "2",
        "RESTART_BACKOFF_BASE": "40",
        "RESTART_BACKOFF_CAP": "10",
    }
    with pytest.raises(SettingsError) as info:
        load_settings(env, dotenv=None)
    assert [p.name for p in settings_problems(info.value)] == [
        "DB_POOL_MIN",
        "RESTART_BACKOFF_BASE",
    ]


def test_cli_prints_every_problem_one_line_each(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ENGRAM_", "TELEGRAM_"))}
    env.update(ENGRAM_PORT="not-a-port", TIMEZONE="Nowhere/Else", DB_POOL_MAX="0")
    proc = subprocess.run(
        [sys.executable, "-m", "actors.cli", "migrate"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "engram: configuration error: ENGRAM_PORT: expected an integer, got 'not-a-port'",
        "engram: configuration error: TIMEZONE: unknown IANA time zone 'Nowhere/Else'",
        "engram: configuration error: DB_POOL_MAX: must be between 1 and 200, got 0",
    ]
    assert proc.stdout == ""


# --- every value is checked when the settings load (before anything is created) ----------------

GOOD_TOKEN = "123456789:AAHfakeTokenForTests_abcdefghijk-XYZ0"


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("TELEGRAM_BOT_TOKEN", "123456:ABC...", "README's placeholder"),
        ("TELEGRAM_BOT_TOKEN", "123456:ABCdefGHIjklMNOpqrSTUvwx", "35 or more"),
        ("TELEGRAM_BOT_TOKEN", "AAHfakeTokenForTests_abcdefghijk-XYZ0", "digits, a colon"),
        ("TELEGRAM_BOT_TOKEN", GOOD_TOKEN + " ", None),  # surrounding spaces are trimmed
        ("ENGRAM_HOST", "not a host", "IP address or a host name"),
        ("ENGRAM_HOST", "-bad-.example", "IP address or a host name"),
        ("TELEGRAM_API_BASE_URL", "http://127.0.0.1:notaport", "bad host or port"),
        ("TELEGRAM_API_BASE_URL", "ftp://example.org", "http/https://"),
        ("ANTHROPIC_BASE_URL", "http://", "with a host"),
        ("TELEGRAM_WEBHOOK_URL", "https://bot.example.org:99999/api", "bad host or port"),
        ("TELEGRAM_ALLOWED_CHAT_IDS", "12,٣", "ASCII digits"),
        ("TELEGRAM_ALLOWED_CHAT_IDS", "12,99999999999999999999", "ASCII digits"),
        ("ANTHROPIC_API_KEY", "sk-ant key with spaces", "printable ASCII"),
        ("OPENAI_API_KEY", "sk-\u200bzero-width", "printable ASCII"),
        ("ANTHROPIC_MODEL", "claude sonnet", "a model name"),
        ("MEMORY_MODEL", "haiku\n", None),  # trimmed: fine
        ("MODEL_RATES", "my-model=cheap", "my-model"),
        ("DATABASE_URL", "postgresql://u:pw@localhost:notaport/db", "port must be a number"),
    ],
)
def test_every_kind_of_value_is_checked_at_load(name: str, value: str, words: str | None) -> None:
    if words is None:
        load_settings({name: value}, dotenv=None)
        return
    with pytest.raises(SettingsError) as info:
        load_settings({name: value}, dotenv=None)
    assert info.value.name == name
    assert words in info.value.problem
    secret = next(f.secret for f in Settings.fields if f.env == name)
    if secret:  # never quoted back
        assert value.strip() not in str(info.value)
        assert value.split(":")[-1] not in str(info.value)


def test_engram_home_must_be_a_directory_or_makeable(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    for home in (afile, afile / "below"):
        with pytest.raises(SettingsError) as info:
            load_settings({"ENGRAM_HOME": str(home)}, dotenv=None)
        assert info.value.name == "ENGRAM_HOME"
    ok = load_settings({"ENGRAM_HOME": str(tmp_path / "new" / "home")}, dotenv=None)
    assert ok.home == tmp_path / "new" / "home"
    assert not (tmp_path / "new").exists()  # checking creates nothing


def test_vault_dir_must_be_a_directory_or_makeable(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    for vault in (afile, afile / "below" / "deeper"):
        with pytest.raises(SettingsError) as info:
            load_settings({"VAULT_DIR": str(vault)}, dotenv=None)
        assert info.value.name == "VAULT_DIR"
    ok = load_settings({"VAULT_DIR": str(tmp_path / "new" / "vault")}, dotenv=None)
    assert ok.vault_dir == tmp_path / "new" / "vault"
    assert not (tmp_path / "new").exists()  # checking creates nothing


def test_a_secret_parser_that_quotes_its_value_is_cut_out() -> None:
    from runtime.parsers import Secret
    from runtime.settings import Field, SettingsSection
    from runtime.settings import load_settings as load_section

    def leaky(raw: str) -> Secret:
        if raw.strip():
            raise ValueError(f"bad key {raw.strip()!r}")
        return Secret("")

    @attrs.frozen(kw_only=True, slots=False)
    class Leaky(SettingsSection):
        fields = (Field("LEAKY_KEY", "key", "", leaky, "a key", secret=True),)
        key: Secret

    with pytest.raises(SettingsError) as info:
        load_section(Leaky, {"LEAKY_KEY": "sk-very-secret"}, dotenv=None)
    assert "sk-very-secret" not in str(info.value) and "***" in str(info.value)


@pytest.mark.parametrize(
    ("env", "shown"),
    [
        ({}, "claude-haiku-4-5 (default for LLM_PROVIDER=anthropic)"),
        (
            {"LLM_PROVIDER": "openai", "OPENAI_MODEL": "qwen2.5:7b"},
            "qwen2.5:7b (OPENAI_MODEL for LLM_PROVIDER=openai)",
        ),
        ({"MEMORY_MODEL": "claude-opus-4-1"}, "claude-opus-4-1 (setting)"),
    ],
)
def test_config_shows_the_memory_model_in_force_with_its_source(
    env: dict[str, str], shown: str
) -> None:
    from actors.cli.config import config_lines

    settings = load_settings(env, dotenv=None)
    assert f"MEMORY_MODEL={shown}" in config_lines(settings)
    assert shown.split(" ")[0] == settings.model_for("memory")
