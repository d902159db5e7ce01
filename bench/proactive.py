"""The proactive lane's cost: 30 simulated days for 1,000 chats through the real scheduler.

    python bench/proactive.py [--url postgresql://...] [--chats 1000] [--days 30] [--smoke]

A simulated clock (the store is the real database, so no MockClock across its I/O) steps
``--step`` seconds (60) from a Monday 00:00 UTC. The people: a fraction of the chats turned
check-ins on (``/active on``: the routines' jobs at their default local times, Europe/Madrid),
each person writes at random daytime hours on most days, logs a weight on some mornings
(drifting, now and then by more than the threshold), and some ask for a reminder. Every step:
the people's messages of that minute are stored, the scheduler's :meth:`run_once` claims what
is due (gates, inbox rows), and a stand-in chat actor takes each run: the routine's rule on the
database (0 model calls when it says no), the fake model only when it says yes (and it may
decline), a send recorded as ``sent`` (what the cap and the cooldown count).

The rules are the product's (``actors.scheduler.routines.all_routines``: nightly reflection,
weekly recap, weight trend, on this day, event reminders) at their default thresholds; the
simulated people write, log weights and ask for reminders (no journal entries, patterns or
events: those rules say no, at the cost of their queries).

Prints model calls and sends per chat per day, routine sends inside quiet hours (must be 0),
the scheduler's CPU per simulated minute (this process: the tick's Python and driver work) and
the wall time from the tick that enqueued a run to the end of its turn (p95: the chats due in
the same minute — 400 at 21:00 — taken side by side on a pool of 10 connections); last line:
``proactive model_calls_per_chat_day=… sends_per_chat_day=… quiet_hour_sends=0
scheduler_cpu_ms_per_min=… due_to_turn_p95_ms=…``.
"""

from __future__ import annotations

import argparse
import json
import random
import secrets
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import attrs
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _db import run_on_database
from _smoke import add_smoke_flag, shrink
from retrieval import pct, with_database

from actors.chat.proactive_commands import Controls
from actors.scheduler import jobs
from actors.scheduler.gates import Limits, in_quiet
from actors.scheduler.routine import DueRun, Routine, RoutineContext
from actors.scheduler.routines import all_routines
from actors.scheduler.scheduler import Scheduler, SqlDueStore
from runtime import db as dbmod
from runtime.logs import configure_logging
from runtime.migrate import apply_migrations

TZ = "Europe/Madrid"
START = datetime(2026, 3, 2, 0, 0, tzinfo=UTC)  # a Monday (Madrid's DST change on the 29th)
THRESHOLD_KG = 1.0


@attrs.frozen
class Thresholds:
    """The routines' settings (WEIGHT_TREND_* at their defaults)."""

    weight_trend_threshold_kg: float = THRESHOLD_KG
    weight_trend_min_readings: int = 4


ROUTINES: list[Routine] = all_routines(Thresholds())
ROUTINE_BY_NAME = {r.name: r for r in ROUTINES}


class SimClock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@attrs.define
class FakeModel:
    """Counts calls; declines one brief in five."""

    rng: random.Random
    calls: int = 0

    def answer(self) -> bool:
        self.calls += 1
        return self.rng.random() >= 0.2


@attrs.define
class Events:
    """The people's simulated actions, by minute: messages, weights, reminders asked for."""

    messages: dict[datetime, list[int]] = attrs.field(factory=lambda: defaultdict(list))
    weights: dict[datetime, list[tuple[int, float]]] = attrs.field(
        factory=lambda: defaultdict(list)
    )
    reminders: dict[datetime, list[int]] = attrs.field(factory=lambda: defaultdict(list))


