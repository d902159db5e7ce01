"""``engram chats``: who may talk to the bot, and what the database holds per chat.

    engram chats                 every chat: allowed (by what), messages, patterns, kept updates,
                                 journal entries
    engram chats allow ID        store ID as allowed; its kept updates are answered
    engram chats revoke ID       remove a stored chat (the setting's chats stay allowed)

A chat is allowed by ``TELEGRAM_ALLOWED_CHAT_IDS`` or by the database (pairing with the code
``engram serve`` prints, or ``chats allow``); a running ``engram serve`` sees a change within
seconds. Imports are lazy (inside the handlers).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from runtime.cli import fail

if TYPE_CHECKING:
    from actors.settings import Settings
    from actors.telegram.access import AllowedChat, ChatSummary


def allowed_by(summary: ChatSummary, setting: frozenset[int], timezone: str) -> str:
    """The ``allowed`` cell: ``setting``, ``paired <when> (user U)``, ``cli <when>`` or ``no``."""
    parts = ["setting"] if summary.chat_id in setting else []
    if summary.stored is not None:
        parts.append(stored_text(summary.stored, timezone))
    return ", ".join(parts) or "no"


def stored_text(chat: AllowedChat, timezone: str) -> str:
    from runtime.clock import local_datetime

    how = "paired" if chat.allowed_by == "pairing" else "engram chats allow"
    who = f" (user {chat.user_id})" if chat.user_id is not None else ""
    return f"{how} {local_datetime(chat.allowed_at, timezone)}{who}"


async def cmd_chats(settings: Settings, args: argparse.Namespace) -> int:
    """The table of chats."""
    from actors.cli.patterns import render_table
    from actors.telegram.access import chat_summaries
    from runtime.cli import open_settings_database
    from runtime.migrate import apply_migrations

    setting = settings.telegram_allowed_chat_ids
    async with open_settings_database(settings) as db:
        await apply_migrations(db)
        chats = await chat_summaries(db, sorted(setting))
    if not chats:
        print("no chats yet (pair one: run `engram serve` and send it the code it prints)")
        return 0
    rows = [
        (
            c.chat_id,
            allowed_by(c, setting, settings.timezone),
            c.messages,
            c.patterns,
            c.held,
            c.journal,
        )
        for c in chats
    ]
    header = ("chat", "allowed", "messages", "patterns", "kept updates", "journal")
    print(render_table(header, rows))
    return 0


async def cmd_allow(settings: Settings, args: argparse.Namespace) -> int:
    """Store a chat as allowed and release its kept updates into the inbox."""
    from actors.telegram import access
    from runtime.cli import open_settings_database
    from runtime.migrate import apply_migrations

    chat_id: int = args.chat_id
    async with open_settings_database(settings) as db:
        await apply_migrations(db)
        async with db.transaction() as conn:
            new = await access.allow_chat(conn, chat_id, "cli")
            released = await access.release_held(conn, chat_id)
    if chat_id in settings.telegram_allowed_chat_ids:
        print(f"chat {chat_id} is allowed by TELEGRAM_ALLOWED_CHAT_IDS (now stored too)")
    else:
        print(f"chat {chat_id} {'allowed' if new else 'was already allowed'}")
    if released:
        print(f"{released} kept update(s) will be answered (a running engram serve picks them up)")
    return 0


async def cmd_revoke(settings: Settings, args: argparse.Namespace) -> int:
    """Remove a stored chat; the setting's chats cannot be revoked here."""
    from actors.telegram import access
    from runtime.cli import open_settings_database
    from runtime.migrate import apply_migrations

    chat_id: int = args.chat_id
    async with open_settings_database(settings) as db:
        await apply_migrations(db)
        removed = await access.revoke_chat(db, chat_id)
    in_setting = chat_id in settings.telegram_allowed_chat_ids
    if removed:
        print(f"chat {chat_id} revoked")
    if in_setting:
        return fail(
            f"chat {chat_id} is allowed by TELEGRAM_ALLOWED_CHAT_IDS: remove it from the setting",
            1,
        )
    if not removed:
        return fail(f"chat {chat_id} was not allowed", 1)
    return 0


def chat_id_arg(text: str) -> int:
    """A chat id on the command line (argparse ``type``)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a chat id: {text!r}") from None


def register(subparsers: Any) -> None:
    """Add ``engram chats [allow ID | revoke ID]``."""
    parser = subparsers.add_parser(
        "chats", help="list chats (allowed or not, messages, patterns); allow or revoke one"
    )
    parser.set_defaults(handler=cmd_chats)
    sub = parser.add_subparsers(dest="chats_command", metavar="ACTION")
    p = sub.add_parser("allow", help="allow a chat by id (its kept updates are answered)")
    p.add_argument("chat_id", type=chat_id_arg, metavar="ID")
    p.set_defaults(handler=cmd_allow)
    p = sub.add_parser("revoke", help="remove a chat allowed in the database")
    p.add_argument("chat_id", type=chat_id_arg, metavar="ID")
    p.set_defaults(handler=cmd_revoke)
