"""Chat commands without a model: ``/memory``, ``/memory search`` and ``/forget <topic>``,
webhook in -> sendMessage out, with 100,000 patterns in the chat.

A fresh database gets the schema, one chat's 100,000 patterns by COPY with their 256-d vectors
(``bench/retrieval.py``'s synthetic topics: 95 % active, kinds behavior to causal, strengths
and ages spread; indexes built after the load, VACUUM ANALYZE), 150 conversation rows and 20
episode summaries. Then the real process composition runs in this process
(``runtime.serve.serve`` + ``actors.system.BotSystem`` in webhook mode, with the command table
``engram serve`` builds: ``actors.chat.commands.command_table`` and its buttons), its turn
handler refusing any call (a command never reaches the model). Telegram's side — the webhook
sender and the stub Bot API — is a process of its own (``bench/_commands_outside.py``); the
clock runs from just before the POST to when the stub reads the ``sendMessage``.

A measured command is: POST -> webhook -> inbox insert -> router -> chat actor (claim) ->
command table -> the command (``/memory``: the profile's groups and counts, two statements;
``/memory search``: the product's retrieval, one statement, then BM25/MMR-free top 5;
``/forget``: retrieval + full-text matches + the count of messages mentioning the topic, and a
keyboard of fresh callback tokens) -> commit (outbox row claimed, inbox done) -> sender ->
``sendMessage``. Query vectors are computed up front (the embedding model is a model: not part
of the figure; ``bench/retrieval.py --wordllama`` shows what the local one adds).

The three commands take turns, one chat, at least ``--spacing`` s apart (the sender sends one
message per chat per second: pacing is kept out of the figures); the first ``--warmup`` of each
are not measured.

    python bench/commands.py [--url postgresql://...] [--per 100] [--patterns 100000] [--smoke]

Last line: ``commands p95_ms_memory=<a> p95_ms_search=<b> p95_ms_forget=<c>``.
"""

from __future__ import annotations

import argparse
import math
import secrets
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _db import run_on_database
from _smoke import add_smoke_flag, shrink
from _turn_outside import HOST, SECRET, Outside
from retrieval import NOW, QueryVectors, World, pct, with_database
from retrieval import build as build_patterns

from actors.agent.turn import TurnInput, TurnReply
from actors.chat.callbacks import CallbackTable
from actors.chat.commands import command_table
from actors.chat.memory_commands import MemoryServices
from actors.settings import load_settings
from actors.system import BotSystem
from memory.embeddings.thresholds import SEED
from memory.retrieval.sql import LexiconCache
from runtime import db as dbmod
from runtime.logs import configure_logging
from runtime.migrate import apply_migrations
from runtime.serve import serve
from runtime.shutdown import Shutdown

TOKEN = "123456789:BENCH_fake-token_for-local-stub_only"
CHAT = 920_000_001
TZ = "Europe/Madrid"
OUTSIDE = Path(__file__).resolve().parent / "_commands_outside.py"
KINDS = ("memory", "search", "forget")
#: what each answer starts with (a topic may have no memories: "I have nothing about ...")
EXPECT = {
    "memory": ("📋 Your profile",),
    "search": ("Top ", "Nothing in memory matches"),
    "forget": ("Memories about “", "I have nothing about"),
}


class BenchError(Exception):
    pass


class NoModel:
    """The turn handler: a command must never get here."""

    async def run_turn(self, turn: TurnInput) -> TurnReply:
        raise BenchError(f"a model turn for {turn.text[:40]!r}: commands must not reach it")


async def add_conversation(db: dbmod.Database) -> None:
    rows = [
        (
            CHAT,
            "user" if n % 2 == 0 else "assistant",
            f"message {n} about the week",
            NOW - timedelta(minutes=200 - n),
        )
        for n in range(150)
    ]
    await db.copy_records("chat_messages", rows, ("chat_id", "role", "content", "created_at"))
    episodes = [
        (
            CHAT,
            f"Episode {n}: talked about plans.",
            NOW - timedelta(days=n + 1),
            NOW - timedelta(days=n),
            40,
        )
        for n in range(20)
    ]
    columns = ("chat_id", "summary", "started_at", "ended_at", "message_count")
    await db.copy_records("episodes", episodes, columns)
    await db.execute("VACUUM ANALYZE chat_messages")
    await db.execute("VACUUM ANALYZE episodes")


def command_texts(world: World, n: int, seed: int) -> tuple[list[str], list[str], QueryVectors]:
    """``n`` search queries and ``n`` forget topics (two words of a topic) and their vectors."""
    rng = np.random.default_rng(seed + 7)
    searches = world.queries(rng, n)
    topics = rng.integers(0, len(world.topic_words), n)
    vectors = world.noisy(rng, topics, 1.0)
    forgets = [" ".join(rng.choice(world.topic_words[int(t)], 2, replace=False)) for t in topics]
    known = {t: v for t, v in searches} | dict(zip(forgets, vectors, strict=True))
    return [t for t, _ in searches], forgets, QueryVectors(known)


