"""Maintenance commands for pattern memory, for the CLI.

* ``engram patterns list --chat ID [--status S] [--limit N]`` — a table of a chat's patterns.
* ``engram patterns show ID`` — one pattern: its evidence, links, relations and audit history
  (what ``/memory why`` shows, :func:`memory.patterns.why.explain`).
* ``engram patterns merge [--dry-run] [--chat ID]`` — the periodic merge job
  (:func:`memory.patterns.merge.merge_patterns`); a dry run prints the pairs and decisions only.
* ``engram patterns purge`` — hard-delete compacted messages older than
  ``MESSAGE_RETENTION_DAYS`` (:func:`memory.conversation.purge.purge_compacted`).
* ``engram memory reembed [--all]`` — embed every memory row for the current model
  (:func:`memory.embeddings.reembed.reembed`).

``register(subparsers)`` adds both command groups. Handlers take ``(settings, args)`` and
return the exit code (0 success, 1 failure with one line on stderr).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TextIO

from actors.cli import snapshot as snapshot_cli
from memory.embeddings.tables import ALL_TABLES
from runtime.cli import fail, open_settings_database

if TYPE_CHECKING:  # the handlers import what they use: building the parser stays fast
    from actors.settings import Settings
    from memory.embeddings.reembed import ReembedReport
    from memory.patterns.merge import MergePair, MergeReport
    from runtime.db import Database

STATUSES = ("active", "merged", "deprecated", "superseded", "disputed")
CONTENT_WIDTH = 80
_SHORT = {
    "entry_embeddings": "entries",
    "pattern_embeddings": "patterns",
    "alias_embeddings": "aliases",
    "episode_embeddings": "episodes",
}


async def apply_migrations(db: Database) -> list[str]:
    """:func:`runtime.migrate.apply_migrations`, imported when a command first needs it."""
    from runtime.migrate import apply_migrations as apply

    return await apply(db)


# --- table rendering (pure) --------------------------------------------------------------------


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.2f}"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M")
    return " ".join(str(value).split())


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def render_table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], *, last_width: int = 0
) -> str:
    """Left-aligned columns separated by two spaces; the last column clipped to ``last_width``."""
    cells = [[_cell(v) for v in row] for row in rows]
    if last_width:
        for row in cells:
            row[-1] = _clip(row[-1], last_width)
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = [list(headers), *cells]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )


# --- patterns list -----------------------------------------------------------------------------


async def list_patterns(
    db: Database, chat_id: int, *, status: str | None = None, limit: int = 100
) -> list[Any]:
    """A chat's patterns (optionally of one status), strongest first."""
    return await db.fetch(
        "SELECT id, kind, strength, confidence, status, last_seen, content FROM patterns "
        "WHERE chat_id = $1 AND ($2::text IS NULL OR status = $2) "
        "ORDER BY (status = 'active') DESC, strength DESC, last_seen DESC, id LIMIT $3",
        chat_id,
        status,
        limit,
    )


async def cmd_patterns_list(settings: Settings, args: argparse.Namespace) -> int:
    from runtime.clock import local_datetime

    async with open_settings_database(settings) as db:
        await apply_migrations(db)
        rows = await list_patterns(db, args.chat, status=args.status, limit=args.limit)
    if not rows:
        which = f"{args.status} " if args.status else ""
        print(f"no {which}patterns for chat {args.chat}")
        return 0
    headers = ("id", "kind", "strength", "confidence", "status", "last_seen", "content")
    table = [
        tuple(
            local_datetime(r[h], settings.timezone) if h == "last_seen" else r[h] for h in headers
        )
        for r in rows
    ]
    print(render_table(headers, table, last_width=CONTENT_WIDTH))
    print(f"{len(rows)} pattern(s)")
    return 0


