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

If the server dies under engram (killed, crashed, stopped by hand), :func:`keep_running`
notices within ``watch_interval`` seconds, logs why it stopped — the last lines of the server's
log file (``db.embedded.died``) — and starts it again, with backoff until it comes up
(meanwhile the pool's connects fail and the process waits the outage out, see
:mod:`runtime.db_health`). The postmaster pg_ctl starts is orphaned at once; engram makes
itself the *child subreaper* (Linux) so that orphan, and its backends, become engram's
children when they die and can be reaped: a dead postmaster left as a zombie by an init that
does not reap would block the restart ("another postmaster is running").
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import re
import subprocess
import sys
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
LOG_FILE = "log"  # pgserver's server log, in the data directory
RESTART_BACKOFF = (0.5, 10.0)  # first and largest delay between attempts to restart the server
_PR_SET_CHILD_SUBREAPER = 36


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
        line
        for line in conf.read_text().splitlines()
        if not re.match(r"\s*shared_buffers\s*=", line)
    ]
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
        subprocess.CalledProcessError,
        subprocess.TimeoutExpired,
        OSError,
        RuntimeError,
        AssertionError,  # pgserver asserts the postmaster came up
    ) as exc:
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


def become_subreaper() -> bool:
    """Make orphaned descendants (the postmaster pg_ctl leaves behind, its backends) children of
    this process, so their exit can be reaped (Linux; False elsewhere or if refused)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def last_log_lines(pgdata: Path, count: int = 20) -> list[str]:
    """The server log's last ``count`` non-empty lines (why it stopped, if it could say)."""
    try:
        with (pgdata / LOG_FILE).open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [line for line in tail.splitlines() if line.strip()][-count:]


def _postmaster_alive(server: Any) -> bool:
    import psutil

    info = server._postmaster_info
    if info is None:
        return False
    try:
        return bool(info.process.is_running() and info.process.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _reap_dead_servers() -> list[int]:
    """Reap this process's zombie children named ``postgres`` (a dead postmaster and its
    backends, ours as the subreaper); the pids reaped."""
    import psutil

    reaped = []
    for child in psutil.Process().children():
        try:
            if child.status() == psutil.STATUS_ZOMBIE and child.name().startswith("postgres"):
                os.waitpid(child.pid, os.WNOHANG)
                reaped.append(child.pid)
        except (psutil.Error, ChildProcessError):
            continue
    return reaped


def _restart(server: Any) -> None:
    """Start the dead server again (blocking), unless another process already did."""
    from pgserver.utils import PostmasterInfo

    _reap_dead_servers()
    with server._lock:  # pgserver's inter-process lock around starting the server
        info = PostmasterInfo.read_from_pgdata(server.pgdata)
        if info is not None and info.is_running() and info.status == "ready":
            server._postmaster_info = info  # restarted by another engram process
            return
        server._postmaster_info = None
        server.ensure_postgres_running()


async def keep_running(server: Any, pgdata: Path, watch_interval: float = 1.0) -> None:
    """Watch the embedded server's postmaster; when it has died, log why and start it again
    with backoff (see the module docstring). Runs until cancelled; never raises otherwise."""
    while True:
        await trio.sleep(watch_interval)
        if _postmaster_alive(server):
            continue
        log.error(
            "db.embedded.died",
            pgdata=str(pgdata),
            pid=getattr(server._postmaster_info, "pid", None),
            last_log=last_log_lines(pgdata),
        )
        delay, attempts = RESTART_BACKOFF[0], 0
        while True:
            attempts += 1
            try:
                await trio.to_thread.run_sync(_restart, server)
            except (subprocess.SubprocessError, OSError, AssertionError, RuntimeError) as exc:
                log.warning(
                    "db.embedded.restart_failed",
                    attempt=attempts,
                    retry_in=delay,
                    error=_reason(exc),
                    last_log=last_log_lines(pgdata, 3),
                )
                await trio.sleep(delay)
                delay = min(RESTART_BACKOFF[1], delay * 2)
                continue
            log.warning(
                "db.embedded.restarted",
                attempts=attempts,
                pid=getattr(server._postmaster_info, "pid", None),
            )
            break


@asynccontextmanager
async def embedded_postgres(
    home: Path,
    database: str = DATABASE_NAME,
    *,
    shared_buffers: str = DEFAULT_SHARED_BUFFERS,
    watch_interval: float = 1.0,
) -> AsyncIterator[str]:
    """Start (or join) the embedded server under ``home`` and yield its URL; while the block
    runs, the server is restarted if it dies (:func:`keep_running`)."""
    pgdata = home / "postgres"
    become_subreaper()
    server, url = await trio.to_thread.run_sync(_start, pgdata, database, shared_buffers)
    log.info("db.embedded", pgdata=str(pgdata))
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(keep_running, server, pgdata, watch_interval)
            try:
                yield url
            finally:
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:  # the block's own error, alone: not a group of ours
        if len(group.exceptions) != 1:
            raise
        exc = group.exceptions[0]
        saved = exc.__context__, exc.__cause__, exc.__suppress_context__
        try:
            raise exc  # the original error; its context is restored below
        finally:
            exc.__context__, exc.__cause__, exc.__suppress_context__ = saved
    finally:
        # Release our handle; the server stops when no other process holds it.
        with trio.move_on_after(15, shield=True):
            await trio.to_thread.run_sync(server.cleanup)
