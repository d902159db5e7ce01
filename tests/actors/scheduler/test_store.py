"""The scheduler through the real database: two schedulers claim a due job once; a deferred
run is enqueued when its gate opens (with its first due time); a blocked chat's jobs pause
until the person writes; the chat controls' answers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import attrs
import pytest
import trio
import trio.lowlevel

from actors.chat.callbacks import Callbacks, CallbackTable
from actors.chat.command_base import CommandCall
from actors.chat.proactive_commands import OFFER, REMIND_USAGE, Controls, split_when
from actors.queues import inbox
from actors.scheduler import jobs
from actors.scheduler.gates import Limits
from actors.scheduler.routine import Brief, DueRun, RoutineContext
from actors.scheduler.scheduler import Scheduler, SqlDueStore
from actors.telegram.types import CallbackQuery
from runtime import db as dbmod
from runtime.db import Database

MADRID = "Europe/Madrid"
NOW = datetime(2026, 3, 27, 10, 0, tzinfo=UTC)  # 11:00 in Madrid


@attrs.frozen
class StandIn:
    """A routine for the controls (the real ones are actors.scheduler.routines)."""

    name: str
    title: str
    default_schedule: str

    async def decide(self, ctx: RoutineContext) -> Brief | None:
        return Brief(text=self.title)


ROUTINES = [
    StandIn("nightly-reflection", "Nightly reflection", "0 21 * * *"),
    StandIn("weekly-recap", "Weekly recap", "0 18 * * 0"),
]


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def scheduler(db: Database, clock: Clock) -> Scheduler:
    return Scheduler(SqlDueStore(db), Limits(), clock=clock)


async def inbox_runs(db: Database) -> list[DueRun]:
    rows = await db.fetch("SELECT payload FROM inbox WHERE kind = 'routine' ORDER BY id")
    return [DueRun.from_payload(json.loads(r["payload"])) for r in rows]


async def runs(db: Database) -> list[tuple[str, str, str]]:
    rows = await db.fetch("SELECT name, outcome, reason FROM proactive_runs ORDER BY id")
    return [(r["name"], r["outcome"], r["reason"]) for r in rows]


async def user_message(db: Database, chat_id: int, at: datetime) -> None:
    await db.execute(
        "INSERT INTO chat_messages (chat_id, role, content, created_at) VALUES ($1, 'user', "
        "'hi', $2)",
        chat_id,
        at,
    )


async def test_two_schedulers_claim_each_due_job_once(db: Database, database_url: str) -> None:
    for chat in range(1, 41):
        await jobs.create_reminder(db, chat, NOW - timedelta(seconds=5), f"r{chat}", MADRID)
    woken: list[list[int]] = [[], []]
    async with dbmod.open_database(database_url, max_size=2) as other:

        async def one(i: int, database: Database) -> None:
            s = attrs.evolve(scheduler(database, Clock(NOW)), store=SqlDueStore(database, 7))
            for _ in range(10):
                woken[i] += await s.run_once()
                await trio.lowlevel.checkpoint()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(one, 0, db)
            nursery.start_soon(one, 1, other)
    assert sorted(woken[0] + woken[1]) == list(range(1, 41))  # each job by one scheduler
    assert woken[0] and woken[1]  # both took part
    enqueued = await inbox_runs(db)
    assert sorted(r.chat_id for r in enqueued) == list(range(1, 41))
    assert all(r.kind == "reminder" and r.payload["text"] == f"r{r.chat_id}" for r in enqueued)
    left = await db.fetchval("SELECT count(*) FROM cron_jobs WHERE next_run_at IS NOT NULL")
    assert left == 0  # one-shots are finished


async def test_claim_due_locks_chat_by_chat_earliest_first(db: Database) -> None:
    """Due jobs of several chats, claimed one chat per locking statement: chats in the order
    of their earliest due job, at most ``limit`` jobs, none twice across two open
    transactions (the second skips the locked chat's jobs), none not yet due."""
    due = {(1, "a"): 50, (1, "b"): 40, (1, "c"): 10, (2, "d"): 30, (3, "e"): 20, (3, "f"): -60}
    for (chat, text), ago in due.items():
        await jobs.create_reminder(db, chat, NOW - timedelta(seconds=ago), text, MADRID)
    async with db.transaction() as first:
        claimed = await jobs.claim_due(first, NOW, limit=3)
        assert [j.payload["text"] for j in claimed] == ["a", "b", "c"]
        async with db.transaction() as second:
            rest = await jobs.claim_due(second, NOW, limit=10)
            assert [j.payload["text"] for j in rest] == ["d", "e"]  # "f" is not due yet


async def test_a_deferred_run_is_enqueued_when_its_gate_opens(db: Database) -> None:
    await jobs.set_prefs(db, 7, active=True)
    job = await jobs.upsert_routine(
        db, 7, "weight-trend", "0 11 * * *", MADRID, NOW - timedelta(hours=1)
    )
    assert job.next_run_at == NOW
    await user_message(db, 7, NOW - timedelta(minutes=2))  # the person is talking
    clock = Clock(NOW + timedelta(seconds=10))
    s = scheduler(db, clock)
    assert await s.run_once() == []
    assert await runs(db) == [("weight-trend", "deferred", "active conversation")]
    clock.now = NOW + timedelta(minutes=7)
    assert await s.run_once() == []  # not yet: 8 minutes after the message
    clock.now = NOW + timedelta(minutes=8, seconds=1)
    assert await s.run_once() == [7]
    [run] = await inbox_runs(db)
    assert (run.name, run.kind, run.due_at) == ("weight-trend", "routine", NOW)
    [after] = await jobs.list_jobs(db, 7)
    assert after.next_run_at == NOW + timedelta(days=1) and "_due_at" not in after.payload


async def test_a_blocked_chat_pauses_until_the_person_writes(db: Database) -> None:
    await jobs.create_reminder(db, 8, NOW, "water the plants", MADRID)
    await jobs.pause_chat(db, 8, "403 Forbidden: bot was blocked by the user", at=NOW)
    clock = Clock(NOW + timedelta(seconds=1))
    assert await scheduler(db, clock).run_once() == []
    assert await runs(db) == [("reminder-1", "skipped", "paused: the chat blocked the bot")]
    await jobs.create_reminder(db, 8, NOW + timedelta(minutes=5), "again", MADRID)
    await user_message(db, 8, NOW + timedelta(minutes=1))  # the person is back
    clock.now = NOW + timedelta(minutes=5)
    assert await scheduler(db, clock).run_once() == [8]


@pytest.fixture
def controls(db: Database) -> Iterator[Controls]:
    yield Controls(db, MADRID, ROUTINES)


def call(text: str, args: str, chat_id: int = 5) -> CommandCall:
    return CommandCall(chat_id, text, args, now=NOW)


async def test_active_on_creates_the_routines_and_off_stops_them(
    db: Database, controls: Controls
) -> None:
    reply = await controls.active(call("active", "on"))
    assert "Check-ins are on" in reply.text
    assert "Nightly reflection — next Fri 27 Mar 2026, 21:00" in reply.text
    assert "Weekly recap — next Sun 29 Mar 2026, 18:00" in reply.text
    assert (await jobs.prefs(db, 5)).active
    await controls.remind(call("remind", "in 2 hours call mum"))
    listing = await controls.list_routines(call("routines", ""))
    assert listing.keyboard is not None and len(listing.keyboard.to_json()["inline_keyboard"]) == 3
    assert "reminder-3 — Reminder: call mum — next Fri 27 Mar 2026, 13:00" in listing.text
    off = await controls.active(call("active", "off"))
    assert off.text == "Check-ins are off. Reminders you asked for still come."
    assert [j.name for j in await jobs.list_jobs(db, 5)] == ["reminder-3"]
    assert not (await jobs.prefs(db, 5)).active
    assert "Usage" in (await controls.active(call("active", "maybe"))).text


async def test_quiet_and_digest(db: Database, controls: Controls) -> None:
    assert (await controls.quiet(call("quiet", "23-7"))).text == (
        "Quiet hours: no check-ins from 23:00 to 07:00."
    )
    assert (await jobs.prefs(db, 5)).quiet == (23, 7)
    await controls.quiet(call("quiet", "off"))
    assert (await jobs.prefs(db, 5)).quiet is None
    assert "Usage" in (await controls.quiet(call("quiet", "25-3"))).text
    await controls.active(call("active", "on"))
    await controls.digest(call("digest", "daily"))
    recap = [j for j in await jobs.list_jobs(db, 5) if j.name == "weekly-recap"]
    assert recap[0].schedule == "0 18 * * *"
    await controls.digest(call("digest", "off"))
    assert "weekly-recap" not in [j.name for j in await jobs.list_jobs(db, 5)]
    assert "Usage" in (await controls.digest(call("digest", "hourly"))).text


@pytest.mark.parametrize(
    ("args", "local", "what"),
    [
        ("tomorrow 9:00 call mum", "Sat 28 Mar 2026, 09:00", "call mum"),
        ("in 2 hours to take the pills", "Fri 27 Mar 2026, 13:00", "take the pills"),
        ("Sunday water the plants", "Sun 29 Mar 2026, 09:00", "water the plants"),
    ],
)
async def test_remind_confirms_the_resolved_local_time(
    db: Database, controls: Controls, args: str, local: str, what: str
) -> None:
    reply = await controls.remind(call("remind", args))
    assert reply.text == f"I'll remind you on {local}: {what}"
    [job] = await jobs.list_jobs(db, 5)
    assert job.kind == "reminder" and job.payload == {"text": what}


@pytest.mark.parametrize("args", ["", "yesterday call mum", "tomorrow", "whenever call mum"])
async def test_remind_without_a_future_time_is_usage(
    db: Database, controls: Controls, args: str
) -> None:
    assert (await controls.remind(call("remind", args))).text == REMIND_USAGE
    assert await jobs.list_jobs(db, 5) == []


def test_split_when_takes_the_longest_date() -> None:
    parsed = split_when("in 3 seconds test", MADRID, NOW)
    assert parsed == (NOW + timedelta(seconds=3), "test")


async def tap(db: Database, taps: CallbackTable, chat_id: int, token: str, n: int) -> None:
    inbox_id = await inbox.insert_update(db, f"update:{n}", n, chat_id, "callback_query", {})
    assert inbox_id is not None
    query = CallbackQuery(f"q{n}", chat_id, chat_id, 900 + n, token)
    await Callbacks(db, taps).tap(chat_id, inbox_id, query)


async def last_reply(db: Database, chat_id: int) -> tuple[str, list[str], list[str]]:
    """The chat's last outbox row: its text, button labels and tokens."""
    r = await db.fetchrow(
        "SELECT text, reply_markup FROM outbox WHERE chat_id = $1 ORDER BY id DESC LIMIT 1",
        chat_id,
    )
    assert r is not None
    rows = json.loads(r["reply_markup"])["inline_keyboard"] if r["reply_markup"] else []
    buttons = [b for row in rows for b in row]
    return r["text"], [b["text"] for b in buttons], [b["callback_data"] for b in buttons]


async def test_the_pairing_offer_turns_check_ins_on_and_routines_switch_off(
    db: Database, controls: Controls
) -> None:
    taps = CallbackTable()
    controls.register_taps(taps)
    async with db.transaction() as conn:
        await controls.pair_offer(conn, 5)
    text, labels, tokens = await last_reply(db, 5)
    assert text == OFFER and labels == ["Turn on check-ins"]
    assert not (await jobs.prefs(db, 5)).active  # off until the person taps
    await tap(db, taps, 5, tokens[0], 1)
    assert (await jobs.prefs(db, 5)).active
    text, _, _ = await last_reply(db, 5)
    assert text.startswith("Check-ins are on")
    assert [j.name for j in await jobs.list_jobs(db, 5)] == ["nightly-reflection", "weekly-recap"]
    listing = await controls.list_routines(call("routines", ""))
    assert listing.keyboard is not None
    first = listing.keyboard.to_json()["inline_keyboard"][0][0]
    assert first["text"] == "Switch off nightly-reflection"
    await tap(db, taps, 5, first["callback_data"], 2)
    assert [j.name for j in await jobs.list_jobs(db, 5)] == ["weekly-recap"]
    text, labels, _ = await last_reply(db, 5)
    assert text.startswith("Switched off: nightly-reflection.") and labels == [
        "Switch off weekly-recap"
    ]
