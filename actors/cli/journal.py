"""``engram journal import FILE`` (and ``engram embeddings backfill``), for the CLI.

``register(subparsers)`` adds ``journal import``; ``register_backfill(subparsers)`` adds
``embeddings backfill``. Handlers take ``(settings, args)`` and return the exit code: 0 on
success, 1 when the file is unreadable or not a Day One export (one line on stderr) or when
rows are left unembedded by ``embeddings backfill``, 2 when the import has no chat to go to
(``--chat`` not allowed, or missing with several chats allowed: one line on stderr).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, TextIO

from actors.cli import snapshot as snapshot_cli
from actors.cli.chats import chat_id_arg
from memory.embeddings.tables import ALL_TABLES
from runtime.cli import fail, open_settings_database

if TYPE_CHECKING:  # imported by the handlers: building the parser stays fast
    from actors.settings import Settings
    from memory.journal.dayone import ImportReport

PROVIDERS = ("auto", "openai", "local", "none")


def print_report(report: ImportReport, model: str | None, out: TextIO = sys.stdout) -> None:
    """The import's counts, each skipped entry with its reason, and the embedding outcome."""
    print(
        f"{report.total} entries: {report.imported} imported, {report.updated} updated, "
        f"{report.unchanged} unchanged, {len(report.skipped)} skipped",
        file=out,
    )
    for key, reason in report.skipped:
        where = f"entry #{key}" if isinstance(key, int) else key
        print(f"  skipped {where}: {reason}", file=out)
    if model is None:
        print("embeddings: not computed (--embeddings none)", file=out)
    elif report.embedding_error:
        print(
            f"embeddings ({model}): {report.embedded} stored, then failed: "
            f"{report.embedding_error}; the backfill job will embed the rest later",
            file=out,
        )
    else:
        print(f"embeddings ({model}): {report.embedded} stored", file=out)


async def cmd_journal_import(settings: Settings, args: argparse.Namespace) -> int:
    """Import a Day One export into a chat's journal (idempotent by uuid)."""
    from actors.journal_owner import JournalChatError, allowed_chats, import_chat
    from memory.embeddings.factory import open_embedder
    from memory.errors import JournalFormatError
    from memory.journal.dayone import import_dayone, read_export
    from runtime.migrate import apply_migrations
    from runtime.progress import Progress

    try:
        entries = read_export(args.file)
    except JournalFormatError as exc:
        return fail(str(exc), 1)
    export: dict[str, Any] = {"entries": entries}
    async with open_settings_database(settings) as db:
        await apply_migrations(db)
        try:
            chat_id = import_chat(
                args.chat, await allowed_chats(db, settings.telegram_allowed_chat_ids)
            )
        except JournalChatError as exc:
            return fail(str(exc), 2)
        progress = Progress(label="importing")
        if args.embeddings == "none":
            report = await import_dayone(
                db, export, chat_id=chat_id, embedder=None, progress=progress
            )
            model = None
        else:
            async with open_embedder(settings, db, provider=args.embeddings) as embedder:
                report = await import_dayone(
                    db, export, chat_id=chat_id, embedder=embedder, progress=progress
                )
                model = embedder.model
    print(f"chat {chat_id}'s journal:")
    print_report(report, model)
    return 0


async def cmd_embeddings_backfill(settings: Settings, args: argparse.Namespace) -> int:
    """Embed every row lacking a vector for the current model (one pass)."""
    from memory.embeddings.factory import open_embedder
    from memory.embeddings.store import backfill_once
    from memory.errors import EmbeddingError
    from runtime.migrate import apply_migrations

    async with open_settings_database(settings) as db:
        await apply_migrations(db)
        async with open_embedder(settings, db, provider=args.embeddings) as embedder:
            try:
                count = await backfill_once(db, embedder, tables=args.tables or ALL_TABLES)
            except EmbeddingError as exc:
                return fail(f"embedding ({embedder.model}): {exc}", 1)
    print(f"embedded {count} row(s) with {embedder.model}")
    return 0


def _provider_option(parser: argparse.ArgumentParser, choices: tuple[str, ...]) -> None:
    parser.add_argument(
        "--embeddings",
        choices=choices,
        default="auto",
        help="embedding provider (auto: OpenAI when OPENAI_API_KEY is set, else local)",
    )


def register(subparsers: Any) -> None:
    """Add ``journal import FILE`` to the ``engram`` command's subparsers."""
    journal = subparsers.add_parser("journal", help="the journal (a Day One export)")
    sub = journal.add_subparsers(dest="journal_command", metavar="COMMAND")
    sub.required = True
    p = sub.add_parser(
        "import",
        help="import a Day One JSON export (.json or .zip); re-importing updates edited entries",
    )
    p.add_argument("file", metavar="FILE", help="the export (Journal.json or the .zip)")
    p.add_argument(
        "--chat",
        type=chat_id_arg,
        metavar="ID",
        help="the chat whose journal it is (required when more than one chat is allowed)",
    )
    _provider_option(p, PROVIDERS)
    p.set_defaults(handler=cmd_journal_import)
    snapshot_cli.register_journal(sub)


def register_backfill(subparsers: Any) -> None:
    """Add ``embeddings backfill`` (embed what lacks a vector for the current model)."""
    emb = subparsers.add_parser("embeddings", help="text embeddings")
    sub = emb.add_subparsers(dest="embeddings_command", metavar="COMMAND")
    sub.required = True
    p = sub.add_parser("backfill", help="embed rows that lack a vector for the current model")
    _provider_option(p, PROVIDERS[:3])
    p.add_argument("--table", dest="tables", action="append", choices=ALL_TABLES)
    p.set_defaults(handler=cmd_embeddings_backfill)
