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
from typing import TYPE_CHECKING, Any

from runtime.errors import (
    DatabaseError,
    DatabaseOutage,
    EngramError,
    EscalationError,
    SettingsError,
    leaf_exceptions,
    settings_error,
    settings_problems,
)

if TYPE_CHECKING:  # imported where used: --help, --version and usage errors stay fast
    from runtime.process_settings import ProcessSettings

Handler = Callable[["ProcessSettings", argparse.Namespace], Awaitable[int]]
#: A command's own start-up check (``args.check``): raises SettingsError(s) for what is missing.
Check = Callable[["ProcessSettings", argparse.Namespace], None]


def database_url_context(settings: ProcessSettings) -> AbstractAsyncContextManager[str]:
    """The configured DATABASE_URL, or the embedded server's URL for its lifetime."""
    from runtime.embedded_pg import embedded_postgres

    if settings.database_url:

        @asynccontextmanager
        async def given() -> Any:
            yield settings.database_url

        return given()
    return embedded_postgres(settings.home, shared_buffers=settings.embedded_pg_shared_buffers)


@asynccontextmanager
async def open_settings_database(settings: ProcessSettings) -> Any:
    """asyncio loop + (embedded server) + pool, for commands that need the database."""
    from runtime import db as dbmod

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
    from runtime.migrate import apply_migrations

    async with open_settings_database(settings) as database:
        applied = await apply_migrations(database)
    print(f"applied {len(applied)} migration(s)" + (": " + ", ".join(applied) if applied else ""))
    return 0


async def cmd_config(settings: ProcessSettings, args: argparse.Namespace) -> int:
    """Print the effective configuration (every section of the loaded settings), secrets masked."""
    for f in type(settings).fields:
        print(f"{f.env}={settings.shown(f)}")
    return 0


def base_parser() -> tuple[argparse.ArgumentParser, Any]:
    """The parser with the core commands; packages add theirs to the returned subparsers."""
    parser = argparse.ArgumentParser(
        prog="engram", description="A Telegram companion bot with long-term memory."
    )
    parser.add_argument("--version", action="version", version=f"engram {version()}")
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show the log at LOG_LEVEL (commands other than serve log only warnings)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    p = sub.add_parser("migrate", help="apply pending database migrations")
    p.set_defaults(handler=cmd_migrate)
    p = sub.add_parser("config", help="print the effective configuration (secrets masked)")
    p.set_defaults(handler=cmd_config)
    return parser, sub


def version() -> str:
    """The installed package's version (``unknown`` when run from a bare checkout)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("engram")
    except PackageNotFoundError:
        return "unknown"


def fail(message: str, code: int, secrets: Sequence[str] = ()) -> int:
    from runtime.logs import SecretScrubber

    line = SecretScrubber(secrets).scrub(" ".join(message.split()))
    print(f"engram: {line}", file=sys.stderr)
    return code


def fail_settings(error: SettingsError, secrets: Sequence[str] = ()) -> int:
    """One ``engram: configuration error: NAME: why`` line per problem; exit code 2."""
    for problem in settings_problems(error):
        fail(f"configuration error: {problem}", 2, secrets)
    return 2


def log_level_for(settings: ProcessSettings, args: argparse.Namespace) -> str:
    """LOG_LEVEL for servers (``args.quiet_logs`` false) and with ``-v``; otherwise no lower
    than WARNING, so a command's stdout and stderr carry only its output and its problems."""
    from runtime.process_settings import LOG_LEVELS

    if getattr(args, "verbose", False) or not getattr(args, "quiet_logs", True):
        return settings.log_level
    return max(settings.log_level, "WARNING", key=LOG_LEVELS.index)


def run_cli(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None = None,
    *,
    load: Callable[[], ProcessSettings],
) -> int:
    """Parse, load settings with ``load``, configure logging and run the chosen handler under trio.

    ``load`` builds the settings the handlers receive: the process's own section for the bare
    runtime, every package's sections combined for the bot (``actors.settings.load_settings``).
    Every configuration problem is reported at once: the variables ``load`` rejects, then what
    the command's own ``args.check`` (set with ``set_defaults(check=...)``) finds missing, one
    line each, exit code 2.
    """
    args = parser.parse_args(argv)
    from runtime.clock import set_time_format
    from runtime.logs import configure_logging
    from runtime.process_settings import ProcessSettings

    problems: list[SettingsError] = []
    settings: ProcessSettings | None
    try:
        settings = load()
    except SettingsError as exc:
        problems = settings_problems(exc)
        partial = getattr(exc, "partial", None)
        settings = partial if isinstance(partial, ProcessSettings) else None
    check: Check | None = getattr(args, "check", None)
    if check is not None and settings is not None:
        try:
            check(settings, args)
        except SettingsError as exc:
            problems.append(exc)
    error = settings_error(problems)
    if error is not None or settings is None:
        return fail_settings(error or SettingsError("settings", "could not be loaded"))
    set_time_format(settings.time_format)
    configure_logging(log_level_for(settings, args), settings.log_format, settings.secrets())
    handler: Handler = args.handler
    import trio  # here, not at the top: --help and usage errors never pay for it

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
    for leaf in leaves:
        if isinstance(leaf, SettingsError):
            return fail_settings(leaf, secrets)
    for kind, prefix, code in (
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
    from runtime.process_settings import ProcessSettings
    from runtime.settings import load_settings

    parser, _ = base_parser()
    return run_cli(parser, argv, load=partial(load_settings, ProcessSettings))


if __name__ == "__main__":
    sys.exit(main())
