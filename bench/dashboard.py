"""The JSON API and the dashboard's pages with 100,000 patterns, and what metrics cost a turn.

1. API: a fresh database gets one chat's ``--patterns`` patterns by COPY with their 256-d
   vectors (``bench/retrieval.py``'s synthetic topics, as ``bench/commands.py``), 150
   conversation rows and 20 episodes. The real app (``runtime.http.create_app`` with
   ``actors.web.routes.web_blueprints``: DASHBOARD_TOKEN set) is served by the hardened
   hypercorn server (``runtime.http_server.serve_http``) on 127.0.0.1; an httpx client in this
   process times ``--requests`` GETs of each endpoint, one at a time, with the operator's
   token: memory search (the product's hybrid retrieval; query vectors computed up front, the
   embedding model is not part of the figure), a pattern by id (random ids: evidence, links,
   relations, aliases, audit), episodes, a chat's usage (30 days), /metrics (with its refresh
   queries); then, logged in, the dashboard's pages: memory (the newest patterns), memory search,
   a pattern's page (its relations graph drawn), cost and usage (three SVG plots), health. The
   client shares this process's thread: its own time is in the figures.
2. Metrics overhead: ``bench/turn.py``'s measured turn (webhook in -> sendMessage out, the real
   process composition, the scripted model; Telegram's side in another process) in one
   database, run in four rounds off, on, on, off: "off" replaces the observing functions of
   ``runtime.metrics`` by no-ops; "on" observes and scrapes (refresh + text format) every
   ``--scrape`` seconds meanwhile. p95 of the turn with and without, same run.

    python bench/dashboard.py [--url postgresql://...] [--patterns 100000] [--requests 200]
                              [--turns 200] [--smoke]

Last line: ``dashboard api_p95_ms_search=.. api_p95_ms_pattern=.. api_p95_ms_episodes=..
api_p95_ms_usage=.. api_p95_ms_metrics=.. api_p95_ms_page_memory=.. (every page)
turn_p95_ms_metrics_off=.. turn_p95_ms_metrics_on=.. overhead_ms=..``.
"""

from __future__ import annotations

import argparse
import random
import secrets
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import turn as turnbench
from _db import run_on_database
from _smoke import add_smoke_flag, shrink
from _turn_data import HashEmbedder
from commands import CHAT, TZ, add_conversation, command_texts
from prometheus_client import generate_latest
from retrieval import World, pct, with_database
from retrieval import build as build_patterns

from actors.chat.memory_commands import MemoryServices
from actors.dashboard.context import DashboardDeps
from actors.dashboard.pages import dashboard_blueprint
from actors.web.metrics import refresh
from actors.web.routes import web_blueprints
from actors.web.settings import WebSettings
from memory.embeddings.thresholds import SEED
from memory.retrieval.sql import LexiconCache
from runtime import db as dbmod
from runtime import metrics
from runtime.http import create_app, hypercorn_config
from runtime.http_server import serve_http
from runtime.logs import configure_logging
from runtime.migrate import apply_migrations
from runtime.settings import load_settings

TOKEN = "bench-dashboard-token-0123456789"
KINDS = (
    "search",
    "pattern",
    "episodes",
    "usage",
    "metrics",
    "page_memory",
    "page_search",
    "page_pattern",
    "page_usage",
    "page_health",
)
OBSERVERS = (
    "webhook_answered",
    "turn_finished",
    "model_call",
    "compaction_finished",
    "actor_restarted",
    "proactive_sent",
    "proactive_skipped",
)


