"""Command-line plumbing: settings, logging, exit codes, and the core commands.

Exit codes: 0 success (including a clean shutdown), 1 runtime failure (database unreachable at
start-up or for DB_OUTAGE_LIMIT seconds while serving, an actor escalated past its restart
budget), 2 bad configuration or usage. Errors print one line on stderr; secrets never appear
in it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from functools import partial
from typing import Any

import trio

from runtime import db as dbmod
from runtime.embedded_pg import embedded_postgres
from runtime.errors import (
    DatabaseError,
    DatabaseOutage,
    EngramError,
    EscalationError,
    SettingsError,
    leaf_exceptions,
)
from runtime.logs import SecretScrubber, configure_logging
from runtime.migrate import apply_migrations
from runtime.settings import ProcessSettings, load_settings

Handler = Callable[[ProcessSettings, argparse.Namespace], Awaitable[int]]


def database_url_context(settings: ProcessSettings) -> AbstractAsyncContextManager[str]:
    """The configured DATABASE_URL, or the embedded server's URL for its lifetime."""
    if settings.database_url:

        @asynccontextmanager
        async def given() -> Any:
            yield settings.database_url

        return given()
    return embedded_postgres(settings.home, shared_buffers=settings.embedded_pg_shared_buffers)


@asynccontextmanager
async def open_settings_database(settings: ProcessSettings) -> Any:
    """asyncio loop + (embedded server) + pool, for commands that need the database."""
    async with (
        dbmod.asyncio_loop(),
        database_url_context(settings) as url,
        dbmod.open_database(
            url,
            min_size=settings.db_pool_min,
            max_size=settings.db_pool_max,
            connect_timeout=settings.db_connect_timeout,
        ) as database,
    ):
        yield database


async def cmd_migrate(settings: ProcessSettings, args: argparse.Namespace) -> int:
    async with open_settings_database(settings) as database:
        applied = await apply_migrations(database)
    print(f"applied {len(applied)} migration(s)" + (": " + ", ".join(applied) if applied else ""))
    return 0


async def cmd_config(settings: ProcessSettings, args: argparse.Namespace) -> int:
    """Print the effective configuration (every section of the loaded settings), secrets masked."""
    for f in type(settings).fields:
        value = getattr(settings, f.attr)
        if f.secret:
            shown = "(set)" if value else "(not set)"
        elif isinstance(value, frozenset):
            shown = ",".join(str(v) for v in sorted(value))
        else:
            shown = str(value)
        print(f"{f.env}={shown}")
    return 0


def base_parser() -> tuple[argparse.ArgumentParser, Any]:
    """The parser with the core commands; packages add theirs to the returned subparsers."""
    parser = argparse.ArgumentParser(
        prog="engram", description="A Telegram companion bot with long-term memory."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    p = sub.add_parser("migrate", help="apply pending database migrations")
    p.set_defaults(handler=cmd_migrate)
    p = sub.add_parser("config", help="print the effective configuration (secrets masked)")
    p.set_defaults(handler=cmd_config)
    return parser, sub


def fail(message: str, code: int, secrets: Sequence[str] = ()) -> int:
    line = SecretScrubber(secrets).scrub(" ".join(message.split()))
    print(f"engram: {line}", file=sys.stderr)
    return code


def run_cli(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None = None,
    *,
    load: Callable[[], ProcessSettings],
) -> int:
    """Parse, load settings with ``load``, configure logging and run the chosen handler under trio.

    ``load`` builds the settings the handlers receive: the process's own section for the bare
    runtime, every package's sections combined for the bot (``actors.settings.load_settings``).
    """
    args = parser.parse_args(argv)
    try:
        settings = load()
    except SettingsError as exc:
        return fail(f"configuration error: {exc}", 2)
    configure_logging(settings.log_level, settings.log_format, settings.secrets())
    handler: Handler = args.handler
    try:
        return trio.run(handler, settings, args)
    except (Exception, KeyboardInterrupt, BaseExceptionGroup) as exc:
        return exit_code_for(exc, settings.secrets())


def exit_code_for(exc: BaseException, secrets: Sequence[str] = ()) -> int:
    """Print the one-line reason for a failed command and return its exit code."""
    leaves = leaf_exceptions(exc)
    for leaf in leaves:
        if isinstance(leaf, DatabaseOutage):  # its message is the whole line
            return fail(str(leaf), 1, secrets)
    for kind, prefix, code in (
        (SettingsError, "configuration error", 2),
        (EscalationError, "fatal", 1),
        (DatabaseError, "database", 1),
        (EngramError, "error", 1),
    ):
        for leaf in leaves:
            if isinstance(leaf, kind):
                return fail(f"{prefix}: {leaf}", code, secrets)
    if all(isinstance(leaf, KeyboardInterrupt) for leaf in leaves):
        return 130
    raise exc


def main(argv: Sequence[str] | None = None) -> int:
    parser, _ = base_parser()
    return run_cli(parser, argv, load=partial(load_settings, ProcessSettings))


if __name__ == "__main__":
    sys.exit(main())