async def drive(
    outside: Outside, texts: dict[str, list[str]], args: argparse.Namespace
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """The measured latencies by kind, and how many answers were the first of ``EXPECT``'s
    (found something) by kind."""
    samples: dict[str, list[float]] = {k: [] for k in KINDS}
    found = dict.fromkeys(KINDS, 0)
    for i in range(args.warmup + args.per):
        for kind in KINDS:
            text = texts[kind][i]
            await outside.send(chat=CHAT, text=text)
            done = await outside.receive()
            if done["status"] != 200 or math.isnan(done["t_sent"]):
                raise BenchError(f"{text!r}: webhook {done['status']}, no reply in time")
            reply = str(done["reply"])
            if not reply.startswith(EXPECT[kind]):
                raise BenchError(f"{text!r} was answered {reply[:80]!r}")
            if i >= args.warmup:
                samples[kind].append((done["t_sent"] - done["t0"]) * 1000)
                found[kind] += reply.startswith(EXPECT[kind][0])
            await trio.sleep(max(0.0, args.spacing - (time.perf_counter() - done["t0"])))
    return samples, found


async def measure(
    db: dbmod.Database,
    embedder: QueryVectors,
    texts: dict[str, list[str]],
    args: argparse.Namespace,
) -> dict[str, list[float]]:
    process = await trio.lowlevel.open_process(
        [sys.executable, str(OUTSIDE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    outside = Outside(process)
    samples: dict[str, list[float]] = {}
    found: dict[str, int] = {}
    try:
        stub_port = (await outside.receive())["port"]
        settings = load_settings(
            {
                "ENGRAM_HOST": HOST,
                "ENGRAM_PORT": "0",
                "TELEGRAM_BOT_TOKEN": TOKEN,
                "TELEGRAM_SECRET_TOKEN": SECRET,
                "TELEGRAM_ALLOWED_CHAT_IDS": str(CHAT),
                "TELEGRAM_API_BASE_URL": f"http://{HOST}:{stub_port}",
                "TELEGRAM_WEBHOOK_URL": "",
                "SHUTDOWN_DEADLINE": "10",
                "TIMEZONE": TZ,
            },
            dotenv=None,
        )

        def build(s: Any, d: dbmod.Database, sh: Shutdown) -> BotSystem:
            taps = CallbackTable()
            services = MemoryServices(d, embedder, TZ, SEED, LexiconCache())
            return BotSystem(
                s, d, sh, turns=NoModel(), callbacks=taps, commands=command_table(services, taps)
            )

        shutdown = Shutdown(deadline=10, signals=())
        listening = trio.Event()
        binds: list[str] = []

        def on_listening(found: list[str]) -> None:
            binds.extend(found)
            listening.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: serve(settings, db, build, on_listening=on_listening, shutdown=shutdown)
            )
            with trio.fail_after(30):
                await listening.wait()
            try:
                await outside.send(webhook_port=int(binds[0].rsplit(":", 1)[1]))
                samples, found = await drive(outside, texts, args)
                await outside.send(end=True)
                counts = (await outside.receive())["counts"]
                print(f"  stub calls: {counts}", flush=True)
            finally:
                shutdown.request_stop("bench done")
    finally:
        if process.poll() is None:
            process.kill()
        with trio.move_on_after(5, shield=True):
            await process.wait()
    for kind in KINDS:
        print(
            f"  {kind}: {found.get(kind, 0)} of {len(samples.get(kind, []))} answers found "
            "memories",
            flush=True,
        )
    return samples


async def run(url: str, args: argparse.Namespace) -> None:
    world = World.make(args.seed)
    n = args.warmup + args.per
    searches, forgets, embedder = command_texts(world, n, args.seed)
    texts = {
        "memory": ["/memory"] * n,
        "search": [f"/memory search {t}" for t in searches],
        "forget": [f"/forget {t}" for t in forgets],
    }
    dbname = f"bench_commands_{secrets.token_hex(3)}"
    async with dbmod.open_database(url, max_size=2) as admin:
        await admin.execute(f'CREATE DATABASE "{dbname}"')
    try:
        async with dbmod.open_database(with_database(url, dbname), max_size=10) as db:
            await apply_migrations(db)
            print(f"building {args.patterns:,} patterns in one chat", flush=True)
            took = await build_patterns(db, world, [(CHAT, args.patterns)], args.seed)
            await add_conversation(db)
            print("  build: " + ", ".join(f"{k} {v:.1f} s" for k, v in took.items()), flush=True)
            samples = await measure(db, embedder, texts, args)
    finally:
        async with dbmod.open_database(url, max_size=2) as admin:
            await admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
    p95 = {}
    for kind in KINDS:
        s = samples[kind]
        p95[kind] = pct(s, 0.95)
        print(
            f"  {kind:7s} n={len(s)}  p50 {statistics.median(s):6.2f} ms  p95 {p95[kind]:6.2f} "
            f"ms  max {max(s):6.2f} ms",
            flush=True,
        )
    print(
        f"commands p95_ms_memory={p95['memory']:.2f} p95_ms_search={p95['search']:.2f} "
        f"p95_ms_forget={p95['forget']:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="", help="PostgreSQL URL (default: embedded server)")
    parser.add_argument("--per", type=int, default=100, help="measured commands of each kind")
    parser.add_argument("--warmup", type=int, default=10, help="unmeasured commands of each kind")
    parser.add_argument("--patterns", type=int, default=100_000, help="patterns in the chat")
    parser.add_argument("--spacing", type=float, default=1.05, help="seconds between commands")
    parser.add_argument("--seed", type=int, default=11)
    add_smoke_flag(parser)
    args = parser.parse_args()
    shrink(parser, args, per=2, warmup=1, patterns=2_000)
    least_per, least_patterns = (1, 100) if args.smoke else (10, 1_000)
    if not least_per <= args.per <= 10_000 or not least_patterns <= args.patterns <= 2_000_000:
        parser.error(f"--per {least_per}..10000, --patterns {least_patterns}..2000000")
    configure_logging("WARNING", "json", [], stream=open("/dev/null", "w"))  # noqa: SIM115

    async def go(url: str) -> None:
        await run(url, args)

    run_on_database(args.url, "engram-bench-commands-", go)


if __name__ == "__main__":
    main()
