"""``engram memory erase --chat ID [--yes]``: a whole chat erased (issue 24 item 5).

Shows what the chat holds (rows per table), asks on the terminal for the chat id typed back
(``--yes``: no question; without a terminal and without ``--yes``: refused), then erases every
row of the chat in every table with a ``chat_id`` column in one transaction, and its vault folder
(:func:`memory.erase.chat.erase_chat`). A running ``engram serve`` may stay up: a turn of the chat
in flight cannot write its rows afterwards (its commit needs its inbox rows), a compaction in
progress finishes first. Imports are lazy (inside the handler).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from actors.cli.chats import chat_id_arg
from runtime.cli import fail

if TYPE_CHECKING:
    from actors.settings import Settings


def summary(rows: Mapping[str, int]) -> str:
    """``chat_messages 12, patterns 3, ...`` (tables by name)."""
    return ", ".join(f"{table} {n}" for table, n in sorted(rows.items()))


def confirmed(chat_id: int, ask: Callable[[str], str] = input) -> bool:
    """The chat id typed back on the terminal."""
    try:
        answer = ask(f"Type the chat id ({chat_id}) to erase it for good, anything else keeps it: ")
    except EOFError:
        return False
    return answer.strip() == str(chat_id)


async def cmd_erase(settings: Settings, args: argparse.Namespace) -> int:
    """Erase one chat (see the module docstring)."""
    from actors.chat.erase_command import vault_folder
    from memory.erase.chat import count_chat_rows, erase_chat
    from runtime.cli import open_settings_database
    from runtime.migrate import apply_migrations

    chat_id: int = args.chat
    folder = vault_folder(settings.vault_dir, settings.home)(chat_id)
    async with open_settings_database(settings) as db:
        await apply_migrations(db)
        rows = await count_chat_rows(db, chat_id)
        has_folder = folder is not None and folder.exists()
        if not rows and not has_folder:
            print(f"chat {chat_id}: nothing to erase")
            return 0
        print(f"chat {chat_id}: {summary(rows) or 'no rows'}")
        if has_folder:
            print(f"vault folder: {folder}")
        if not args.yes:
            if not sys.stdin.isatty():
                return fail("not a terminal: add --yes to erase without a question", 2)
            if not confirmed(chat_id):
                print("nothing erased")
                return 1
        done = await erase_chat(db, chat_id, folder=folder)
    assert done is not None
    print(f"chat {chat_id} erased: {done.total} rows in {len(done.rows)} tables", end="")
    print(", vault folder removed" if done.folder_removed else "")
    if folder is not None and folder.exists():
        return fail(f"the vault folder {folder} could not be removed: remove it by hand", 1)
    if chat_id in settings.telegram_allowed_chat_ids:
        print(f"chat {chat_id} is still allowed by TELEGRAM_ALLOWED_CHAT_IDS")
    return 0


def add_erase(memory_sub: Any) -> None:
    """``erase`` under ``engram memory``."""
    p = memory_sub.add_parser(
        "erase", help="erase a whole chat: every row of it in every table, and its vault folder"
    )
    p.add_argument("--chat", type=chat_id_arg, required=True, metavar="ID")
    p.add_argument("--yes", action="store_true", help="do not ask (for scripts)")
    p.set_defaults(handler=cmd_erase)