def plan_people(chats: int, days: int, active: set[int], rng: random.Random) -> Events:
    ev = Events()
    zone = ZoneInfo(TZ)
    for chat in range(1, chats + 1):
        talkative = rng.random()
        weight = rng.uniform(55, 100) if rng.random() < 0.3 else None
        for day in range(days):
            local_day = (START + timedelta(days=day)).astimezone(zone).date()

            def at(hour: float, *, _d: Any = local_day) -> datetime:
                h, m = int(hour), int((hour % 1) * 60)
                return datetime(_d.year, _d.month, _d.day, h, m, tzinfo=zone).astimezone(UTC)

            if rng.random() < 0.3 + 0.6 * talkative:
                for _ in range(rng.randint(1, 6)):
                    ev.messages[at(rng.uniform(8, 22.9))].append(chat)
            if weight is not None and rng.random() < 0.6:
                weight += rng.gauss(0, 0.35)
                ev.weights[at(rng.uniform(7, 8.9))].append((chat, round(weight, 1)))
            if chat in active and rng.random() < 0.05:
                ev.reminders[at(rng.uniform(9, 20))].append(chat)
    return ev


def minute(t: datetime) -> datetime:
    return t.replace(second=0, microsecond=0)


async def people_act(
    db: dbmod.Database, ev: Events, frm: datetime, to: datetime, controls: Controls
) -> None:
    """Store what the people did in (frm, to]."""
    t = minute(frm) + timedelta(minutes=1)
    rows: list[tuple[int, datetime]] = []
    weights: list[tuple[int, Any, float]] = []
    asks: list[tuple[int, datetime]] = []
    while t <= to:
        rows += [(c, t) for c in ev.messages.pop(t, [])]
        weights += [(c, t.astimezone(ZoneInfo(TZ)).date(), w) for c, w in ev.weights.pop(t, [])]
        asks += [(c, t) for c in ev.reminders.pop(t, [])]
        t += timedelta(minutes=1)
    if rows:
        await db.execute(
            "INSERT INTO chat_messages (chat_id, role, content, created_at) "
            "SELECT c, 'user', 'hello', t FROM unnest($1::bigint[], $2::timestamptz[]) AS u(c, t)",
            [c for c, _ in rows],
            [t for _, t in rows],
        )
    if weights:
        await db.executemany(
            "INSERT INTO daily_metrics (chat_id, date, weight_kg) VALUES ($1, $2, $3) "
            "ON CONFLICT (chat_id, date) DO UPDATE SET weight_kg = EXCLUDED.weight_kg",
            weights,
        )
    for chat, at in asks:
        await controls.remind_at(chat, "in 2 hours take the pills", at)


@attrs.define
class Tally:
    sends: int = 0
    reminder_sends: int = 0
    quiet_sends: int = 0
    skipped_by_rule: int = 0
    declined: int = 0
    due_to_turn_ms: list[float] = attrs.field(factory=list)


async def chat_actors(
    db: dbmod.Database,
    now: datetime,
    enqueued_at: float,
    model: FakeModel,
    tally: Tally,
    limits: Limits,
) -> None:
    """Stand-in for the chat actors' step 2: each pending run, the chats side by side (as their
    actors are), each chat's runs in order."""
    rows = await db.fetch(
        "SELECT id, payload FROM inbox WHERE kind = 'routine' AND status = 'pending' ORDER BY id"
    )
    by_chat: dict[int, list[tuple[int, DueRun]]] = defaultdict(list)
    for row in rows:
        run = DueRun.from_payload(json.loads(row["payload"]))
        by_chat[run.chat_id].append((row["id"], run))

    async def one_chat(runs: list[tuple[int, DueRun]]) -> None:
        for inbox_id, run in runs:
            await take(db, inbox_id, run, now, model, tally, limits)
            tally.due_to_turn_ms.append((time.perf_counter() - enqueued_at) * 1000)

    async with trio.open_nursery() as nursery:
        for runs in by_chat.values():
            nursery.start_soon(one_chat, runs)


async def take(
    db: dbmod.Database,
    inbox_id: int,
    run: DueRun,
    now: datetime,
    model: FakeModel,
    tally: Tally,
    limits: Limits,
) -> None:
    """One run: the rule, then the model only when the rule has something to say."""
    outcome: jobs.Outcome = "sent"
    calls = 0
    if run.kind == "routine":
        ctx = RoutineContext(db, run.chat_id, TZ, now, run.payload)
        brief = await ROUTINE_BY_NAME[run.name].decide(ctx)
        if brief is None:
            outcome = "skipped"
            tally.skipped_by_rule += 1
        elif brief.prompt is not None:
            calls = 1
            if not model.answer():
                outcome = "declined"
                tally.declined += 1
    if outcome == "sent":
        if run.kind == "reminder":
            tally.reminder_sends += 1
        else:
            tally.sends += 1
            if in_quiet(limits.quiet_hours, now.astimezone(ZoneInfo(TZ))):
                tally.quiet_sends += 1
    await jobs.record_run(
        db, run.chat_id, run.job_id, run.name, run.due_at, outcome, model_calls=calls, at=now
    )
    await db.execute("UPDATE inbox SET status = 'done' WHERE id = $1", inbox_id)


