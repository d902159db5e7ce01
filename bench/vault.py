"""The markdown vault's figures: rebuild time and size of a big chat, what a kept message costs
in the database, and the write lag after a turn.

    python bench/vault.py [--url postgresql://...] [--patterns 100000] [--messages 50000]
                          [--turns 50] [--smoke]

On a throwaway database (the embedded server unless ``--url``): one chat with ``--messages``
messages over a year (user and assistant rows of realistic lengths, some with tool calls, a few
routine messages) and ``--patterns`` patterns (one observation each, relations and audit rows
for some), plus episodes. It reports

* ``bytes_per_message``: what ``chat_messages`` takes per row with its indexes, TOAST and the
  full-text column (``pg_total_relation_size``), the messages kept as they are by default
  (MESSAGE_RETENTION_DAYS=0); and the mean text length for comparison;
* ``rebuild_s``, ``files``, ``size_mb``: ``engram vault rebuild``'s path for that chat (read,
  render, every file written atomically);
* ``lag_p95_ms``: a turn committed, the writer marked (as the chat actor's commit does), the
  vault written — on a chat of a few hundred patterns (``--small-patterns``), with no
  debounce (the lag with VAULT_DEBOUNCE is that many seconds more); ``lag_big_p95_s`` the same
  on the big chat (the writer's incremental write: only the days that got messages; its first
  write, the sweep's, reads and renders the whole chat); ``lag_big_change_p95_s`` after a
  compaction's kind of change on it (a pattern added, one reinforced, one pinned, an episode:
  their pages, MEMORY.md, the day).

The last line: ``vault patterns=... messages=... bytes_per_message=... rebuild_s=... files=...
size_mb=... lag_p95_ms=... lag_big_p95_s=... lag_big_change_p95_s=...``.
"""

from __future__ import annotations

import argparse
import json
import random
import secrets
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _db import run_on_database
from _smoke import add_smoke_flag, shrink
from retrieval import pct, with_database

from actors.vault.writer import VaultWriter
from memory.vault.files import sync_folder
from memory.vault.incremental import ChatState, write_chat_incremental
from memory.vault.render import render_vault
from memory.vault.settings import chat_folder
from memory.vault.write import read_chat
from runtime import db as dbmod
from runtime.logs import configure_logging
from runtime.migrate import apply_migrations

BIG, SMALL = 1, 2
TZ = "Europe/Madrid"
START = datetime(2025, 6, 1, 8, 0, tzinfo=UTC)
STATUSES = ("active",) * 18 + ("superseded", "disputed")
KINDS = ("fact", "preference", "goal", "belief", "behavior", "emotion")
VOCABULARY = (
    "coffee tea sister work run morning sleep project deadline trip Lisbon dinner friend "
    "meeting book music garden weekend doctor gym budget plan call mother train lunch "
    "weather idea habit goal stress calm walk dog cat movie news exam code review"
)
WORDS = VOCABULARY.split()


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def text(rng: random.Random, low: int, high: int) -> str:
    """Sentences of 6-14 words, ``low``-``high`` characters in all."""
    target = rng.randint(low, high)
    out = ""
    while len(out) < target:
        out += (" " if out else "") + sentence(rng, rng.randint(6, 14))
    return out


async def load_messages(db: dbmod.Database, chat: int, n: int, rng: random.Random) -> None:
    step = timedelta(days=365) / max(1, n)
    rows = []
    for i in range(n):
        user = i % 2 == 0
        routine = not user and i % 97 == 1
        calls = None
        if not user and i % 11 == 1:
            call = {"id": f"c{i}", "name": "search_journal", "input": {"query": rng.choice(WORDS)}}
            calls = json.dumps([call])
        content = text(rng, 40, 240) if user else text(rng, 120, 700)
        rows.append(
            (
                chat,
                "user" if user else "assistant",
                content,
                START + step * i,
                calls,
                "routine" if routine else "conversation",
                "evening_checkin" if routine else None,
                "A check-in." if routine else None,
                START + step * i + timedelta(days=1) if i < n - 40 else None,
            )
        )
    for k in range(0, n, 5000):
        await db.executemany(
            "INSERT INTO chat_messages (chat_id, role, content, created_at, tool_calls, source, "
            "routine_name, summary, compacted_at) "
            "VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9)",
            rows[k : k + 5000],
        )


