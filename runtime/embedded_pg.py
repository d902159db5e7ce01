"""The embedded PostgreSQL (pgserver, with pgvector) used when DATABASE_URL is not set.

The data directory lives in ``ENGRAM_HOME/postgres``. pgserver keeps a list of the processes
holding the server, so several engram processes (``serve`` plus a CLI command) share one server,
and the last one to exit stops it; the next run starts it again on the same data.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from runtime.errors import DatabaseUnavailable
from runtime.logs import get_logger

log = get_logger(__name__)

DATABASE_NAME = "engram"


def _start(pgdata: Path, database: str) -> tuple[Any, str]:
    with warnings.catch_warnings():  # platformdirs warns about XDG_RUNTIME_DIR on servers
        warnings.simplefilter("ignore")
        import pgserver  # heavy import, only when the embedded server is used

    logging.getLogger("pgserver").setLevel(logging.WARNING)
    pgdata.mkdir(parents=True, exist_ok=True)
    try:
        server = pgserver.get_server(pgdata, cleanup_mode="stop")  # type: ignore[attr-defined]
    except (subprocess.CalledProcessError, OSError, RuntimeError) as exc:
        raise DatabaseUnavailable(
            f"could not start the embedded PostgreSQL in {pgdata}: {exc} "
            f"(see {pgdata / 'log'})"
        ) from None
    exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{database}';")
    if "(1 row)" not in exists:
        # another process may create it at the same moment
        with contextlib.suppress(subprocess.CalledProcessError):
            server.psql(f'CREATE DATABASE "{database}";')
    return server, server.get_uri(database)


@asynccontextmanager
async def embedded_postgres(home: Path, database: str = DATABASE_NAME) -> AsyncIterator[str]:
    """Start (or join) the embedded server under ``home`` and yield its URL."""
    pgdata = home / "postgres"
    server, url = await trio.to_thread.run_sync(_start, pgdata, database)
    log.info("db.embedded", pgdata=str(pgdata))
    try:
        yield url
    finally:
        # Release our handle; the server stops when no other process holds it.
        with trio.move_on_after(15, shield=True):
            await trio.to_thread.run_sync(server.cleanup)
