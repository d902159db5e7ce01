"""The process's own settings section, :class:`ProcessSettings` (database, data directory, HTTP
server, logging, time zone, actor kernel), and the parsers only it uses.

The section machinery and the loader are :mod:`runtime.settings`; the parsers the sections share
are :mod:`runtime.parsers`.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import zoneinfo
from pathlib import Path
from typing import ClassVar

import attrs
import platformdirs

from runtime.db_url import database_url, redact_url, url_passwords
from runtime.errors import SettingsError
from runtime.parsers import choice, float_range, host, int_range, visible
from runtime.settings import Field, SettingsSection
from runtime.supervisor import RestartPolicy

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


# --- the process section's own parsers (the shared ones are runtime.parsers) -----------------


def _log_level(raw: str) -> str:
    value = raw.strip().upper()
    if value not in LOG_LEVELS:
        raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}, got {raw.strip()!r}")
    return value


def _timezone(raw: str) -> str:
    name = raw.strip()
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown IANA time zone {name!r}") from None
    return name


_PG_UNITS = {"kB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}


def _pg_memory(raw: str) -> str:
    """A PostgreSQL memory size such as ``512MB`` or ``2GB`` (128kB .. 1TB)."""
    value = raw.strip()
    m = re.fullmatch(r"(\d{1,10})\s*(kB|MB|GB|TB)", value)
    if not m:
        raise ValueError(f"expected a size like 512MB or 1GB, got {value!r}")
    size = int(m.group(1)) * _PG_UNITS[m.group(2)]
    if not 128 * 1024 <= size <= 1 << 40:
        raise ValueError(f"must be between 128kB and 1TB, got {value!r}")
    return f"{m.group(1)}{m.group(2)}"


def _path(raw: str) -> Path:
    return Path(raw.strip()).expanduser()


def _home(raw: str) -> Path:
    """ENGRAM_HOME: a directory, or a path where one can be made (nothing is created here)."""
    path = _path(raw)
    if path.exists() and not path.is_dir():
        raise ValueError(f"is not a directory: {str(path)!r}")
    parent = next((p for p in path.absolute().parents if p.exists()), None)
    if not path.exists() and parent is not None and not parent.is_dir():
        raise ValueError(f"cannot be made: {str(parent)!r} is not a directory")
    return path


def default_home() -> str:
    """The platform's user data directory for engram."""
    return platformdirs.user_data_dir("engram", appauthor=False)


