"""``engram api-token --chat ID``: print the JSON API token that sees one chat only.

It is derived from ``DASHBOARD_TOKEN`` (:func:`actors.web.auth.chat_token`); changing that
setting revokes every such token. The operator's own token is ``DASHBOARD_TOKEN`` itself.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from actors.cli.chats import chat_id_arg
from runtime.cli import fail

if TYPE_CHECKING:
    from actors.settings import Settings


async def cmd_api_token(settings: Settings, args: argparse.Namespace) -> int:
    from actors.web.auth import chat_token

    if not settings.dashboard_token:
        return fail("DASHBOARD_TOKEN is not set: the JSON API is off", 2)
    print(chat_token(settings.dashboard_token.reveal(), args.chat))
    return 0


def register(subparsers: Any) -> None:
    """Add ``engram api-token --chat ID``."""
    p = subparsers.add_parser(
        "api-token", help="print a JSON API token that sees one chat (from DASHBOARD_TOKEN)"
    )
    p.add_argument("--chat", type=chat_id_arg, required=True, help="the chat id")
    p.set_defaults(handler=cmd_api_token)
