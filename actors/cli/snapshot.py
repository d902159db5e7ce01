"""``engram memory export|import`` and ``engram journal export``, for the CLI.

* ``engram memory export --chat ID [-o FILE] [--with-vectors] [--format snapshot|af]`` — the
  chat's snapshot (:func:`memory.export.document.build_snapshot`), or its profile and top
  patterns as a Letta Agent File (``--format af``); to FILE (written whole, then renamed) or
  stdout.
* ``engram memory import FILE [--chat ID] [--embeddings ...]`` — restore or merge a snapshot
  (:func:`memory.export.importer.import_snapshot`); a bad file: one line naming the JSON path of
  its first problem, exit 1, nothing changed.
* ``engram journal export --format dayone [--chat ID] [-o FILE]`` — the journal as a Day One
  JSON export, which ``engram journal import`` reads back into the same entries.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runtime.cli import fail, open_settings_database, version

if TYPE_CHECKING:  # imported by the handlers: building the parser stays fast
    from actors.settings import Settings
    from memory.export.importer import ImportReport


def write_output(target: str | None, data: bytes) -> str:
    """``data`` to the file ``target`` (mode 0600; a temp file renamed over it: never half a
    file) or to stdout (None or ``-``); where it went."""
    if target is None or target == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return "stdout"
    path = Path(target)
    tmp = path.with_name(f".{path.name}.tmp")
    # a person's memory: readable by its owner only, as the vault's files (0600)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # a temp file left by a crash keeps its old mode otherwise
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return str(path)


def _size(n: int) -> str:
    return f"{n / 1_000_000:.1f} MB" if n >= 1_000_000 else f"{n / 1000:.1f} kB"


async def cmd_memory_export(settings: Settings, args: argparse.Namespace) -> int:
    """Write one chat's snapshot (or Letta Agent File)."""
    from memory.embeddings.providers import embedding_model
    from memory.export.agent_file import build_agent_file
    from memory.export.document import build_snapshot, dump
    from memory.export.sections import SECTIONS
    from runtime.migrate import apply_migrations

    async with open_settings_database(settings) as db:
        await apply_migrations(db)
        if args.format == "af":
            doc = await build_agent_file(
                db, args.chat, engram_version=version(), timezone=settings.timezone
            )
            data = (json.dumps(doc, ensure_ascii=False, indent=2) + "\n").encode("utf-8")
            summary = f"{len(doc['blocks'])} memory blocks (human, persona)"
        else:
            model = embedding_model(
                settings.embedding_provider, settings.openai_api_key.reveal() or None
            )
            doc = await build_snapshot(
                db,
                args.chat,
                engram_version=version(),
                embedding_model=model,
                with_vectors=args.with_vectors,
            )
            data = dump(doc)
            summary = ", ".join(f"{len(doc[s.name])} {s.name}" for s in SECTIONS)
            if not any(doc[s.name] for s in SECTIONS):
                summary += " (engram holds nothing of this chat: is the id right?)"
    where = write_output(args.output, data)
    print(f"chat {args.chat}: {summary} -> {where} ({_size(len(data))})", file=sys.stderr)
    return 0


def print_import(report: ImportReport, model: str | None) -> None:
    """What an import added and kept, and the embedding outcome."""
    print(f"chat {report.chat_id}: imported")
    for name, added in report.added.items():
        kept = report.kept.get(name, 0)
        if added or kept:
            print(f"  {name}: {added} added" + (f", {kept} already there" if kept else ""))
    if report.vectors_stored:
        print(f"vectors from the file: {report.vectors_stored} stored")
    if model is None:
        print("embeddings: not computed (--embeddings none); the backfill job will embed them")
    elif report.embedding_error:
        print(
            f"embeddings ({model}): {report.embedded} stored, then failed: "
            f"{report.embedding_error}; the backfill job will embed the rest later"
        )
    else:
        print(f"embeddings ({model}): {report.embedded} computed")


