"""Snapshot export and import time and size for one big chat (issue 24, Figures).

Fills one chat with ``--patterns`` patterns (an observation for every other one, an alias for
one in ten), ``--messages`` messages and their episodes (one per 40 messages), with COPY; then
times ``build_snapshot`` + ``dump`` (the export, no vectors), ``parse`` + ``prepare`` +
``import_snapshot`` into an empty chat of the same database (the import: JSON, the checks, then
the id remapping and the writes in one transaction), and a second export of the imported
chat, which must hold the same rows.

    .venv/bin/python bench/export.py [--patterns 100000] [--messages 50000] [--url URL]

Last line: ``export patterns=... messages=... export_s=... import_s=... size_mb=...
bytes_per_pattern=... bytes_per_message=...``.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _db import checkpoint, run_on_database
from _smoke import add_smoke_flag, shrink

from memory.export.document import build_snapshot, dump
from memory.export.importer import import_snapshot, parse, prepare
from memory.export.sections import SECTIONS
from memory.patterns.canonical import canonical_hash
from runtime import db as dbmod
from runtime.logs import configure_logging
from runtime.migrate import apply_migrations

CHAT, TARGET = 1, 2
T0 = datetime(2025, 1, 1, tzinfo=UTC)
KINDS = ("behavior", "belief", "goal", "preference", "fact")
WORDS = [
    "running",
    "tea",
    "coffee",
    "work",
    "sister",
    "Lisbon",
    "garden",
    "piano",
    "chess",
    "sleep",
    "deadline",
    "offsite",
    "novel",
    "cycling",
    "budget",
    "doctor",
    "weekend",
    "friend",
    "recipe",
    "rain",
    "train",
    "language",
    "project",
    "family",
]


def sentence(i: int, n: int = 9) -> str:
    words = [WORDS[(i * 7 + k * 13 + (i >> k)) % len(WORDS)] for k in range(n)]
    return f"User {' '.join(words)} ({i})"


async def fill(db: dbmod.Database, patterns: int, messages: int) -> None:
    """One chat with the given numbers of patterns and messages (and what hangs off them)."""
    msg_rows = [
        (
            CHAT,
            f"update:{i}" if i % 2 == 0 else None,
            "user" if i % 2 == 0 else "assistant",
            sentence(i, 14),
            T0 + timedelta(minutes=i),
            T0 + timedelta(days=1, minutes=i) if i < messages - 40 else None,
        )
        for i in range(messages)
    ]
    await db.copy_records(
        "chat_messages",
        msg_rows,
        ["chat_id", "external_message_id", "role", "content", "created_at", "compacted_at"],
    )
    ids = [int(r["id"]) for r in await db.fetch("SELECT id FROM chat_messages ORDER BY id")]
    pat_rows = []
    for i in range(patterns):
        content = sentence(i + 1_000_000)
        seen = T0 + timedelta(minutes=i)
        pat_rows.append(
            (CHAT, content, KINDS[i % len(KINDS)], 0.5 + (i % 5) / 10, 1.0, 1 + i % 3, "active",
             canonical_hash(content), seen, seen)
        )  # fmt: skip
    await db.copy_records(
        "patterns",
        pat_rows,
        ["chat_id", "content", "kind", "confidence", "strength", "times_seen", "status",
         "canonical_hash", "first_seen", "last_seen"],
    )  # fmt: skip
    pids = [int(r["id"]) for r in await db.fetch("SELECT id FROM patterns ORDER BY id")]
    obs = [
        (p, CHAT, [ids[k % len(ids)]] if ids else [], sentence(k, 12), ["user"], T0)
        for k, p in enumerate(pids)
        if k % 2 == 0
    ]
    await db.copy_records(
        "pattern_observations",
        obs,
        ["pattern_id", "chat_id", "chat_message_ids", "evidence", "evidence_roles", "observed_at"],
    )
    aliases = [(p, CHAT, sentence(k + 2_000_000, 6)) for k, p in enumerate(pids) if k % 10 == 0]
    await db.copy_records("pattern_aliases", aliases, ["pattern_id", "chat_id", "content"])
    episodes = [
        (CHAT, sentence(s, 30), T0 + timedelta(minutes=s), T0 + timedelta(minutes=s + 39), 40,
         ids[s], ids[min(s + 39, len(ids) - 1)])
        for s in range(0, len(ids) - 40, 40)
    ]  # fmt: skip
    await db.copy_records(
        "episodes",
        episodes,
        ["chat_id", "summary", "started_at", "ended_at", "message_count", "first_message_id",
         "last_message_id"],
    )  # fmt: skip


async def run(url: str, args: argparse.Namespace) -> None:
    async with dbmod.open_database(url, max_size=2) as db:
        await apply_migrations(db)
        start = time.perf_counter()
        await fill(db, args.patterns, args.messages)
        await db.execute("ANALYZE")
        await checkpoint(db)
        print(f"filled chat {CHAT} in {time.perf_counter() - start:.1f} s")

        start = time.perf_counter()
        doc = await build_snapshot(db, CHAT, engram_version="bench", embedding_model=None)
        data = dump(doc)
        export_s = time.perf_counter() - start
        print(f"export: {export_s:.2f} s, {len(data) / 1e6:.1f} MB")

        start = time.perf_counter()
        parsed = parse(data)
        parse_s = time.perf_counter() - start
        plan = prepare(parsed)
        check_s = time.perf_counter() - start - parse_s
        report = await import_snapshot(db, plan, chat_id=TARGET)
        import_s = time.perf_counter() - start
        print(
            f"import into an empty chat: {import_s:.2f} s (JSON {parse_s:.2f} s, checks "
            f"{check_s:.2f} s, one transaction {import_s - parse_s - check_s:.2f} s); "
            f"added {report.added}"
        )

        again = await build_snapshot(db, TARGET, engram_version="bench", embedding_model=None)
        for section in SECTIONS:
            if len(again[section.name]) != len(doc[section.name]):
                raise SystemExit(f"round trip lost rows of {section.name}")
    size_mb = len(data) / 1e6
    per_pattern = round(len(dump({"patterns": doc["patterns"]})) / max(args.patterns, 1))
    per_message = round(len(dump({"messages": doc["messages"]})) / max(args.messages, 1))
    print(
        f"export patterns={args.patterns} messages={args.messages} export_s={export_s:.2f} "
        f"import_s={import_s:.2f} size_mb={size_mb:.1f} bytes_per_pattern={per_pattern} "
        f"bytes_per_message={per_message}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="", help="PostgreSQL URL (default: embedded server)")
    parser.add_argument("--patterns", type=int, default=100_000)
    parser.add_argument("--messages", type=int, default=50_000)
    add_smoke_flag(parser)
    args = parser.parse_args()
    shrink(parser, args, patterns=2_000, messages=1_000)
    if args.patterns < 1 or args.messages < 80:
        parser.error("--patterns >= 1, --messages >= 80")
    configure_logging("WARNING", "json", [], stream=open("/dev/null", "w"))  # noqa: SIM115

    async def go(url: str) -> None:
        await run(url, args)

    run_on_database(args.url, "engram-bench-export-", go)


if __name__ == "__main__":
    main()