@attrs.frozen(kw_only=True, slots=False)
class ProcessSettings(SettingsSection):
    """The process: database, data directory, HTTP server, logging, time zone, actor kernel."""

    fields: ClassVar[tuple[Field, ...]] = (
        Field(
            "DATABASE_URL",
            "database_url",
            "",
            database_url,
            "PostgreSQL server (with pgvector). Empty: an embedded server in ENGRAM_HOME.",
            show=redact_url,
            secrets_in=url_passwords,
        ),
        Field(
            "ENGRAM_HOME", "home", default_home, _home, "Data directory (embedded database, state)."
        ),
        Field(
            "EMBEDDED_PG_SHARED_BUFFERS",
            "embedded_pg_shared_buffers",
            "1GB",
            _pg_memory,
            "shared_buffers of the embedded server (PostgreSQL's own default is 128MB).",
        ),
        Field("ENGRAM_HOST", "host", "127.0.0.1", host, "Address the HTTP server binds to."),
        Field("ENGRAM_PORT", "port", "8080", int_range(0, 65535), "Port of the HTTP server."),
        Field(
            "HTTP_MAX_CONNECTIONS",
            "http_max_connections",
            "256",
            int_range(1, 100_000),
            "Open HTTP connections at most; when all are taken and a client waits, the one "
            "waiting longest on its client (idle, or a request not fully sent) is closed.",
        ),
        Field(
            "HTTP_IDLE_TIMEOUT",
            "http_idle_timeout",
            "15",
            float_range(0.1, 3600),
            "Seconds an HTTP connection may stay idle (no request in progress) before it is "
            "closed.",
        ),
        Field("LOG_LEVEL", "log_level", "INFO", _log_level, "DEBUG, INFO, WARNING or ERROR."),
        Field(
            "LOG_FORMAT",
            "log_format",
            "auto",
            choice("auto", "json", "console"),
            "auto: JSON lines when stderr is not a TTY, coloured console otherwise.",
        ),
        Field(
            "TIMEZONE",
            "timezone",
            "Europe/Madrid",
            _timezone,
            "IANA zone for dates the bot shows and infers.",
        ),
        Field(
            "TIME_FORMAT",
            "time_format",
            "24h",
            choice("24h", "12h"),
            "How times of day are shown to you and the model: 24h (09:15) or 12h (9:15 AM).",
        ),
        Field("DB_POOL_MIN", "db_pool_min", "1", int_range(0, 100), "Minimum pool connections."),
        Field("DB_POOL_MAX", "db_pool_max", "10", int_range(1, 200), "Maximum pool connections."),
        Field(
            "DB_CONNECT_TIMEOUT",
            "db_connect_timeout",
            "10",
            float_range(0.1, 300),
            "Seconds to wait for the database at start-up before giving up.",
        ),
        Field(
            "DB_OUTAGE_LIMIT",
            "db_outage_limit",
            "300",
            float_range(1, 86400),
            "Seconds the database may stay unreachable while serving before the process exits 1.",
        ),
        Field(
            "SHUTDOWN_DEADLINE",
            "shutdown_deadline",
            "10",
            float_range(0, 600),
            "Seconds actors get to drain on SIGINT/SIGTERM before being cancelled.",
        ),
        Field(
            "ACTOR_IDLE_TIMEOUT",
            "actor_idle_timeout",
            "600",
            float_range(0.01, 86400),
            "Seconds without messages before a chat actor stops.",
        ),
        Field(
            "CHAT_LEASE_TTL",
            "chat_lease_ttl",
            "10",
            float_range(1, 600),
            "Seconds a process's lease on a chat lasts unrenewed (renewed each third): when a "
            "process dies, another takes its chats over within about 1.5 times this.",
        ),
        Field(
            "ENGRAM_INSTANCE",
            "instance",
            "",
            visible("a name"),
            "This process's name among several on one database (empty: host, port and home). "
            "A process restarted under the same name takes its chats back at once.",
        ),
        Field(
            "ACTOR_MAX_LIVE",
            "actor_max_live",
            "1000",
            int_range(1, 1_000_000),
            "Live chat actors at most; when full the least recently used idle one is stopped.",
        ),
        Field(
            "MAILBOX_SIZE",
            "mailbox_size",
            "64",
            int_range(1, 100_000),
            "Capacity of each actor mailbox.",
        ),
        Field(
            "RESTART_BACKOFF_BASE",
            "restart_backoff_base",
            "0.5",
            float_range(0, 60),
            "First restart delay of a crashed actor, doubled per restart.",
        ),
        Field(
            "RESTART_BACKOFF_CAP",
            "restart_backoff_cap",
            "30",
            float_range(0, 3600),
            "Largest restart delay.",
        ),
        Field(
            "RESTART_MAX",
            "restart_max",
            "5",
            int_range(1, 1000),
            "Crashes within RESTART_WINDOW after which the failure escalates (exit 1).",
        ),
        Field(
            "RESTART_WINDOW",
            "restart_window",
            "60",
            float_range(1, 86400),
            "Window in seconds for RESTART_MAX.",
        ),
    )

    database_url: str
    home: Path
    embedded_pg_shared_buffers: str = "1GB"
    host: str
    port: int
    http_max_connections: int = 256
    http_idle_timeout: float = 15.0
    log_level: str
    log_format: str
    timezone: str
    time_format: str = "24h"
    db_pool_min: int
    db_pool_max: int
    db_connect_timeout: float
    db_outage_limit: float = 300.0
    shutdown_deadline: float
    actor_idle_timeout: float
    chat_lease_ttl: float = 10.0
    instance: str = ""
    actor_max_live: int
    mailbox_size: int
    restart_backoff_base: float
    restart_backoff_cap: float
    restart_max: int
    restart_window: float

    def restart_policy(self) -> RestartPolicy:
        """The supervisors' restart policy (RESTART_*)."""
        return RestartPolicy(
            backoff_base=self.restart_backoff_base,
            backoff_cap=self.restart_backoff_cap,
            max_restarts=self.restart_max,
            window=self.restart_window,
        )

    def instance_name(self) -> str:
        """ENGRAM_INSTANCE, else ``host:port:<home digest>`` (and the pid on a random port):
        the same on a restart, different for two processes that may run at once."""
        if self.instance:
            return self.instance
        home = hashlib.sha256(str(self.home).encode()).hexdigest()[:8]
        name = f"{socket.gethostname()}:{self.port}:{home}"
        return name if self.port else f"{name}:{os.getpid()}"

    def check(self) -> list[SettingsError]:
        problems = []
        if self.db_pool_min > self.db_pool_max:
            problems.append(SettingsError("DB_POOL_MIN", "must not exceed DB_POOL_MAX"))
        if self.restart_backoff_base > self.restart_backoff_cap:
            problems.append(
                SettingsError("RESTART_BACKOFF_BASE", "must not exceed RESTART_BACKOFF_CAP")
            )
        return problems
