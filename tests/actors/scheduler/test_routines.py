"""The routines' rules against the real database: for each one a case where it has something to
say (and what) and one where it has nothing; local-day boundaries in non-UTC zones; every rule
scoped to its chat; and no rule ever reaching a model."""

from __future__ import annotations

import ast
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

import actors.scheduler.routines as routines_pkg
from actors.scheduler.routine import Brief, RoutineContext
from actors.scheduler.routine_settings import RoutineSettings
from actors.scheduler.routines import all_routines
from actors.scheduler.routines.days import day_bounds
from actors.scheduler.routines.event_reminders import EventReminders
from actors.scheduler.routines.nightly_reflection import NightlyReflection
from actors.scheduler.routines.on_this_day import OnThisDay
from actors.scheduler.routines.weekly_recap import WeeklyRecap, period_days
from actors.scheduler.routines.weight_trend import WeightTrendRoutine
from runtime.db import Database
from runtime.settings import load_settings

A, B = 1, 2
NY = "America/New_York"


def ctx(
    db: Database, now: datetime, tz: str = NY, chat_id: int = A, **payload: Any
) -> RoutineContext:
    return RoutineContext(db=db, chat_id=chat_id, timezone=tz, now=now, payload=payload)


def local(tz: str, year: int, month: int, day: int, hour: int, minute: int) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=ZoneInfo(tz))


async def message(db: Database, at: datetime, role: str = "user", chat_id: int = A) -> None:
    await db.execute(
        "INSERT INTO chat_messages (chat_id, role, content, created_at) VALUES ($1, $2, 'hi', $3)",
        chat_id,
        role,
        at,
    )


async def entry(
    db: Database,
    uuid: str,
    at: datetime,
    text: str = "a day",
    chat_id: int = A,
    tz: str | None = None,
) -> None:
    await db.execute(
        "INSERT INTO entries (uuid, created_at, timezone, text, chat_id) "
        "VALUES ($1, $2, $3, $4, $5)",
        uuid,
        at,
        tz,
        text,
        chat_id,
    )


async def pattern(
    db: Database,
    content: str,
    *,
    kind: str = "behavior",
    created: datetime,
    last_seen: datetime | None = None,
    times_seen: int = 1,
    status: str = "active",
    chat_id: int = A,
    occurs_on: date | None = None,
    occurs_at: time | None = None,
) -> None:
    await db.execute(
        "INSERT INTO patterns (chat_id, content, kind, canonical_hash, first_seen, last_seen, "
        "created_at, times_seen, status, occurs_on, occurs_at) "
        "VALUES ($1, $2, $3, md5($2), $4, $5, $4, $6, $7, $8, $9)",
        chat_id,
        content,
        kind,
        created,
        last_seen or created,
        times_seen,
        status,
        occurs_on,
        occurs_at,
    )


async def sent(db: Database, name: str, at: datetime, chat_id: int = A) -> None:
    await db.execute(
        "INSERT INTO proactive_runs (chat_id, name, due_at, outcome, at) "
        "VALUES ($1, $2, $3, 'sent', $3)",
        chat_id,
        name,
        at,
    )


async def weigh(db: Database, day: date, kg: float, chat_id: int = A) -> None:
    await db.execute(
        "INSERT INTO daily_metrics (chat_id, date, weight_kg) VALUES ($1, $2, $3)", chat_id, day, kg
    )


def prompt_of(brief: Brief | None) -> str:
    assert brief is not None and brief.text is None and brief.prompt is not None
    return brief.prompt


def text_of(brief: Brief | None) -> str:
    assert brief is not None and brief.prompt is None and brief.text is not None
    return brief.text


# --- nightly-reflection ------------------------------------------------------------------------

EVENING = local(NY, 2024, 1, 10, 21, 0)  # 02:00 UTC on 11 January


async def test_reflection_on_a_silent_day_asks_tied_to_the_strongest_goal(db: Database) -> None:
    await message(db, EVENING - timedelta(days=1))  # yesterday
    await message(db, EVENING - timedelta(hours=2), role="assistant")  # not the person
    await message(db, EVENING - timedelta(hours=2), chat_id=B)  # another chat
    await entry(db, "B-today", EVENING - timedelta(hours=3), chat_id=B)
    await pattern(db, "run a <b>marathon</b> in May", kind="goal", created=EVENING)
    await pattern(db, "learn the cello", kind="goal", created=EVENING, chat_id=B)
    text = prompt_of(await NightlyReflection().decide(ctx(db, EVENING)))
    assert "reflection question" in text and "decline" in text
    assert "run a &lt;b&gt;marathon&lt;/b&gt; in May" in text and "<untrusted" in text
    assert "cello" not in text
    await db.execute("DELETE FROM patterns")
    assert "<untrusted" not in prompt_of(await NightlyReflection().decide(ctx(db, EVENING)))


