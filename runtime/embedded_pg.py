"""The embedded PostgreSQL (pgserver, with pgvector) used when DATABASE_URL is not set.

The data directory lives in ``ENGRAM_HOME/postgres``. pgserver keeps a list of the processes
holding the server, so several engram processes (``serve`` plus a CLI command) share one server,
and the last one to exit stops it; the next run starts it again on the same data. A process
that died holding it (killed) is dropped from that list by the next start
(:func:`prune_dead_holders`), or the server would never be stopped again.

PostgreSQL's own ``shared_buffers`` (128 MB) is sized for a shared host; a journal of 100,000
entries with vectors is ~0.5 GB, and every page the buffer cache misses is a copy from the OS
cache. :func:`tune` sets ``EMBEDDED_PG_SHARED_BUFFERS`` with ``ALTER SYSTEM`` and restarts the
server when this process is its only holder (a fresh start, in practice); when another engram
process shares the server the value applies at its next start (:func:`preset` writes it into
a stopped cluster's ``postgresql.auto.conf`` first, so a restart is needed only once). A value
the server cannot start with stops start-up with an error naming the setting, and lowering
the setting is enough to recover. Measured on the 2-core VM (``bench/turn.py``, 100k entries):
the journal search statement 12.1 -> 8.3 ms; ``bench/retrieval.py`` 100k p95 10.2 -> 8.5 ms.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
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
DEFAULT_SHARED_BUFFERS = "1GB"
HOLDERS_FILE = ".handle_pids.json"  # pgserver's list of the processes holding the server


def _psql_value(server: Any, query: str) -> str:
    """The single value ``query`` returns, through the server's psql (unaligned, no header)."""
    out: str = server.psql(f"\\pset tuples_only on\n\\pset format unaligned\n{query}\n")
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def tune(server: Any, shared_buffers: str) -> bool:
    """Give the running embedded ``server`` this ``shared_buffers`` (PostgreSQL units, e.g.
    ``1GB``). Returns True when the server now runs with it; False when the value is saved
    but waits for the next start because another process holds the server. A value the
    server cannot start with is taken back (it starts with the old one) and raises
    :class:`DatabaseUnavailable` naming the setting. Blocking."""
    from pgserver._commands import pg_ctl  # type: ignore[attr-defined]

    _check_size(shared_buffers)
    same = (
        "SELECT pg_size_bytes(current_setting('shared_buffers')) = "
        f"pg_size_bytes('{shared_buffers}');"
    )
    if _psql_value(server, same) == "t":
        return True
    previous = _psql_value(server, "SHOW shared_buffers;")
    server.psql(f"ALTER SYSTEM SET shared_buffers = '{shared_buffers}';")
    with server._lock:  # pgserver's inter-process lock around starting and holding the server
        if server.global_process_id_list.get() != [os.getpid()]:
            return False
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=server.pgdata, user=server.system_user)
        try:
            server.ensure_postgres_running()  # starts it again, refreshes the postmaster info
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, AssertionError) as exc:
            preset(server.pgdata, previous)
            server.ensure_postgres_running()
            raise DatabaseUnavailable(
                f"the embedded PostgreSQL cannot start with shared_buffers={shared_buffers} "
                f"(EMBEDDED_PG_SHARED_BUFFERS; it runs with {previous}): {_reason(exc)}; "
                f"see {server.pgdata / 'log'}"
            ) from None
    return _psql_value(server, same) == "t"


def _reason(exc: BaseException) -> str:
    """A short cause: which server command failed, not its whole command line."""
    if isinstance(exc, subprocess.CalledProcessError):
        cmd = exc.cmd[0] if isinstance(exc.cmd, list | tuple) and exc.cmd else exc.cmd
        return f"{Path(str(cmd)).name} exited with {exc.returncode}"
    return str(exc) or type(exc).__name__


def _check_size(value: str) -> None:
    """Only a plain size reaches SQL and the configuration file."""
    if not re.fullmatch(r"\d{1,10}(kB|MB|GB|TB)", value):
        raise ValueError(f"not a PostgreSQL memory size: {value!r}")


