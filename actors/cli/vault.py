"""``engram vault rebuild [--chat ID]``: every file of a chat's markdown vault (or of every
chat's) regenerated from the database, with a progress bar; the same code path as the vault
writer's incremental writes (:func:`memory.vault.write.render_and_sync`), so the same bytes.
Exit 2 when VAULT=off or the chat has nothing to show."""

from __future__ import annotations

import argparse
import sys
from functools import partial
from typing import TYPE_CHECKING, Any

from actors.cli.chats import chat_id_arg
from runtime.cli import fail, open_settings_database

if TYPE_CHECKING:
    from actors.settings import Settings


async def cmd_vault_rebuild(settings: Settings, args: argparse.Namespace) -> int:
    """Rewrite every vault file of ``--chat`` (or of every chat) from the database."""
    import trio

    from memory.vault.data import vault_chats
    from memory.vault.files import sync_folder
    from memory.vault.render import render_vault
    from memory.vault.settings import chat_folder, vault_root
    from memory.vault.write import read_chat
    from runtime.migrate import apply_migrations
    from runtime.progress import Progress

    if settings.vault != "on":
        return fail("VAULT=off: no vault is kept (set VAULT=on to keep one)", 2)
    root = vault_root(settings.vault_dir, settings.home)
    async with open_settings_database(settings) as db:
        await apply_migrations(db)
        chats = await vault_chats(db)
        if args.chat is not None:
            if args.chat not in chats:
                return fail(f"chat {args.chat} has no messages or memories to write", 2)
            chats = [args.chat]
        for chat_id in chats:
            data = await read_chat(db, chat_id, settings.timezone)
            files = render_vault(data)
            folder = chat_folder(root, chat_id)
            with Progress(len(files), label=f"chat {chat_id}") as bar:
                job = partial(sync_folder, folder, files, force=True, advance=bar.advance)
                stats = await trio.to_thread.run_sync(job)
            print(
                f"chat {chat_id}: {stats.written} files written ({stats.bytes:,} bytes), "
                f"{stats.deleted} removed, in {folder}",
                file=sys.stdout,
            )
    if not chats:
        print(f"no chat has anything to write yet ({root})")
    return 0


def register(subparsers: Any) -> None:
    """Add ``vault rebuild`` to the ``engram`` command's subparsers."""
    vault = subparsers.add_parser("vault", help="the markdown vault (VAULT_DIR)")
    sub = vault.add_subparsers(dest="vault_command", metavar="COMMAND")
    sub.required = True
    p = sub.add_parser(
        "rebuild", help="regenerate every vault file from the database (progress bar)"
    )
    p.add_argument("--chat", type=chat_id_arg, metavar="ID", help="only this chat's vault")
    p.set_defaults(handler=cmd_vault_rebuild)
