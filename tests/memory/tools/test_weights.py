"""The weight trend (a pure least-squares rule) and the ``weight_history`` tool (the turn's
chat's readings only) against the real database."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from memory.journal.tools import journal_registry
from memory.tools.registry import ToolContext
from memory.tools.weights import weight_trend
from runtime.db import Database

D0 = date(2024, 1, 1)
days = st.lists(st.integers(0, 60), min_size=2, max_size=30, unique=True)
kg = st.floats(30, 200, allow_nan=False)


@given(days, kg, st.floats(-1, 1, allow_nan=False))
def test_a_straight_line_is_its_own_trend(offsets: list[int], start: float, slope: float) -> None:
    readings = [(D0 + timedelta(days=x), start + slope * x) for x in offsets]
    trend = weight_trend(readings)
    assert trend is not None and trend.readings == len(offsets)
    span = max(offsets) - min(offsets)
    assert abs(trend.change_kg - slope * span) < 1e-6
    assert abs(trend.per_week_kg - slope * 7) < 1e-6
    assert trend.first == D0 + timedelta(days=min(offsets))
    assert trend.last == D0 + timedelta(days=max(offsets))


@given(
    st.lists(st.tuples(st.integers(0, 60), kg), min_size=2, max_size=30, unique_by=lambda r: r[0]),
    st.floats(-20, 20, allow_nan=False),
)
def test_trend_ignores_order_and_level(raw: list[tuple[int, float]], shift: float) -> None:
    readings = [(D0 + timedelta(days=x), w) for x, w in raw]
    trend = weight_trend(readings)
    assert trend is not None
    again = weight_trend(list(reversed(readings)))
    shifted = weight_trend([(d, w + shift) for d, w in readings])
    assert again is not None and shifted is not None
    assert abs(again.change_kg - trend.change_kg) < 1e-6
    assert abs(shifted.change_kg - trend.change_kg) < 1e-6


def test_one_outlier_moves_the_line_less_than_the_endpoints() -> None:
    last = [(D0 + timedelta(days=i), 80.0) for i in range(7)] + [(D0 + timedelta(days=7), 84.0)]
    trend = weight_trend(last)
    assert trend is not None and 0 < trend.change_kg < 84.0 - 80.0
    middle = [(D0 + timedelta(days=i), 84.0 if i == 3 else 80.0) for i in range(7)]
    flat = weight_trend(middle)
    assert flat is not None and abs(flat.change_kg) < 1e-9


def test_no_trend_from_fewer_than_two_days() -> None:
    assert weight_trend([]) is None
    assert weight_trend([(D0, 80.0)]) is None
    flat = weight_trend([(D0, 80.0), (D0 + timedelta(days=3), 80.0)])
    assert flat is not None and flat.change_kg == 0


# --- weight_history ----------------------------------------------------------------------------

REGISTRY = journal_registry()
NOW = datetime(2024, 6, 15, 23, 30, tzinfo=UTC)  # the 16th in Auckland


def make_ctx(db: Database, chat_id: int = 1, tz: str = "Pacific/Auckland") -> ToolContext:
    return ToolContext(db=db, embedder=None, chat_id=chat_id, timezone=tz, now=NOW)


async def call(ctx: ToolContext, **raw: Any) -> dict[str, Any]:
    out = await REGISTRY.call("weight_history", raw, ctx)
    result: dict[str, Any] = json.loads(out.content)
    assert not out.is_error, result
    return result


async def weigh(db: Database, day: date, kg_: float, chat_id: int = 1) -> None:
    await db.execute(
        "INSERT INTO daily_metrics (chat_id, date, weight_kg) VALUES ($1, $2, $3)",
        chat_id,
        day,
        kg_,
    )


async def test_weight_history_shows_the_chats_month_and_its_trend(db: Database) -> None:
    for i, w in enumerate((82.0, 81.6, 81.5, 81.0)):
        await weigh(db, date(2024, 5, 20) + timedelta(days=7 * i), w)
    await weigh(db, date(2024, 5, 10), 90.0)  # before the last 30 days
    await weigh(db, date(2024, 6, 16), 60.0, chat_id=2)  # another chat's
    await weigh(db, date(2024, 6, 1), 61.0, chat_id=2)
    got = await call(make_ctx(db))
    assert (got["date_from"], got["date_to"]) == ("2024-05-18", "2024-06-16")  # local today
    assert [r["weight_kg"] for r in got["readings"]] == [82.0, 81.6, 81.5, 81.0]
    assert got["count"] == 4 and got["change_kg"] == -1.0
    assert got["first"] == {"date": "2024-05-20", "weight_kg": 82.0}
    assert got["last"] == {"date": "2024-06-10", "weight_kg": 81.0}
    assert -1.0 < got["trend"]["change_kg"] < -0.8 and got["trend"]["per_week_kg"] < 0
    theirs = await call(make_ctx(db, chat_id=2))
    assert [r["weight_kg"] for r in theirs["readings"]] == [61.0, 60.0]
    assert "82.0" not in json.dumps(theirs) and "90.0" not in json.dumps(theirs)
    span = await call(make_ctx(db), date_from="2024-05-01", date_to="2024-05-20")
    assert [r["weight_kg"] for r in span["readings"]] == [90.0, 82.0]


async def test_weight_history_with_no_readings_and_bad_ranges(db: Database) -> None:
    await weigh(db, date(2024, 6, 10), 70.0, chat_id=2)
    empty = await call(make_ctx(db))
    assert empty["count"] == 0 and empty["readings"] == [] and "trend" not in empty
    for raw, field in (
        ({"date_from": "2024-06-10", "date_to": "2024-06-01"}, "date_from"),
        ({"date_from": "2020-01-01", "date_to": "2024-06-01"}, "date_from"),
        ({"date_from": "June"}, "date_from"),
    ):
        out = await REGISTRY.call("weight_history", raw, make_ctx(db))
        assert out.is_error and field in out.content, out.content