async def test_reflection_says_nothing_after_a_message_or_an_entry_that_day(db: Database) -> None:
    await message(db, EVENING - timedelta(hours=5))
    assert await NightlyReflection().decide(ctx(db, EVENING)) is None
    await db.execute("UPDATE chat_messages SET compacted_at = $1", EVENING - timedelta(hours=1))
    assert await NightlyReflection().decide(ctx(db, EVENING)) is None  # compacted, still written
    await db.execute("DELETE FROM chat_messages")
    assert await NightlyReflection().decide(ctx(db, EVENING)) is not None
    await entry(db, "today", EVENING - timedelta(hours=8))
    assert await NightlyReflection().decide(ctx(db, EVENING)) is None


async def test_reflection_reckons_the_day_in_the_chats_zone(db: Database) -> None:
    # 23:59 on 9 January in New York is 04:59 UTC on the 10th: the UTC day of the run's date,
    # but the local day before
    await message(db, local(NY, 2024, 1, 9, 23, 59))
    assert await NightlyReflection().decide(ctx(db, EVENING)) is not None
    # in UTC the same message is on the 10th (and the run at 02:00 UTC on the 11th is not)
    assert await NightlyReflection().decide(ctx(db, EVENING, tz="UTC")) is not None
    await message(db, local(NY, 2024, 1, 10, 0, 1))
    assert await NightlyReflection().decide(ctx(db, EVENING)) is None


@pytest.mark.parametrize(
    ("day", "hours"), [(date(2024, 11, 3), 25), (date(2024, 3, 10), 23), (date(2024, 6, 1), 24)]
)
def test_a_local_day_is_23_24_or_25_hours(day: date, hours: int) -> None:
    start, end = day_bounds(day, NY)
    assert start == local(NY, day.year, day.month, day.day, 0, 0)
    assert end.astimezone(ZoneInfo(NY)).date() == day + timedelta(days=1)
    assert end.astimezone(ZoneInfo(NY)).hour == 0
    # (aware datetimes of one zone subtract as wall clocks: the instants are compared in UTC)
    assert end.astimezone(UTC) - start.astimezone(UTC) == timedelta(hours=hours)


async def test_reflection_day_lasts_25_hours_when_the_clocks_fall_back(db: Database) -> None:
    run = local(NY, 2024, 11, 3, 21, 0)  # DST ends at 02:00 on 3 November
    await message(db, local(NY, 2024, 11, 3, 0, 30))  # 04:30 UTC: 25 h before the day's end
    assert await NightlyReflection().decide(ctx(db, run)) is None


# --- weekly-recap ------------------------------------------------------------------------------

SUNDAY = local(NY, 2024, 3, 17, 18, 0)


async def test_recap_lists_the_weeks_new_and_reinforced_patterns(db: Database) -> None:
    await pattern(db, "walks at dawn", created=SUNDAY - timedelta(days=2))
    await pattern(db, "worried about the move", kind="emotion", created=SUNDAY - timedelta(days=3))
    await pattern(
        db,
        "drinks tea",
        kind="preference",
        created=SUNDAY - timedelta(days=60),
        last_seen=SUNDAY - timedelta(days=1),
        times_seen=4,
    )
    await pattern(db, "old and quiet", created=SUNDAY - timedelta(days=60))
    await pattern(
        db,
        "seen once, long ago",
        created=SUNDAY - timedelta(days=60),
        last_seen=SUNDAY - timedelta(days=1),
    )
    await pattern(
        db, "forgotten this week", created=SUNDAY - timedelta(days=1), status="deprecated"
    )
    await pattern(db, "the other chat's habit", created=SUNDAY - timedelta(days=1), chat_id=B)
    text = prompt_of(await WeeklyRecap().decide(ctx(db, SUNDAY)))
    assert "this week" in text and "2 new things noticed, 1 confirmed again" in text
    assert "walks at dawn" in text and "worried about the move" in text
    assert "drinks tea (seen 4×)" in text
    for absent in ("old and quiet", "seen once", "forgotten this week", "other chat"):
        assert absent not in text
    assert "habits (1)" in text and "feelings (1)" in text and "preferences (1)" in text


async def test_recap_says_nothing_when_nothing_was_learned(db: Database) -> None:
    await pattern(
        db,
        "old and quiet",
        created=SUNDAY - timedelta(days=60),
        last_seen=SUNDAY - timedelta(days=8),
        times_seen=5,
    )
    await pattern(db, "the other chat's habit", created=SUNDAY - timedelta(days=1), chat_id=B)
    assert await WeeklyRecap().decide(ctx(db, SUNDAY)) is None


