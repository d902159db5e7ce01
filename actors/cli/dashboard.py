"""``engram dashboard link [--chat ID] [--base-url URL]``: print a one-time login link to the
dashboard (valid 15 minutes, usable once), for the operator (every chat) or scoped to one chat
(give it to that chat's person). Needs ``DASHBOARD_TOKEN`` (the dashboard is off without it).
Imports are lazy (inside the handler)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from actors.cli.chats import chat_id_arg
from runtime.cli import fail

if TYPE_CHECKING:
    from actors.settings import Settings


def base_url(settings: Settings, given: str | None) -> str:
    """Where the dashboard is reached: ``--base-url``, else ENGRAM_HOST:ENGRAM_PORT."""
    if given:
        return given.rstrip("/")
    host = settings.host if settings.host not in ("0.0.0.0", "::") else "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{settings.port}"


async def cmd_link(settings: Settings, args: argparse.Namespace) -> int:
    """Store a one-time link and print it."""
    from datetime import UTC, datetime

    from actors.dashboard.auth import LINK_MINUTES, create_link
    from runtime.cli import open_settings_database
    from runtime.migrate import apply_migrations

    if not settings.dashboard_token:
        return fail("the dashboard is off: set DASHBOARD_TOKEN first", 2)
    async with open_settings_database(settings) as db:
        await apply_migrations(db)
        secret = await create_link(db, args.chat, datetime.now(UTC))
    scope = f"chat {args.chat}" if args.chat is not None else "every chat"
    print(f"{base_url(settings, args.base_url)}/dashboard/login/{secret}")
    print(f"(one use, valid {LINK_MINUTES} minutes, sees {scope})")
    return 0


def register(subparsers: Any) -> None:
    """Add ``engram dashboard link``."""
    parser = subparsers.add_parser("dashboard", help="the web dashboard: one-time login links")
    sub = parser.add_subparsers(dest="dashboard_command", metavar="ACTION", required=True)
    p = sub.add_parser("link", help="print a one-time login link (15 minutes, one use)")
    p.add_argument(
        "--chat",
        type=chat_id_arg,
        default=None,
        metavar="ID",
        help="the link sees only this chat (default: every chat)",
    )
    p.add_argument(
        "--base-url",
        default=None,
        metavar="URL",
        help="where the dashboard is reached (default: http://ENGRAM_HOST:ENGRAM_PORT)",
    )
    p.set_defaults(handler=cmd_link)