async def cmd_patterns_show(settings: Settings, args: argparse.Namespace) -> int:
    from actors.chat.memory_commands import why_text
    from memory.patterns.why import explain

    async with open_settings_database(settings) as db:
        await apply_migrations(db)
        chat_id = await db.fetchval(
            "/* all chats: operator CLI, a pattern's chat found by its id */ "
            "SELECT chat_id FROM patterns WHERE id = $1",
            args.id,
        )
        detail = None if chat_id is None else await explain(db, int(chat_id), args.id)
    if detail is None:
        return fail(f"no pattern {args.id}", 1)
    print(f"chat {chat_id}")
    print(why_text(detail, settings.timezone))
    return 0


# --- patterns merge ----------------------------------------------------------------------------


def _quote(text: str, width: int = 60) -> str:
    return '"' + _clip(" ".join(text.split()), width) + '"'


def pair_line(p: MergePair) -> str:
    """One pair and its decision, e.g. ``chat 7: #3 "..." ~ #9 "..." 0.934 -> merge into #3``."""
    head = (
        f"chat {p.chat_id}: #{p.a_id} {_quote(p.a_content)} ~ #{p.b_id} {_quote(p.b_content)} "
        f"{p.similarity:.3f} -> "
    )
    if p.decision == "merge":
        verdict = f"merge #{p.loser_id} into #{p.survivor_id}"
    elif p.decision == "keep":
        verdict = "keep both (different)"
    elif p.decision == "no-answer":
        verdict = "keep both (no adjudication answer)"
    else:
        verdict = "skipped (one of them is merged or changed)"
    why = f" — {_clip(' '.join(p.differences.split()), 120)}" if p.differences else ""
    return head + verdict + why