@pytest.mark.parametrize(
    ("payload", "days"),
    [
        ({}, 7),
        ({"days": 1}, 1),
        ({"days": 31}, 31),
        ({"days": 0}, 7),
        ({"days": "1"}, 7),
        ({"days": True}, 7),
        ({"days": 400}, 7),
    ],
)
def test_recap_period_from_the_payload(payload: dict[str, Any], days: int) -> None:
    assert period_days(payload) == days


async def test_daily_digest_recaps_one_day(db: Database) -> None:
    await pattern(db, "two days old", created=SUNDAY - timedelta(days=2))
    assert await WeeklyRecap().decide(ctx(db, SUNDAY, days=1)) is None
    await pattern(db, "this morning", created=SUNDAY - timedelta(hours=8))
    text = prompt_of(await WeeklyRecap().decide(ctx(db, SUNDAY, days=1)))
    assert "today" in text and "this morning" in text and "two days old" not in text


# --- weight-trend ------------------------------------------------------------------------------

MORNING = local(NY, 2024, 6, 15, 9, 0)
TODAY = date(2024, 6, 15)


async def test_weight_trend_alerts_past_the_threshold(db: Database) -> None:
    for i in range(7):  # +0.3 kg a day over the last week: ~1.8 kg
        await weigh(db, TODAY - timedelta(days=6 - i), 80 + 0.3 * i)
    await weigh(db, TODAY - timedelta(days=20), 95.0)  # outside the 14 days
    await weigh(db, TODAY, 50.0, chat_id=B)
    text = prompt_of(await WeightTrendRoutine().decide(ctx(db, MORNING)))
    assert "trended up by about 1.8 kg" in text and "7 readings" in text
    assert "09 Jun to 15 Jun" in text and "+2.1 kg a week" in text and "decline" in text


async def test_weight_trend_says_nothing_within_the_threshold_or_too_few(db: Database) -> None:
    routine = WeightTrendRoutine(threshold_kg=1.0, min_readings=4)
    for i, kg in enumerate((80.0, 80.4, 79.8, 80.3, 80.1)):
        await weigh(db, TODAY - timedelta(days=8 - 2 * i), kg)
    assert await routine.decide(ctx(db, MORNING)) is None
    await db.execute("DELETE FROM daily_metrics")
    for i, kg in enumerate((80.0, 82.0, 84.0)):  # a steep trend on three readings
        await weigh(db, TODAY - timedelta(days=2 - i), kg)
    assert await routine.decide(ctx(db, MORNING)) is None
    assert await WeightTrendRoutine(min_readings=3).decide(ctx(db, MORNING)) is not None


async def test_weight_trend_is_not_raised_twice_in_a_week(db: Database) -> None:
    for i in range(5):
        await weigh(db, TODAY - timedelta(days=4 - i), 80 - 0.5 * i)
    routine = WeightTrendRoutine()
    assert "down by about 2.0 kg" in prompt_of(await routine.decide(ctx(db, MORNING)))
    await sent(db, "weight-trend", MORNING - timedelta(days=6), chat_id=B)  # another chat's
    await sent(db, "on-this-day", MORNING - timedelta(days=1))  # another routine's
    assert await routine.decide(ctx(db, MORNING)) is not None
    await sent(db, "weight-trend", MORNING - timedelta(days=6))
    assert await routine.decide(ctx(db, MORNING)) is None


async def test_weight_trend_window_ends_on_the_local_day(db: Database) -> None:
    # 23:00 UTC on 15 June is 09:00 on the 16th in Auckland: its window is 3..16 June
    auckland = "Pacific/Auckland"
    run = local(auckland, 2024, 6, 16, 9, 0)
    await weigh(db, date(2024, 6, 2), 70.0)  # in a UTC window (2..15 June), not Auckland's
    for i in range(4):
        await weigh(db, date(2024, 6, 13 + i), 80.0)
    assert await WeightTrendRoutine().decide(ctx(db, run, tz=auckland)) is None
    assert await WeightTrendRoutine().decide(ctx(db, run, tz="UTC")) is not None


# --- on-this-day -------------------------------------------------------------------------------

TOKYO = "Asia/Tokyo"
TOKYO_MORNING = local(TOKYO, 2024, 6, 15, 10, 0)  # 01:00 UTC


