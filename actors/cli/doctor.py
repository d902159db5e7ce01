"""``engram doctor``: the heartbeat's checks, once, against the configured database.

    engram doctor      one line per check (severity, name, detail), then the overall status

No running server is needed and nothing is changed (migrations are not applied: a database
behind them is reported). No model or Bot API call is made: the outside services are judged by
their last recorded calls. Exit code by the worst severity: 0 ok, 3 warning, 4 critical (1 stays
the CLI's "could not run": the database unreachable; 2 a bad configuration). Imports are lazy.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from actors.settings import Settings

#: the exit code of each severity (1 and 2 are the CLI's own: failure, bad configuration)
EXIT_CODES = {"ok": 0, "warning": 3, "critical": 4}


async def cmd_doctor(settings: Settings, args: argparse.Namespace) -> int:
    """Run every check once and print them; the exit code of the worst."""
    from datetime import UTC, datetime

    from actors.scheduler.health_checks import Check, render, run_checks, worst
    from actors.scheduler.heartbeat import check_config
    from memory.embeddings.providers import embedding_model
    from runtime.cli import open_settings_database
    from runtime.migrate import migrations_current

    model = embedding_model(settings.embedding_provider, settings.openai_api_key.reveal())
    async with open_settings_database(settings) as db:
        if not await migrations_current(db):
            checks = [
                Check(
                    "database",
                    "critical",
                    "migrations not applied (engram migrate, or engram serve, applies them)",
                )
            ]
        else:
            found = await run_checks(db, check_config(settings, model), datetime.now(UTC))
            checks = [Check("database", "ok", "reachable, migrations current"), *found]
    for line in render(checks):
        print(line)
    status = worst(checks)
    print(f"engram doctor: {status}")
    return EXIT_CODES[status]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "doctor",
        help="check the bot's health once (exit 0 ok, 3 warning, 4 critical)",
    )
    p.set_defaults(handler=cmd_doctor)
