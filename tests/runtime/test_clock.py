"""The one clock (runtime/clock.py): local dates and times in TIMEZONE, 24-hour or 12-hour."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, time

import pytest

from runtime import clock

# 23:30 UTC on 31 Dec is already 1 January in Madrid (UTC+1) and still 31 Dec in New York
LATE = datetime(2025, 12, 31, 23, 30, tzinfo=UTC)


@pytest.fixture(autouse=True)
def default_format() -> Iterator[None]:
    yield
    clock.set_time_format("24h")


def test_local_date_is_the_date_in_the_zone_not_in_utc() -> None:
    assert clock.local_date(LATE, "Europe/Madrid") == "2026-01-01"
    assert clock.local_date(LATE, "America/New_York") == "2025-12-31"
    assert clock.local_date(LATE, "UTC") == "2025-12-31"
    assert clock.local_date(date(2026, 3, 7), "Asia/Tokyo") == "2026-03-07"


def test_24_hour_by_default_and_12_hour_when_set() -> None:
    assert clock.local_time(LATE, "Europe/Madrid") == "00:30"
    assert clock.local_datetime(LATE, "Europe/Madrid") == "2026-01-01 00:30"
    clock.set_time_format("12h")
    assert clock.local_time(LATE, "Europe/Madrid") == "12:30 AM"
    assert clock.local_datetime(LATE, "America/New_York") == "2025-12-31 6:30 PM"
    # an explicit format wins over the process's
    assert clock.local_time(LATE, "Europe/Madrid", "24h") == "00:30"


@pytest.mark.parametrize(
    ("t", "h24", "h12"),
    [
        (time(0, 5), "00:05", "12:05 AM"),
        (time(9, 15), "09:15", "9:15 AM"),
        (time(12, 0), "12:00", "12:00 PM"),
        (time(23, 59), "23:59", "11:59 PM"),
    ],
)
def test_clock_text(t: time, h24: str, h12: str) -> None:
    assert clock.clock_text(t, "24h") == h24
    assert clock.clock_text(t, "12h") == h12


def test_naive_datetimes_are_utc_and_timestamps_are_local() -> None:
    assert clock.local_time(datetime(2026, 6, 1, 12, 0), "Europe/Madrid") == "14:00"
    assert clock.timestamp_text(LATE.timestamp(), "Europe/Madrid") == "2026-01-01 00:30"


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError):
        clock.set_time_format("military")
    assert clock.time_format() == "24h"


def test_time_format_setting() -> None:
    from actors.settings import load_settings
    from runtime.errors import SettingsError

    assert load_settings({}, dotenv=None).time_format == "24h"
    assert load_settings({"TIME_FORMAT": "12H"}, dotenv=None).time_format == "12h"
    with pytest.raises(SettingsError) as info:
        load_settings({"TIME_FORMAT": "13h"}, dotenv=None)
    assert info.value.name == "TIME_FORMAT"


# --- the call sites: what the model and the person see ---------------------------------------


def test_a_patterns_last_seen_is_the_persons_date() -> None:
    import numpy as np

    from memory.retrieval.retriever import RankedPattern, memory_block, pattern_line

    p = RankedPattern(
        id=7,
        content="Sleeps badly",
        kind="behavior",
        score=0.5,
        similarity=0.8,
        confidence=0.9,
        strength=2.0,
        status="active",
        last_seen=LATE,
        vector=np.zeros(4, np.float32),
    )
    assert pattern_line(p, "Europe/Madrid").endswith("last 2026-01-01)")
    assert pattern_line(p, "America/New_York").endswith("last 2025-12-31)")
    assert memory_block([p], False, "Europe/Madrid").endswith("last 2026-01-01)")


def test_event_times_and_the_extraction_prompt_follow_the_format() -> None:
    from zoneinfo import ZoneInfo

    from memory.extraction.claims import ChunkMessage
    from memory.extraction.prompt import format_message
    from memory.retrieval.temporal import event_day

    assert event_day(date(2025, 3, 7), time(21, 30)) == "Fri 7 Mar 2025, 21:30"
    row = ChunkMessage(id=3, role="user", content="hi", created_at=LATE)
    assert "2026-01-01 Thu 00:30" in format_message(row, ZoneInfo("Europe/Madrid"))
    clock.set_time_format("12h")
    assert event_day(date(2025, 3, 7), time(21, 30)) == "Fri 7 Mar 2025, 9:30 PM"
    assert "2026-01-01 Thu 12:30 AM" in format_message(row, ZoneInfo("Europe/Madrid"))