async def test_on_this_day_brings_earlier_years_entries(db: Database) -> None:
    await entry(db, "y2022", local(TOKYO, 2022, 6, 15, 20, 0), "Moved into the <flat> by the river")
    await entry(db, "y2021", local(TOKYO, 2021, 6, 15, 0, 30), "First swim of the summer")
    await entry(db, "today", local(TOKYO, 2024, 6, 15, 8, 0), "This morning's entry")
    await entry(db, "eve", local(TOKYO, 2021, 6, 14, 23, 59), "The day before")
    await entry(db, "blank", local(TOKYO, 2020, 6, 15, 12, 0), "   ")
    await entry(db, "theirs", local(TOKYO, 2021, 6, 15, 12, 0), "Other chat's diary", chat_id=B)
    text = prompt_of(await OnThisDay().decide(ctx(db, TOKYO_MORNING, tz=TOKYO)))
    assert "Moved into the &lt;flat&gt; by the river" in text and "First swim" in text
    assert '<untrusted source="journal 2022-06-15 (2 years ago)">' in text
    assert "(3 years ago)" in text and "decline" in text
    for absent in ("This morning's", "The day before", "Other chat's"):
        assert absent not in text
    # 00:30 on the 15th in Tokyo is the 14th in UTC: another day there
    utc = prompt_of(await OnThisDay().decide(ctx(db, TOKYO_MORNING, tz="UTC")))
    assert "First swim" not in utc and "Moved into" in utc


async def test_on_this_day_says_nothing_without_earlier_entries(db: Database) -> None:
    await entry(db, "today", local(TOKYO, 2024, 6, 15, 8, 0), "This morning's entry")
    await entry(db, "eve", local(TOKYO, 2021, 6, 16, 0, 1), "The day after")
    await entry(db, "theirs", local(TOKYO, 2021, 6, 15, 12, 0), "Other chat's diary", chat_id=B)
    assert await OnThisDay().decide(ctx(db, TOKYO_MORNING, tz=TOKYO)) is None


async def test_on_this_day_uses_the_entrys_own_zone(db: Database) -> None:
    # written at 20:00 on 14 June in New York: the 15th in Tokyo, but the entry's own day rules
    await entry(db, "ny", local(NY, 2021, 6, 14, 20, 0), "Written in New York", tz=NY)
    assert await OnThisDay().decide(ctx(db, TOKYO_MORNING, tz=TOKYO)) is None


# --- event-reminders ---------------------------------------------------------------------------

AUCKLAND = "Pacific/Auckland"
EV_MORNING = local(AUCKLAND, 2024, 3, 15, 8, 0)  # 19:00 UTC on the 14th
EV_EVENING = local(AUCKLAND, 2024, 3, 15, 19, 0)


async def events(db: Database) -> None:
    at = EV_MORNING - timedelta(days=5)
    await pattern(
        db,
        "team offsite",
        kind="event",
        created=at,
        occurs_on=date(2024, 3, 15),
        occurs_at=time(15, 30),
    )
    await pattern(db, "mum's birthday", kind="event", created=at, occurs_on=date(2024, 3, 15))
    await pattern(
        db, "dentist", kind="event", created=at, occurs_on=date(2024, 3, 16), occurs_at=time(9, 0)
    )
    await pattern(
        db,
        "cancelled dinner",
        kind="event",
        created=at,
        occurs_on=date(2024, 3, 15),
        status="deprecated",
    )
    await pattern(
        db, "their concert", kind="event", created=at, occurs_on=date(2024, 3, 15), chat_id=B
    )


async def test_event_reminders_morning_of_and_evening_before(db: Database) -> None:
    await events(db)
    morning = text_of(await EventReminders().decide(ctx(db, EV_MORNING, tz=AUCKLAND)))
    assert morning == "📅 Today:\n• mum's birthday\n• 15:30 team offsite"
    evening = text_of(await EventReminders().decide(ctx(db, EV_EVENING, tz=AUCKLAND)))
    assert evening == "📅 Tomorrow:\n• 09:00 dentist"
    # in UTC the morning run (19:00 on the 14th) is an evening: the 15th is tomorrow
    utc = text_of(await EventReminders().decide(ctx(db, EV_MORNING, tz="UTC")))
    assert utc.startswith("📅 Tomorrow:\n") and "team offsite" in utc and "dentist" not in utc


async def test_event_reminders_say_nothing_without_events(db: Database) -> None:
    await pattern(
        db,
        "their concert",
        kind="event",
        created=EV_MORNING,
        occurs_on=date(2024, 3, 15),
        chat_id=B,
    )
    await pattern(db, "next week", kind="event", created=EV_MORNING, occurs_on=date(2024, 3, 22))
    assert await EventReminders().decide(ctx(db, EV_MORNING, tz=AUCKLAND)) is None
    assert await EventReminders().decide(ctx(db, EV_EVENING, tz=AUCKLAND)) is None