async def run(url: str, args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    dbname = f"bench_proactive_{secrets.token_hex(3)}"
    async with dbmod.open_database(url, max_size=2) as admin:
        await admin.execute(f'CREATE DATABASE "{dbname}"')
    try:
        async with dbmod.open_database(with_database(url, dbname), max_size=10) as db:
            await apply_migrations(db)
            await measure(db, args, rng)
    finally:
        async with dbmod.open_database(url, max_size=2) as admin:
            await admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


async def measure(db: dbmod.Database, args: argparse.Namespace, rng: random.Random) -> None:
    limits = Limits()
    clock = SimClock(START)
    scheduler = Scheduler(SqlDueStore(db), limits, clock=clock)
    controls = Controls(db, TZ, ROUTINES)
    active = sorted(rng.sample(range(1, args.chats + 1), round(args.chats * args.active)))
    for chat in active:
        await controls.activate(chat, START)
    events = plan_people(args.chats, args.days, set(active), rng)
    model, tally = FakeModel(rng), Tally()
    cpu = 0.0
    step = timedelta(seconds=args.step)
    end = START + timedelta(days=args.days)
    print(
        f"{args.chats} chats ({len(active)} with check-ins on), {args.days} days, "
        f"step {args.step:.0f} s",
        flush=True,
    )
    wall = time.perf_counter()
    while clock.now < end:
        before = clock.now
        clock.now = before + step
        await people_act(db, events, before, clock.now, controls)
        c0 = time.process_time()
        t0 = time.perf_counter()
        woken = await scheduler.run_once()
        cpu += time.process_time() - c0
        if woken:
            await chat_actors(db, clock.now, t0, model, tally, limits)
    chat_days = args.chats * args.days
    minutes = args.days * 1440
    outcomes = await db.fetch("SELECT outcome, count(*) AS n FROM proactive_runs GROUP BY 1")
    print("  runs: " + ", ".join(f"{r['outcome']} {r['n']}" for r in outcomes))
    print(
        f"  rules said no {tally.skipped_by_rule}, model declined {tally.declined}, "
        f"reminders sent {tally.reminder_sends}; {time.perf_counter() - wall:.0f} s wall"
    )
    p95 = pct(tally.due_to_turn_ms, 0.95) if tally.due_to_turn_ms else 0.0
    print(
        f"proactive model_calls_per_chat_day={model.calls / chat_days:.3f} "
        f"sends_per_chat_day={(tally.sends + tally.reminder_sends) / chat_days:.3f} "
        f"quiet_hour_sends={tally.quiet_sends} "
        f"scheduler_cpu_ms_per_min={cpu * 1000 / minutes:.3f} due_to_turn_p95_ms={p95:.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="", help="PostgreSQL URL (default: embedded server)")
    parser.add_argument("--chats", type=int, default=1000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--active", type=float, default=0.4, help="fraction with check-ins on")
    parser.add_argument("--step", type=float, default=60.0, help="simulated seconds a step")
    parser.add_argument("--seed", type=int, default=22)
    add_smoke_flag(parser)
    args = parser.parse_args()
    shrink(parser, args, chats=30, days=2, step=600.0)
    if not 1 <= args.chats <= 100_000 or not 1 <= args.days <= 365 or args.step < 1:
        parser.error("--chats 1..100000, --days 1..365, --step >= 1")
    configure_logging("WARNING", "json", [], stream=open("/dev/null", "w"))  # noqa: SIM115

    async def go(url: str) -> None:
        await run(url, args)

    run_on_database(args.url, "engram-bench-proactive-", go)


if __name__ == "__main__":
    main()