async def cmd_memory_import(settings: Settings, args: argparse.Namespace) -> int:
    """Restore (or merge) a snapshot into a chat."""
    import trio

    from memory.embeddings.factory import open_embedder
    from memory.errors import SnapshotError
    from memory.export.importer import import_snapshot, parse, prepare
    from runtime.migrate import apply_migrations

    try:
        data = await trio.Path(args.file).read_bytes()
    except OSError as exc:
        return fail(f"cannot read {args.file}: {exc.strerror or exc}", 1)
    try:
        plan = prepare(parse(data))  # the whole file checked before the database is opened
    except SnapshotError as exc:
        return fail(f"{args.file}: {exc}", 1)
    async with open_settings_database(settings) as db:
        await apply_migrations(db)
        if args.embeddings == "none":
            report = await import_snapshot(db, plan, chat_id=args.chat)
            model = None
        else:
            async with open_embedder(settings, db, provider=args.embeddings) as embedder:
                report = await import_snapshot(db, plan, chat_id=args.chat, embedder=embedder)
                model = embedder.model
    print_import(report, model)
    return 0


async def cmd_journal_export(settings: Settings, args: argparse.Namespace) -> int:
    """Write a chat's journal as a Day One JSON export."""
    from actors.journal_owner import JournalChatError, allowed_chats, import_chat
    from memory.export.dayone import export_dayone
    from runtime.migrate import apply_migrations

    async with open_settings_database(settings) as db:
        await apply_migrations(db)
        try:
            chat_id = import_chat(
                args.chat, await allowed_chats(db, settings.telegram_allowed_chat_ids)
            )
        except JournalChatError as exc:
            return fail(str(exc), 2)
        doc = await export_dayone(db, chat_id)
    data = (json.dumps(doc, ensure_ascii=False, indent=2) + "\n").encode("utf-8")
    where = write_output(args.output, data)
    print(f"chat {chat_id}'s journal: {len(doc['entries'])} entries -> {where}", file=sys.stderr)
    return 0


def register_memory(msub: Any) -> None:
    """Add ``export`` and ``import`` to the ``memory`` command's subparsers."""
    p = msub.add_parser("export", help="write a chat's memory as one JSON document (a snapshot)")
    p.add_argument("--chat", type=int, required=True, metavar="ID", help="the chat id")
    p.add_argument("-o", "--output", metavar="FILE", help="the file to write (default: stdout)")
    p.add_argument(
        "--with-vectors",
        action="store_true",
        help="include the embedding vectors of the current model (larger; saves re-embedding)",
    )
    p.add_argument(
        "--format",
        choices=("snapshot", "af"),
        default="snapshot",
        help="snapshot: everything, for `engram memory import`; af: the profile and top "
        "patterns as a Letta Agent File (memory blocks human and persona)",
    )
    p.set_defaults(handler=cmd_memory_export)
    p = msub.add_parser(
        "import",
        help="restore a snapshot into an empty chat or merge it into one (nothing is doubled)",
    )
    p.add_argument("file", metavar="FILE", help="a file written by `engram memory export`")
    p.add_argument("--chat", type=int, metavar="ID", help="the chat to fill (default: the file's)")
    p.add_argument(
        "--embeddings",
        choices=("auto", "openai", "local", "none"),
        default="auto",
        help="embed what the file has no vectors for (none: leave it to the backfill job)",
    )
    p.set_defaults(handler=cmd_memory_import)


def register_journal(jsub: Any) -> None:
    """Add ``export`` to the ``journal`` command's subparsers."""
    p = jsub.add_parser("export", help="write a chat's journal as a Day One JSON export")
    p.add_argument("--format", choices=("dayone",), default="dayone", help="dayone (the only)")
    p.add_argument(
        "--chat",
        type=int,
        metavar="ID",
        help="the chat whose journal it is (required when more than one chat is allowed)",
    )
    p.add_argument("-o", "--output", metavar="FILE", help="the file to write (default: stdout)")
    p.set_defaults(handler=cmd_journal_export)
