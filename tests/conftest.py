"""Session fixtures: one embedded PostgreSQL for the whole run, a fresh database per test."""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime import db as dbmod
from runtime.migrate import apply_migrations

os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    """The embedded PostgreSQL (pgserver, with pgvector), started once per test session."""
    import pgserver

    root = Path(tempfile.mkdtemp(prefix="engram-test-pg-"))
    server = pgserver.get_server(root / "pgdata", cleanup_mode="delete")
    try:
        yield server
    finally:
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def database_url(pg_server: Any) -> Iterator[str]:
    """A new empty database on the session server, dropped after the test."""
    name = f"t_{secrets.token_hex(6)}"
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
    """An open Database with every migration applied."""
    await apply_migrations(raw_db)
    return raw_db