def preset(pgdata: Path, shared_buffers: str) -> bool:
    """Write ``shared_buffers`` into a *stopped* cluster's ``postgresql.auto.conf`` (what
    ``ALTER SYSTEM`` would write), so its next start uses it without a restart, and a value it
    could not start with is replaced by the configured one. False (nothing written) when there
    is no cluster yet or its server is running."""
    from pgserver.utils import PostmasterInfo  # type: ignore[import-untyped]

    _check_size(shared_buffers)
    conf = pgdata / "postgresql.auto.conf"
    if not (pgdata / "PG_VERSION").exists() or not conf.exists():
        return False
    info = PostmasterInfo.read_from_pgdata(pgdata)
    if info is not None and info.is_running():
        return False
    lines = [
        line for line in conf.read_text().splitlines()
        if not re.match(r"\s*shared_buffers\s*=", line)
    ]  # fmt: skip
    conf.write_text("\n".join([*lines, f"shared_buffers = '{shared_buffers}'"]) + "\n")
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        pass
    return True


def prune_dead_holders(holders: Any) -> list[int]:
    """Drop the processes that died holding the server (killed, crashed: they never released
    it) from pgserver's list of holders (its ``DiskList``), so the last live holder still
    stops the server and :func:`tune` still sees when this process is alone; the pids
    dropped. Call it under pgserver's inter-process lock."""
    pids: list[int] = holders.get()
    dead = [p for p in pids if not _alive(p)]
    if dead:
        holders.put([p for p in pids if p not in dead])
    return dead


def _start(pgdata: Path, database: str, shared_buffers: str) -> tuple[Any, str]:
    with warnings.catch_warnings():  # platformdirs warns about XDG_RUNTIME_DIR on servers
        warnings.simplefilter("ignore")
        import pgserver  # heavy import, only when the embedded server is used
        from pgserver.utils import DiskList  # type: ignore[import-untyped]

    # pgserver logs a failed start with the whole server log at ERROR; the error raised here
    # says the same in one line and names the log file
    logging.getLogger("pgserver").setLevel(logging.CRITICAL)
    pgdata.mkdir(parents=True, exist_ok=True)
    with pgserver.PostgresServer._lock:  # type: ignore[attr-defined]  # no start meanwhile
        holders = DiskList(pgdata / HOLDERS_FILE)
        if dead := prune_dead_holders(holders):
            log.warning("db.embedded.dead_holders_dropped", pids=dead)
        if os.getpid() not in holders.get():
            # a handle this process released while others held the server stays cached by
            # pgserver, and reusing it would not list us as a holder again: start afresh
            pgserver.PostgresServer._instances.pop(pgdata.resolve(), None)  # type: ignore[attr-defined]
        preset(pgdata, shared_buffers)  # a stopped cluster starts with the configured value
    try:
        server = pgserver.get_server(pgdata, cleanup_mode="stop")  # type: ignore[attr-defined]
    except (
        subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError, RuntimeError,
        AssertionError,  # pgserver asserts the postmaster came up
    ) as exc:  # fmt: skip
        # pgserver keeps the failed handle per data directory: a later try must start afresh
        pgserver.PostgresServer._instances.pop(pgdata.resolve(), None)  # type: ignore[attr-defined]
        raise DatabaseUnavailable(
            f"could not start the embedded PostgreSQL in {pgdata} "
            f"(shared_buffers={shared_buffers}, EMBEDDED_PG_SHARED_BUFFERS): {_reason(exc)}; "
            f"see {pgdata / 'log'}"
        ) from None
    try:
        if not tune(server, shared_buffers):
            log.info("db.embedded.tuning_deferred", shared_buffers=shared_buffers)
    except (DatabaseUnavailable, subprocess.CalledProcessError, OSError) as exc:
        server.cleanup()
        if isinstance(exc, DatabaseUnavailable):
            raise
        raise DatabaseUnavailable(
            f"could not set shared_buffers={shared_buffers} on the embedded PostgreSQL: {exc} "
            f"(see {pgdata / 'log'}; EMBEDDED_PG_SHARED_BUFFERS)"
        ) from None
    exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{database}';")
    if "(1 row)" not in exists:
        # another process may create it at the same moment
        with contextlib.suppress(subprocess.CalledProcessError):
            server.psql(f'CREATE DATABASE "{database}";')
    return server, server.get_uri(database)


@asynccontextmanager
async def embedded_postgres(
    home: Path, database: str = DATABASE_NAME, *, shared_buffers: str = DEFAULT_SHARED_BUFFERS
) -> AsyncIterator[str]:
    """Start (or join) the embedded server under ``home`` and yield its URL."""
    pgdata = home / "postgres"
    server, url = await trio.to_thread.run_sync(_start, pgdata, database, shared_buffers)
    log.info("db.embedded", pgdata=str(pgdata))
    try:
        yield url
    finally:
        # Release our handle; the server stops when no other process holds it.
        with trio.move_on_after(15, shield=True):
            await trio.to_thread.run_sync(server.cleanup)