def print_merge(report: MergeReport, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    for p in report.pairs:
        print(pair_line(p), file=out)
    counts: dict[str, int] = {}
    for p in report.pairs:
        counts[p.decision] = counts.get(p.decision, 0) + 1
    detail = ", ".join(f"{n} {d}" for d, n in sorted(counts.items()))
    print(
        f"{len(report.pairs)} pair(s) in {report.chats} chat(s) at similarity >= "
        f"{report.threshold:.2f} ({report.model})" + (f": {detail}" if detail else ""),
        file=out,
    )
    if report.dry_run:
        print("dry run: nothing was changed", file=out)
    else:
        print(f"merged {report.merged} pattern(s)", file=out)


async def cmd_patterns_merge(settings: Settings, args: argparse.Namespace) -> int:
    from memory.embeddings.factory import open_embedder
    from memory.embeddings.thresholds import thresholds_for
    from memory.llm.factory import check_llm_settings, open_llm
    from memory.patterns.dedup import LLMAdjudicator
    from memory.patterns.merge import merge_patterns
    from runtime.progress import Progress

    check_llm_settings(settings)
    async with open_settings_database(settings) as db:
        await apply_migrations(db)
        async with (
            open_llm(settings, db, role="memory") as llm,
            open_embedder(settings, db, provider=args.embeddings) as embedder,
        ):
            with Progress(label="adjudicating") as bar:
                report = await merge_patterns(
                    db,
                    embedder,
                    LLMAdjudicator(llm),
                    dry_run=args.dry_run,
                    thresholds=thresholds_for(embedder.model, settings),
                    chat_id=args.chat,
                    progress=bar,
                )
    print_merge(report)
    return 0


# --- patterns purge ----------------------------------------------------------------------------


async def cmd_patterns_purge(settings: Settings, args: argparse.Namespace) -> int:
    from memory.conversation.purge import purge_compacted

    days = settings.message_retention_days if args.days is None else args.days
    if days == 0:
        print("retention is 0 days (keep forever): nothing purged")
        return 0
    async with open_settings_database(settings) as db:
        await apply_migrations(db)
        deleted = await purge_compacted(db, days)
    print(f"deleted {deleted} compacted message(s) older than {days} day(s)")
    return 0


# --- memory reembed ----------------------------------------------------------------------------


def print_reembed(report: ReembedReport, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    parts = ", ".join(f"{_SHORT.get(t, t)} {n}" for t, n in report.embedded.items())
    print(f"re-embedded {report.total} row(s) with {report.model} ({parts})", file=out)
    if report.indexes_created:
        names = ", ".join(_SHORT.get(t, t) for t in report.indexes_created)
        print(f"created the {report.model} vector index on {names}", file=out)
    if report.failed:
        shown = ", ".join(report.failed[:10])
        more = f" and {len(report.failed) - 10} more" if len(report.failed) > 10 else ""
        print(f"{len(report.failed)} row(s) could not be embedded: {shown}{more}", file=out)


async def cmd_memory_reembed(settings: Settings, args: argparse.Namespace) -> int:
    from memory.embeddings.factory import open_embedder
    from memory.embeddings.reembed import reembed
    from memory.errors import EmbeddingError
    from runtime.progress import Progress

    async with open_settings_database(settings) as db:
        await apply_migrations(db)
        async with open_embedder(settings, db, provider=args.embeddings) as embedder:
            with Progress(label="re-embedding") as bar:
                try:
                    report = await reembed(
                        db,
                        embedder,
                        tables=args.tables or ALL_TABLES,
                        all_rows=args.all,
                        batch=args.batch,
                        progress=bar,
                    )
                except EmbeddingError as exc:
                    bar.finish("(stopped)")
                    return fail(f"embedding ({embedder.model}): {exc}", 1)
    print_reembed(report)
    return 1 if report.failed else 0


# --- registration ------------------------------------------------------------------------------


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


def _embeddings_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--embeddings",
        choices=("auto", "openai", "local"),
        default=None,
        help="embedding provider (default: EMBEDDING_PROVIDER)",
    )


def register(subparsers: Any) -> Any:
    """Add ``patterns list|merge|purge`` and ``memory reembed`` to ``engram``'s subparsers; the
    ``memory`` sub-commands' parser (for more of them)."""
    patterns = subparsers.add_parser("patterns", help="pattern memory maintenance")
    sub = patterns.add_subparsers(dest="patterns_command", metavar="COMMAND")
    sub.required = True
    p = sub.add_parser("list", help="list a chat's patterns")
    p.add_argument("--chat", type=int, required=True, metavar="ID", help="the chat id")
    p.add_argument("--status", choices=STATUSES, help="only patterns with this status")
    p.add_argument("--limit", type=_positive, default=100, help="at most this many (100)")
    p.set_defaults(handler=cmd_patterns_list)
    p = sub.add_parser("show", help="one pattern: evidence, links, relations, audit history")
    p.add_argument("id", type=_positive, metavar="ID", help="the pattern id")
    p.set_defaults(handler=cmd_patterns_show)
    p = sub.add_parser(
        "merge", help="merge duplicate patterns (LLM-adjudicated pairs above the merge threshold)"
    )
    p.add_argument(
        "--dry-run", action="store_true", help="print the pairs and decisions, change nothing"
    )
    p.add_argument("--chat", type=int, metavar="ID", help="only this chat")
    _embeddings_option(p)
    p.set_defaults(handler=cmd_patterns_merge)
    p = sub.add_parser("purge", help="delete compacted messages older than MESSAGE_RETENTION_DAYS")
    p.add_argument(
        "--days",
        type=_non_negative,
        default=None,
        help="retention in days instead of MESSAGE_RETENTION_DAYS (0 keeps forever)",
    )
    p.set_defaults(handler=cmd_patterns_purge)

    memory = subparsers.add_parser("memory", help="long-term memory maintenance")
    msub = memory.add_subparsers(dest="memory_command", metavar="COMMAND")
    msub.required = True
    p = msub.add_parser(
        "reembed",
        help="embed entries, patterns, aliases and episodes for the current embedding model",
    )
    p.add_argument(
        "--all",
        action="store_true",
        help="re-embed every row, not only those lacking a vector for the model",
    )
    _embeddings_option(p)
    p.add_argument("--table", dest="tables", action="append", choices=ALL_TABLES)
    p.add_argument("--batch", type=_positive, default=64, help="texts per request (64)")
    p.set_defaults(handler=cmd_memory_reembed)
    snapshot_cli.register_memory(msub)
    return msub