async def api_part(db: dbmod.Database, args: argparse.Namespace) -> dict[str, list[float]]:
    world = World.make(args.seed)
    searches, _, embedder = command_texts(world, args.requests, args.seed)
    print(f"building {args.patterns:,} patterns in one chat", flush=True)
    await build_patterns(db, world, [(CHAT, args.patterns)], args.seed)
    await add_conversation(db)
    ids = [
        int(r["id"])
        for r in await db.fetch(
            "SELECT id FROM patterns WHERE chat_id = $1 ORDER BY random() LIMIT $2",
            CHAT,
            args.requests,
        )
    ]
    settings = load_settings(WebSettings, {"DASHBOARD_TOKEN": TOKEN}, dotenv=None)
    services = MemoryServices(db, embedder, TZ, SEED, LexiconCache())
    pages = dashboard_blueprint(DashboardDeps(db, TOKEN, services, allowed=frozenset([CHAT])))
    app = create_app(blueprints=[*web_blueprints(settings, services, dict, [CHAT]), pages])
    paths = {
        "search": [f"/api/v1/chats/{CHAT}/patterns/search?q={q}" for q in searches],
        "pattern": [f"/api/v1/chats/{CHAT}/patterns/{i}" for i in ids],
        "episodes": [f"/api/v1/chats/{CHAT}/episodes"] * args.requests,
        "usage": [f"/api/v1/chats/{CHAT}/usage"] * args.requests,
        "metrics": ["/metrics"] * args.requests,
        "page_memory": [f"/dashboard/chats/{CHAT}/memory"] * args.requests,
        "page_search": [f"/dashboard/chats/{CHAT}/memory?q={q}" for q in searches],
        "page_pattern": [f"/dashboard/chats/{CHAT}/patterns/{i}" for i in ids],
        "page_usage": [f"/dashboard/usage?chat={CHAT}"] * args.requests,
        "page_health": ["/dashboard/health"] * args.requests,
    }
    samples: dict[str, list[float]] = {k: [] for k in KINDS}
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        binds: Any = await nursery.start(
            partial(
                serve_http,
                app,
                hypercorn_config("127.0.0.1", 0),
                max_connections=64,
                shutdown_trigger=stop.wait,
            )
        )
        port = int(binds[0].rsplit(":", 1)[1])
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=headers) as c:
            login = await c.post("/dashboard/login", data={"token": TOKEN})  # the page's cookie
            if login.status_code != 302:
                raise SystemExit(f"dashboard login: {login.status_code}")
            for kind in KINDS:
                for n, path in enumerate([paths[kind][0], *paths[kind]]):
                    t0 = time.perf_counter()
                    r = await c.get(path)
                    took = (time.perf_counter() - t0) * 1000
                    if r.status_code != 200:
                        raise SystemExit(f"{path}: {r.status_code} {r.text[:200]}")
                    if n:  # the first of each kind warms up
                        samples[kind].append(took)
        stop.set()
    return samples


def observing(on: bool, saved: dict[str, Any]) -> None:
    """Put ``runtime.metrics``' observing functions back (``on``) or replace them by no-ops."""
    for name in OBSERVERS:
        saved.setdefault(name, getattr(metrics, name))
        setattr(metrics, name, saved[name] if on else (lambda *a, **k: None))


async def scraper(db: dbmod.Database, every: float) -> None:
    while True:
        await trio.sleep(every)
        await refresh(db)
        generate_latest(metrics.REGISTRY)


