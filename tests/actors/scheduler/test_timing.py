"""The scheduler's timing rules, on a MockClock (autojump) through the in-memory store: local
times across Madrid's DST changes, quiet hours, the daily cap, the cooldown, the
active-conversation guard, the missed-run grace, reminders, the early wake."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import attrs
import pytest
import trio
import trio.testing

from actors.scheduler.gates import Defer, Gate, GateState, Limits, Open, Skip, check, in_quiet
from actors.scheduler.jobs import Job
from actors.scheduler.schedule import next_run, parse_when, valid_cron
from actors.scheduler.scheduler import DUE_KEY, Scheduler, day_start, due_of

MADRID = "Europe/Madrid"


# --- an in-memory DueStore: the same plan applied to jobs held in a list -----------------------


@attrs.define
class MemoryStore:
    jobs: list[Job] = attrs.field(factory=list)
    states: dict[int, GateState] = attrs.field(factory=dict)
    #: (chat_id, job name, due time, when it was enqueued)
    enqueued: list[tuple[int, str, datetime, datetime]] = attrs.field(factory=list)
    #: (job name, outcome, reason)
    runs: list[tuple[str, str, str]] = attrs.field(factory=list)

    #: the routine sends of each chat (the chat actor's ``sent`` rows)
    sent: dict[int, list[datetime]] = attrs.field(factory=dict)

    def state(self, chat_id: int, now: datetime) -> GateState:
        st = self.states.get(chat_id, GateState("Europe/Madrid", active=True))
        sends = self.sent.get(chat_id, [])
        start = day_start(now, st.timezone)
        return attrs.evolve(
            st,
            sends_today=st.sends_today + sum(1 for t in sends if t >= start),
            last_send=max(sends, default=st.last_send),
        )

    async def process_due(
        self, now: datetime, decide: Callable[[Job, GateState, datetime], Gate]
    ) -> list[int]:
        woken: list[int] = []
        for i, job in enumerate(self.jobs):
            if not job.enabled or job.next_run_at is None or job.next_run_at > now:
                continue
            due = due_of(job)
            gate = decide(job, self.state(job.chat_id, now), now)
            payload = {k: v for k, v in job.payload.items() if k != DUE_KEY}
            if isinstance(gate, Open):
                self.enqueued.append((job.chat_id, job.name, due, now))
                nxt = job.after(due)
                woken.append(job.chat_id)
                if job.kind == "routine":  # a send, as the chat actor would record it
                    self.sent.setdefault(job.chat_id, []).append(now)
            elif isinstance(gate, Defer):
                nxt, payload[DUE_KEY] = gate.until, due.isoformat()
                self.runs.append((job.name, "deferred", gate.reason))
            else:
                nxt = job.after(max(due, now))
                self.runs.append((job.name, "skipped", gate.reason))
            self.jobs[i] = attrs.evolve(job, next_run_at=nxt, payload=payload)
        return woken


def routine_job(
    job_id: int, name: str, schedule: str, first: datetime, *, chat_id: int = 1, grace_s: int = 3600
) -> Job:
    return Job(
        job_id, chat_id, name, "routine", schedule, None, "Europe/Madrid", {}, True, grace_s, first
    )


def reminder_job(job_id: int, at: datetime, *, chat_id: int = 1) -> Job:
    return Job(
        job_id,
        chat_id,
        f"reminder-{job_id}",
        "reminder",
        None,
        at,
        "Europe/Madrid",
        {"text": "x"},
        True,
        3600,
        at,
    )


def test_cron_next_run_across_spring_forward_and_fall_back() -> None:
    # 2026-03-29: 02:00 CET -> 03:00 CEST; 02:30 does not exist: it runs at 03:00 CEST
    assert next_run("30 2 * * *", MADRID, datetime(2026, 3, 28, 12, tzinfo=UTC)) == datetime(
        2026, 3, 29, 1, 0, tzinfo=UTC
    )
    # 09:00 local is 08:00 UTC before the change and 07:00 UTC after it
    assert next_run("0 9 * * *", MADRID, datetime(2026, 3, 28, 12, tzinfo=UTC)) == datetime(
        2026, 3, 29, 7, 0, tzinfo=UTC
    )
    # 2026-10-25: 03:00 CEST -> 02:00 CET; 02:30 happens twice and runs once
    first = next_run("30 2 * * *", MADRID, datetime(2026, 10, 24, 12, tzinfo=UTC))
    assert first == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
    assert next_run("30 2 * * *", MADRID, first) == datetime(2026, 10, 26, 1, 30, tzinfo=UTC)
    assert valid_cron("0 18 * * 0") and not valid_cron("every day")


def test_natural_dates_in_the_chats_zone() -> None:
    now = datetime(2026, 3, 27, 10, tzinfo=UTC)  # 11:00 in Madrid, a Friday
    assert parse_when("tomorrow 9:00", MADRID, now) == datetime(2026, 3, 28, 8, tzinfo=UTC)
    assert parse_when("in 2 hours", MADRID, now) == datetime(2026, 3, 27, 12, tzinfo=UTC)
    # a day without a time: 09:00 local (CEST by then)
    assert parse_when("Sunday", MADRID, now) == datetime(2026, 3, 29, 7, tzinfo=UTC)
    assert parse_when("yesterday", MADRID, now) is None
    assert parse_when("blah blah", MADRID, now) is None


def test_quiet_hours_wrap_midnight() -> None:
    at = [datetime(2026, 1, 1, h, tzinfo=UTC) for h in (21, 22, 3, 7, 8)]
    assert [in_quiet((22, 8), t) for t in at] == [False, True, True, True, False]
    assert in_quiet((13, 15), datetime(2026, 1, 1, 14, tzinfo=UTC))
    assert not in_quiet(None, at[1])


def test_reminders_obey_only_paused() -> None:
    night = datetime(2026, 1, 1, 23, 30, tzinfo=UTC)
    off = GateState(MADRID, active=False, sends_today=9)
    assert check("reminder", off, night, Limits()) == Open()
    assert isinstance(check("routine", off, night, Limits()), Skip)
    paused = attrs.evolve(off, paused=True)
    assert check("reminder", paused, night, Limits()) == Skip("paused: the chat blocked the bot")


START = datetime(2026, 3, 27, 0, 0, tzinfo=UTC)  # Friday; DST starts on Sunday the 29th


DEFAULTS = Limits()


def sched(store: MemoryStore, limits: Limits = DEFAULTS, tick: float = 30.0) -> Scheduler:
    base = trio.current_time()
    return Scheduler(
        store,
        limits,
        tick=tick,
        clock=lambda: START + timedelta(seconds=trio.current_time() - base),
    )


async def play(s: Scheduler, seconds: float) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(s.run)
        await trio.sleep(seconds)
        nursery.cancel_scope.cancel()


def local_hm(t: datetime) -> str:
    return t.astimezone(__import__("zoneinfo").ZoneInfo(MADRID)).strftime("%m-%d %H:%M")


async def test_a_daily_routine_runs_at_its_local_time_across_dst(
    autojump_clock: trio.testing.MockClock,
) -> None:
    first = next_run("0 9 * * *", MADRID, START)
    store = MemoryStore([routine_job(1, "weight-trend", "0 9 * * *", first)])
    await play(sched(store), 4 * 86400)
    sent = [(local_hm(at), at.hour) for _, _, _, at in store.enqueued]
    # once a day at 09:00 local (within a tick), 08:00 UTC before the change, 07:00 after
    assert [s[0][:11] for s in sent] == ["03-27 09:00", "03-28 09:00", "03-29 09:00", "03-30 09:00"]
    assert [s[1] for s in sent] == [8, 8, 7, 7]


async def test_quiet_hours_defer_to_their_end_or_skip_past_the_grace(
    autojump_clock: trio.testing.MockClock,
) -> None:
    first = next_run("0 23 * * *", MADRID, START)
    store = MemoryStore(
        [
            routine_job(1, "late", "0 23 * * *", first),
            routine_job(2, "late-patient", "0 23 * * *", first, grace_s=12 * 3600),
        ]
    )
    await play(sched(store), 36 * 3600)
    assert ("late", "skipped", "quiet hours 22-08 past the grace") in store.runs
    assert ("late-patient", "deferred", "quiet hours 22-08") in store.runs
    assert [(name, local_hm(at)) for _, name, _, at in store.enqueued] == [
        ("late-patient", "03-28 08:00")
    ]


async def test_at_most_n_sends_a_day(autojump_clock: trio.testing.MockClock) -> None:
    store = MemoryStore(
        [
            routine_job(i, f"r{i}", f"0 {h} * * *", next_run(f"0 {h} * * *", MADRID, START))
            for i, h in enumerate((9, 12, 15, 18), start=1)
        ]
    )
    await play(sched(store, Limits(cooldown_s=0)), 86400 - 3600)
    assert [name for _, name, _, _ in store.enqueued] == ["r1", "r2"]
    assert ("r3", "skipped", "daily cap: 2 sent today (max 2)") in store.runs
    assert ("r4", "skipped", "daily cap: 2 sent today (max 2)") in store.runs


async def test_the_cooldown_after_a_send_defers(autojump_clock: trio.testing.MockClock) -> None:
    store = MemoryStore(
        [
            routine_job(1, "a", "0 9 * * *", next_run("0 9 * * *", MADRID, START)),
            routine_job(
                2, "b", "0 10 * * *", next_run("0 10 * * *", MADRID, START), grace_s=5 * 3600
            ),
            routine_job(3, "c", "0 11 * * *", next_run("0 11 * * *", MADRID, START)),
        ]
    )
    await play(sched(store), 86400 - 3600)
    got = [(name, local_hm(at)[6:]) for _, name, _, at in store.enqueued]
    assert got == [("a", "09:00"), ("b", "13:00")]  # b waited out the 4 h cooldown
    assert ("c", "skipped", "cooldown after a send past the grace") in store.runs


async def test_the_active_conversation_guard_defers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    due = next_run("0 9 * * *", MADRID, START)
    wrote = due - timedelta(minutes=5)
    store = MemoryStore(
        [routine_job(1, "a", "0 9 * * *", due)],
        {1: GateState(MADRID, active=True, last_person_message=wrote)},
    )
    await play(sched(store), 86400 - 3600)
    assert ("a", "deferred", "active conversation") in store.runs
    [(_, _, due_at, at)] = store.enqueued
    assert due_at == due and local_hm(at)[6:] == "09:05"


async def test_a_missed_run_runs_once_within_its_grace_else_is_skipped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore(
        [
            routine_job(1, "recent", "30 0 * * *", START - timedelta(minutes=30)),
            reminder_job(2, START - timedelta(hours=2)),
        ]
    )
    await play(sched(store, Limits(quiet_hours=None)), 60)  # 01:00 in Madrid
    assert [(name, at) for _, name, _, at in store.enqueued] == [("recent", START)]
    assert store.runs == [("reminder-2", "skipped", "missed: 7200 s late")]
    assert store.jobs[1].next_run_at is None  # a one-shot is finished either way


async def test_a_new_job_wakes_the_scheduler_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    s = sched(store, tick=3600.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(s.run)
        await trio.sleep(10)
        store.jobs.append(reminder_job(1, START + timedelta(seconds=10)))
        s.poke()
        await trio.sleep(1)
        assert [name for _, name, _, _ in store.enqueued] == ["reminder-1"]
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("hours", [(22, 8), None])
async def test_reminders_ring_in_quiet_hours(
    autojump_clock: trio.testing.MockClock, hours: tuple[int, int] | None
) -> None:
    at = START + timedelta(hours=1)  # 02:00 in Madrid
    store = MemoryStore([reminder_job(1, at)], {1: GateState(MADRID, active=False)})
    await play(sched(store, Limits(quiet_hours=hours)), 3600 + 60)
    assert [(name, due) for _, name, due, _ in store.enqueued] == [("reminder-1", at)]


async def test_aclose_ends_the_loop_between_ticks(autojump_clock: trio.testing.MockClock) -> None:
    store = MemoryStore()
    s = sched(store, tick=3600.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(s.run)
        await trio.sleep(10)
        with trio.fail_after(1):
            await s.aclose()
        store.jobs.append(reminder_job(1, START))
        s.poke()
        await trio.sleep(5)
    assert store.enqueued == []  # stopped: no tick after the drain