async def test_each_event_is_reminded_once_per_slot(db: Database) -> None:
    await events(db)
    # last evening's reminder (of today's events) does not silence this morning's
    await sent(db, "event-reminders", EV_EVENING - timedelta(days=1))
    await sent(db, "event-reminders", EV_MORNING, chat_id=B)
    assert await EventReminders().decide(ctx(db, EV_MORNING, tz=AUCKLAND)) is not None
    await sent(db, "event-reminders", EV_MORNING)
    later = EV_MORNING + timedelta(hours=2)  # a repeated or deferred morning run
    assert await EventReminders().decide(ctx(db, later, tz=AUCKLAND)) is None
    # the evening's slot is its own
    assert await EventReminders().decide(ctx(db, EV_EVENING, tz=AUCKLAND)) is not None


async def test_daily_routines_speak_once_a_local_day(db: Database) -> None:
    now = local(NY, 2024, 6, 16, 21, 0)  # a Sunday; 01:00 UTC on the 17th
    await pattern(db, "reads before bed", created=now - timedelta(days=1))
    await entry(db, "old", local(NY, 2020, 6, 16, 9, 0), "A long walk", tz=NY)
    for routine in (NightlyReflection(), WeeklyRecap(), OnThisDay()):
        await sent(db, routine.name, local(NY, 2024, 6, 15, 23, 30))  # yesterday, local
        await sent(db, routine.name, local(NY, 2024, 6, 16, 1, 0), chat_id=B)
        assert await routine.decide(ctx(db, now)) is not None, routine.name
        await sent(db, routine.name, local(NY, 2024, 6, 16, 0, 30))
        assert await routine.decide(ctx(db, now)) is None, routine.name


# --- all routines: names, schedules, no model --------------------------------------------------


def test_all_routines_have_the_designs_names_and_schedules() -> None:
    settings = load_settings(RoutineSettings, {}, dotenv=None)
    got = {r.name: r.default_schedule for r in all_routines(settings)}
    assert got == {
        "nightly-reflection": "0 21 * * *",
        "weekly-recap": "0 18 * * 0",
        "weight-trend": "0 9 * * *",
        "on-this-day": "0 10 * * *",
        "event-reminders": "0 8,19 * * *",
    }
    custom = load_settings(
        RoutineSettings,
        {"WEIGHT_TREND_THRESHOLD_KG": "2.5", "WEIGHT_TREND_MIN_READINGS": "6"},
        dotenv=None,
    )
    [weight] = [r for r in all_routines(custom) if isinstance(r, WeightTrendRoutine)]
    assert (weight.threshold_kg, weight.min_readings) == (2.5, 6)
    assert all(r.title for r in all_routines(settings))


#: what a rule must never reach: a model, an embedder, the network
FORBIDDEN = (
    "memory.llm",
    "memory.embeddings",
    "memory.extraction",
    "memory.compaction",
    "actors.agent",
    "runtime.http",
    "anthropic",
    "openai",
    "httpx",
)


@pytest.mark.parametrize("module", sorted(Path(routines_pkg.__file__).parent.glob("*.py")))
def test_no_routine_module_imports_a_model_or_the_network(module: Path) -> None:
    imported: list[str] = []
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.append(node.module)
        elif isinstance(node, ast.Import):
            imported += [a.name for a in node.names]
    assert imported and not [m for m in imported if m.startswith(FORBIDDEN)], imported


async def test_every_rule_decides_with_no_model_at_all(db: Database) -> None:
    """Every routine says yes on a database made for it, with nothing but the database in its
    context: no model call is possible, and none is recorded."""
    tz = "Europe/Madrid"
    now = local(tz, 2024, 6, 16, 19, 30)  # a Sunday evening
    await pattern(db, "reads before bed", created=now - timedelta(days=1))
    await pattern(db, "concert", kind="event", created=now, occurs_on=date(2024, 6, 17))
    await entry(db, "old", local(tz, 2020, 6, 16, 9, 0), "A long walk")
    for i in range(6):
        await weigh(db, date(2024, 6, 11 + i), 70 + 0.5 * i)
    settings = load_settings(RoutineSettings, {}, dotenv=None)
    briefs = {r.name: await r.decide(ctx(db, now, tz=tz)) for r in all_routines(settings)}
    assert all(b is not None for b in briefs.values()), briefs
    assert text_of(briefs["event-reminders"]) == "📅 Tomorrow:\n• concert"
    assert await db.fetchval("SELECT count(*) FROM api_usage") == 0
