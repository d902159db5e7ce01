"""Shared fixtures: one embedded PostgreSQL for the whole run, a fresh database per test; the
strict fake Bot API and our client against it; the strict fake Anthropic API and a model on it;
the strict fake OpenAI API."""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from fakes.anthropic_api import FakeAnthropic, run_fake_anthropic
from fakes.bot_api import FakeBotApi, run_fake_bot_api
from fakes.openai_api import FakeOpenAI, run_fake_openai
from sql_recorder import ONE_CHAT_JUDGE, SESSION, SqlRecorder

from actors.telegram.client import BotApiClient
from memory.embeddings.providers import LocalEmbedder
from memory.llm.anthropic_provider import AnthropicLLM
from runtime import db as dbmod
from runtime.migrate import apply_migrations

os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())


@pytest.fixture(scope="session", autouse=True)
def sql_seen() -> Iterator[SqlRecorder]:
    """Every statement the code sends during the run (tests/runtime/test_sql_one_chat.py judges
    them, last)."""
    with SESSION.installed() as recorder:
        yield recorder


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The one-chat SQL judge runs after every other test: it judges what they all sent."""
    last = [item for item in items if item.name == ONE_CHAT_JUDGE]
    items[:] = [item for item in items if item.name != ONE_CHAT_JUDGE] + last


@pytest.fixture(scope="session", autouse=True)
def user_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """ENGRAM_HOME's default (the platform's user data folder) is a temporary one in tests: a
    bot opened without ENGRAM_HOME (its markdown vault is written there) never writes to the
    real one."""
    import platformdirs

    home = tmp_path_factory.mktemp("user-data")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(platformdirs, "user_data_dir", lambda *a, **k: str(home / "engram"))
        yield home


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    """The embedded PostgreSQL (pgserver, with pgvector), started once per test session."""
    import pgserver

    root = Path(tempfile.mkdtemp(prefix="engram-test-pg-"))
    server = pgserver.get_server(root / "pgdata", cleanup_mode="delete")  # type: ignore[attr-defined]
    try:
        yield server
    finally:
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def migrated_template(pg_server: Any) -> str:
    """A database with every migration applied, made once: a test that uses ``db`` gets a copy
    (``CREATE DATABASE ... TEMPLATE``, ~0.1 s) instead of running the migrations (~0.3 s)."""
    import trio

    name = f"template_{secrets.token_hex(4)}"
    pg_server.psql(f'CREATE DATABASE "{name}";')

    async def migrate() -> None:
        url = pg_server.get_uri(name)
        async with dbmod.asyncio_loop(), dbmod.open_database(url, max_size=1) as database:
            await apply_migrations(database)

    trio.run(migrate)
    return name


@pytest.fixture
def database_url(pg_server: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    """A new database on the session server, dropped after the test: empty, or a copy of
    :func:`migrated_template` when the test uses ``db`` (which then finds nothing to apply)."""
    name = f"t_{secrets.token_hex(6)}"
    if "db" in request.fixturenames:
        template = request.getfixturevalue("migrated_template")
        pg_server.psql(f'CREATE DATABASE "{name}" TEMPLATE "{template}";')
    else:
        pg_server.psql(f'CREATE DATABASE "{name}";')
    try:
        yield pg_server.get_uri(name)
    finally:
        pg_server.psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE);')


@pytest.fixture
async def raw_db(database_url: str) -> AsyncIterator[dbmod.Database]:
    """An open Database on an empty database (no migrations), inside an asyncio loop."""
    async with dbmod.asyncio_loop(), dbmod.open_database(database_url, max_size=4) as database:
        yield database


@pytest.fixture
async def db(raw_db: dbmod.Database) -> dbmod.Database:
    """An open Database with every migration applied (on a copy of the migrated template the
    runner finds nothing to do; it still checks every file's checksum)."""
    await apply_migrations(raw_db)
    return raw_db


# --- shared by many test files -------------------------------------------------------------------


@pytest.fixture
async def fake_claude() -> AsyncIterator[FakeAnthropic]:
    """The strict fake Anthropic Messages API (real HTTP) for one test."""
    async with run_fake_anthropic() as server:
        yield server


@pytest.fixture
async def claude(fake_claude: FakeAnthropic, db: dbmod.Database) -> AsyncIterator[AnthropicLLM]:
    """The real anthropic SDK client pointed at ``fake_claude``, recording usage in ``db``."""
    async with AnthropicLLM(
        api_key=fake_claude.api_key, base_url=fake_claude.base_url, db=db, timeout=5.0
    ) as llm:
        yield llm


@pytest.fixture
async def fake_openai() -> AsyncIterator[FakeOpenAI]:
    """The strict fake OpenAI API on a free port."""
    async with run_fake_openai() as server:
        yield server


@pytest.fixture(scope="module")
def local() -> LocalEmbedder:
    """The bundled local embedding model (no network)."""
    return LocalEmbedder()


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """``main`` configures logging for the process (root handlers and level, quiet httpx,
    structlog's output stream, the capture of warnings): put everything back for the tests
    that follow."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    named = {n: logging.getLogger(n).level for n in ("httpx", "httpcore", "hpack")}
    config = structlog.get_config()
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        for name, lvl in named.items():
            logging.getLogger(name).setLevel(lvl)
        structlog.configure(**config)
        logging.captureWarnings(False)  # else a later captureWarnings(True) does nothing


@pytest.fixture
async def fake() -> AsyncIterator[FakeBotApi]:
    """The strict fake Bot API on a free port (its default token)."""
    async with run_fake_bot_api() as server:
        yield server


@pytest.fixture
async def bot(fake: FakeBotApi) -> AsyncIterator[BotApiClient]:
    """The real Bot API client, talking to :func:`fake` with its token."""
    async with BotApiClient(fake.token, base_url=fake.base_url, timeout=5.0) as client:
        yield client