async def turn_part(db: dbmod.Database, args: argparse.Namespace) -> dict[str, list[float]]:
    embedder = HashEmbedder(256)
    chats = [turnbench.CHAT_BASE + i for i in range(args.chats)]
    await turnbench.load_journal(db, args.entries, embedder, args.seed, chats[0])
    await turnbench.load_chats(db, chats, args.history, args.seed)
    await turnbench.load_patterns(db, chats, embedder, args.turn_patterns, args.seed)
    targs = argparse.Namespace(
        turns=max(1, args.turns // 2), warmup=args.chats, spacing=args.spacing, seed=args.seed
    )
    totals: dict[str, list[float]] = {"off": [], "on": []}
    saved: dict[str, Any] = {}
    try:
        for phase in ("off", "on", "on", "off"):
            observing(phase == "on", saved)
            # the outside process numbers its updates alike each round: a stored update key
            # would be acknowledged as a duplicate and never answered
            await db.execute("DELETE FROM inbox")
            async with trio.open_nursery() as nursery:
                if phase == "on":
                    nursery.start_soon(scraper, db, args.scrape)
                turns, _, _ = await turnbench.measure(db, embedder, chats, targs)
                nursery.cancel_scope.cancel()
            totals[phase] += [t.total * 1000 for t in turns]
            print(f"  round metrics {phase}: p95 {pct(totals[phase], 0.95):.2f} ms", flush=True)
    finally:
        observing(True, saved)
    return totals


async def run(url: str, args: argparse.Namespace) -> None:
    names = [f"bench_dashboard_{part}_{secrets.token_hex(3)}" for part in ("api", "turn")]
    async with dbmod.open_database(url, max_size=2) as admin:
        for name in names:
            await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        async with dbmod.open_database(with_database(url, names[0]), max_size=10) as db:
            await apply_migrations(db)
            api = await api_part(db, args)
        async with dbmod.open_database(with_database(url, names[1]), max_size=10) as db:
            await apply_migrations(db)
            turns = await turn_part(db, args)
    finally:
        async with dbmod.open_database(url, max_size=2) as admin:
            for name in names:
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    p95 = {k: pct(v, 0.95) for k, v in api.items()}
    for kind, values in api.items():
        print(
            f"  GET {kind:8s} n={len(values)}  p50 {pct(values, 0.5):7.2f} ms  "
            f"p95 {p95[kind]:7.2f} ms",
            flush=True,
        )
    off, on = pct(turns["off"], 0.95), pct(turns["on"], 0.95)
    print(
        f"  turn p95: metrics off {off:.2f} ms, on {on:.2f} ms "
        f"({len(turns['off'])} and {len(turns['on'])} turns)",
        flush=True,
    )
    print(
        "dashboard "
        + " ".join(f"api_p95_ms_{k}={v:.2f}" for k, v in p95.items())
        + f" turn_p95_ms_metrics_off={off:.2f} turn_p95_ms_metrics_on={on:.2f}"
        + f" overhead_ms={on - off:.2f} patterns={args.patterns}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="", help="PostgreSQL URL (default: embedded server)")
    parser.add_argument("--patterns", type=int, default=100_000, help="patterns in the API's chat")
    parser.add_argument("--requests", type=int, default=200, help="measured GETs per endpoint")
    parser.add_argument("--turns", type=int, default=200, help="measured turns, both halves")
    parser.add_argument("--chats", type=int, default=20, help="chats the turns rotate over")
    parser.add_argument("--entries", type=int, default=1000, help="journal entries")
    parser.add_argument("--history", type=int, default=60, help="chat_messages rows per chat")
    parser.add_argument("--turn-patterns", type=int, default=500, help="patterns per turn chat")
    parser.add_argument("--spacing", type=float, default=0.06, help="min seconds between turns")
    parser.add_argument("--scrape", type=float, default=1.0, help="seconds between scrapes")
    parser.add_argument("--seed", type=int, default=7)
    add_smoke_flag(parser)
    args = parser.parse_args()
    shrink(
        parser,
        args,
        patterns=2_000,
        requests=3,
        turns=4,
        chats=2,
        entries=100,
        history=10,
        turn_patterns=20,
        spacing=0.55,
    )
    if not 100 <= args.patterns <= 2_000_000 or not 1 <= args.requests <= 10_000:
        parser.error("--patterns 100..2000000, --requests 1..10000")
    random.seed(args.seed)
    configure_logging("WARNING", "json", [TOKEN], stream=open("/dev/null", "w"))  # noqa: SIM115

    async def go(url: str) -> None:
        await run(url, args)

    run_on_database(args.url, "engram-bench-dashboard-", go)


if __name__ == "__main__":
    main()