async def load_patterns(db: dbmod.Database, chat: int, n: int, rng: random.Random) -> None:
    first = await db.fetchval("SELECT coalesce(max(id), 0) + 1 FROM patterns")
    for k in range(0, n, 5000):
        ids = list(range(first + k, first + min(n, k + 5000)))
        seen = [START + timedelta(minutes=rng.randint(0, 525_600)) for _ in ids]
        await db.execute(
            "INSERT INTO patterns (id, chat_id, content, kind, confidence, strength, status, "
            "canonical_hash, first_seen, last_seen, created_at) "
            "SELECT i, $1, c, k, conf, s, st, 'h' || i, t, t, t FROM unnest($2::bigint[], "
            "$3::text[], $4::text[], $5::float8[], $6::float8[], $7::text[], $8::timestamptz[])"
            " AS u(i, c, k, conf, s, st, t)",
            chat,
            ids,
            [sentence(rng, rng.randint(4, 10)) for _ in ids],
            [rng.choice(KINDS) for _ in ids],
            [round(rng.uniform(0.3, 1.0), 2) for _ in ids],
            [round(rng.uniform(0.2, 3.0), 2) for _ in ids],
            [rng.choice(STATUSES) for _ in ids],
            seen,
        )
        await db.execute(
            "INSERT INTO pattern_observations (pattern_id, chat_id, evidence, observed_at) "
            "SELECT i, $1, e, t FROM unnest($2::bigint[], $3::text[], $4::timestamptz[]) "
            "AS u(i, e, t)",
            chat,
            ids,
            [text(rng, 60, 200) for _ in ids],
            seen,
        )
        some = ids[::20]
        await db.execute(
            "INSERT INTO pattern_relations (chat_id, from_pattern_id, to_pattern_id, relation) "
            "SELECT $1, a, a + 1, 'supports' FROM unnest($2::bigint[]) AS a WHERE a + 1 <= $3",
            chat,
            some,
            ids[-1],
        )
        await db.execute(
            "INSERT INTO pattern_audit (chat_id, pattern_id, action, old_status, new_status, "
            "reason, actor, at) SELECT $1, a, 'pin', 'active', 'active', 'pinned', 'person', "
            "$2 FROM unnest($3::bigint[]) AS a",
            chat,
            START + timedelta(days=200),
            some[::5],
        )
    for e in range(max(1, n // 200)):
        at = START + timedelta(hours=12 * e)
        await db.execute(
            "INSERT INTO episodes (chat_id, summary, started_at, ended_at, message_count) "
            "VALUES ($1, $2, $3, $4, 40)",
            chat,
            text(rng, 100, 300),
            at,
            at + timedelta(hours=2),
        )


async def bytes_per_message(db: dbmod.Database, chat: int) -> tuple[float, float]:
    """``chat_messages``' total size (heap, TOAST, every index) per row, and the mean text."""
    await db.execute("VACUUM ANALYZE chat_messages")
    total = await db.fetchval("SELECT pg_total_relation_size('chat_messages')")
    row = await db.fetchrow(
        "SELECT count(*) AS n, avg(octet_length(content)) AS chars FROM chat_messages "
        "WHERE chat_id = $1",
        chat,
    )
    assert row is not None
    return total / row["n"], float(row["chars"])


async def compaction_rows(db: dbmod.Database, chat: int, rng: random.Random) -> None:
    """A compaction's kind of change: a new pattern with its evidence, another reinforced, a
    third pinned (its audit row), an episode."""
    now = datetime.now(UTC)
    ids = [
        r["id"]
        for r in await db.fetch(
            "SELECT id FROM patterns WHERE chat_id = $1 AND status = 'active' "
            "AND NOT is_core_tenet ORDER BY random() LIMIT 2",
            chat,
        )
    ]
    new = await db.fetchval(
        "INSERT INTO patterns (id, chat_id, content, kind, canonical_hash, first_seen, last_seen) "
        "SELECT max(id) + 1, $1, $2, 'fact', $3, $4, $4 FROM patterns RETURNING id",
        chat,
        sentence(rng, 7),
        secrets.token_hex(8),
        now,
    )
    await db.execute(
        "INSERT INTO pattern_observations (pattern_id, chat_id, evidence) VALUES ($1, $2, $3)",
        new,
        chat,
        text(rng, 60, 200),
    )
    await db.execute(
        "UPDATE patterns SET strength = strength + 0.1, times_seen = times_seen + 1, "
        "last_seen = now(), updated_at = now() WHERE chat_id = $1 AND id = $2",
        chat,
        ids[0],
    )
    await db.execute(
        "UPDATE patterns SET is_core_tenet = true, updated_at = now() "
        "WHERE chat_id = $1 AND id = $2",
        chat,
        ids[1],
    )
    await db.execute(
        "INSERT INTO pattern_audit (chat_id, pattern_id, action, old_status, new_status, reason, "
        "actor) VALUES ($1, $2, 'pin', 'active', 'active', 'pinned', 'person')",
        chat,
        ids[1],
    )
    await db.execute(
        "INSERT INTO episodes (chat_id, summary, started_at, ended_at, message_count) "
        "VALUES ($1, $2, $3, $3, 2)",
        chat,
        text(rng, 100, 300),
        now,
    )


async def turn_lags(
    db: dbmod.Database,
    root: Path,
    chat: int,
    turns: int,
    rng: random.Random,
    *,
    compactions: int = 0,
) -> tuple[list[float], list[float]]:
    """Each turn: its rows committed, the writer marked, the wait until the vault is written;
    then ``compactions`` times the same after a compaction's kind of change."""
    lags: list[float] = []
    done = trio.Event()
    state = ChatState()  # the production writer's per-chat state

    async def write(chat_id: int) -> object:
        return await write_chat_incremental(db, root, chat_id, TZ, state)

    def written(chat_id: int, lag: float) -> None:
        lags.append(lag)
        done.set()

    writer = VaultWriter(write, debounce=0.0, on_written=written)
    await write(chat)  # the vault as it stands (the writer's sweep at start)
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        for _ in range(turns):
            done = trio.Event()
            now = datetime.now(UTC)
            await db.executemany(
                "INSERT INTO chat_messages (chat_id, role, content, created_at) "
                "VALUES ($1, $2, $3, $4)",
                [
                    (chat, "user", text(rng, 40, 200), now),
                    (chat, "assistant", text(rng, 120, 600), now),
                ],
            )
            writer.mark(chat)
            await done.wait()
        for _ in range(compactions):
            done = trio.Event()
            await compaction_rows(db, chat, rng)
            writer.mark(chat)
            await done.wait()
        nursery.cancel_scope.cancel()
    assert state.whole_writes == 1, "every write after the first one was incremental"
    return lags[:turns], lags[turns:]


async def run(url: str, args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    name = f"bench_vault_{secrets.token_hex(3)}"
    async with dbmod.open_database(url, max_size=2) as admin:
        await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        async with dbmod.open_database(with_database(url, name), max_size=4) as db:
            await apply_migrations(db)
            await measure(db, args, rng)
    finally:
        async with dbmod.open_database(url, max_size=2) as admin:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def measure(db: dbmod.Database, args: argparse.Namespace, rng: random.Random) -> None:
    t0 = time.perf_counter()
    await load_messages(db, BIG, args.messages, rng)
    per_message, chars = await bytes_per_message(db, BIG)
    await load_patterns(db, BIG, args.patterns, rng)
    await load_messages(db, SMALL, args.small_messages, rng)
    await load_patterns(db, SMALL, args.small_patterns, rng)
    await db.execute("VACUUM ANALYZE")
    print(f"loaded in {time.perf_counter() - t0:.0f} s", flush=True)
    print(
        f"  chat_messages: {per_message:.0f} bytes per message with indexes "
        f"(mean text {chars:.0f} bytes): {per_message * 1e6 / 2**30:.2f} GiB per million",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="engram-bench-vault-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        data = await read_chat(db, BIG, TZ)
        t_read = time.perf_counter() - t0
        files = await trio.to_thread.run_sync(render_vault, data)
        t_render = time.perf_counter() - t0 - t_read
        folder = chat_folder(root, BIG)
        stats = await trio.to_thread.run_sync(lambda: sync_folder(folder, files, force=True))
        rebuild = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
        print(
            f"  rebuild: {rebuild:.1f} s (read {t_read:.1f}, render {t_render:.1f}, write "
            f"{rebuild - t_read - t_render:.1f}); {stats.written} files, {size / 2**20:.1f} MiB",
            flush=True,
        )
        small, _ = await turn_lags(db, root, SMALL, args.turns, rng)
        big, changes = await turn_lags(
            db, root, BIG, args.big_turns, rng, compactions=args.big_turns
        )
    lag = pct(small, 0.95) * 1000
    lag_big = pct(big, 0.95)
    lag_change = pct(changes, 0.95)
    print(
        f"  write lag after a turn (no debounce): p95 {lag:.0f} ms on a chat of "
        f"{args.small_patterns} patterns / {args.small_messages} messages; p95 {lag_big:.1f} s "
        f"on the big chat; after a compaction's kind of change p95 {lag_change:.2f} s on it",
        flush=True,
    )
    print(
        f"vault patterns={args.patterns} messages={args.messages} "
        f"bytes_per_message={per_message:.0f} rebuild_s={rebuild:.1f} files={stats.written} "
        f"size_mb={size / 2**20:.1f} lag_p95_ms={lag:.0f} lag_big_p95_s={lag_big:.3f} "
        f"lag_big_change_p95_s={lag_change:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="", help="PostgreSQL URL (default: embedded server)")
    parser.add_argument("--patterns", type=int, default=100_000)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--small-patterns", type=int, default=300)
    parser.add_argument("--small-messages", type=int, default=2_000)
    parser.add_argument("--turns", type=int, default=50, help="turns on the small chat")
    parser.add_argument("--big-turns", type=int, default=5, help="turns on the big chat")
    parser.add_argument("--seed", type=int, default=24)
    add_smoke_flag(parser)
    args = parser.parse_args()
    shrink(
        parser,
        args,
        patterns=400,
        messages=300,
        small_patterns=50,
        small_messages=100,
        turns=5,
        big_turns=2,
    )
    configure_logging("WARNING", "json", [], stream=open("/dev/null", "w"))  # noqa: SIM115

    async def go(url: str) -> None:
        await run(url, args)

    run_on_database(args.url, "engram-bench-vault-", go)


if __name__ == "__main__":
    main()
