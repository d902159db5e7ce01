"""The journal tools, log_weight and get_usage against the real (embedded) PostgreSQL."""

from __future__ import annotations

import calendar
import json
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import attrs
import numpy as np
import pytest
import trio
from fakes.journal import NOW, REGISTRY, add_entry, call, call_error, make_ctx
from fakes.memory import DIMS, MODEL, FakeEmbedder, bag_of_words

from memory.embeddings.providers import LocalEmbedder
from memory.embeddings.store import ensure_vector_index, index_name
from memory.journal import search as journal_search
from memory.journal.dayone import import_dayone, word_count
from memory.journal.search import (
    CANDIDATES_PER_ARM,
    LOCAL,
    Sql,
    find_candidates,
    search_candidates,
    vector_arm,
)
from memory.journal.tools import JOURNAL_TOOLS
from memory.llm.usage import log_api_usage
from memory.tools.registry import ToolContext
from runtime.db import Database
from runtime.migrate import apply_migrations, load_migrations


def uuids(items: list[dict[str, Any]]) -> list[str]:
    return [i["uuid"] for i in items]


def test_registry_offers_the_ten_tools() -> None:
    assert REGISTRY.names() == [
        "search_entries",
        "get_entry",
        "get_entries_by_date",
        "on_this_day",
        "find_similar",
        "list_tags",
        "entry_stats",
        "log_weight",
        "weight_history",
        "get_usage",
    ]
    for s in REGISTRY.specs():
        assert s["input_schema"]["additionalProperties"] is False and s["description"]
    assert len(JOURNAL_TOOLS) == 10


# --- search_entries ----------------------------------------------------------------------------


async def seed_search(db: Database) -> None:
    await add_entry(
        db,
        "run1",
        "2024-01-10T08:00",
        "Morning run by the river, legs tired.",
        tags=["Sport"],
        city="Madrid",
    )
    await add_entry(
        db,
        "run2",
        "2024-03-05T08:00",
        "Another run, faster this time, river path.",
        tags=["sport", "health"],
        city="Lisbon",
    )
    await add_entry(
        db,
        "run3",
        "2024-05-20T08:00",
        "Long run along the river with Ana.",
        tags=["social"],
        city="madrid",
    )
    await add_entry(
        db,
        "cook",
        "2024-02-01T19:00",
        "Cooked a lentil stew for dinner.",
        tags=["food"],
        city="Madrid",
    )


async def test_search_filters_by_date_tags_and_city(db: Database) -> None:
    await seed_search(db)
    ctx = make_ctx(db)
    everything = await call(ctx, "search_entries", query="river run")
    assert set(uuids(everything["results"])[:3]) == {"run1", "run2", "run3"}
    assert everything["degraded"] is False

    by_date = await call(
        ctx, "search_entries", query="river run", date_from="2024-02-01", date_to="2024-04-30"
    )
    assert uuids(by_date["results"]) == ["run2", "cook"]  # cook: by meaning only
    assert by_date["results"][1]["matched"] == ["meaning"]

    by_tag = await call(ctx, "search_entries", query="river run", tags=["SPORT"])
    assert set(uuids(by_tag["results"])) == {"run1", "run2"}  # case-insensitive, any of

    by_city = await call(ctx, "search_entries", query="river run", city="MADRID")
    assert set(uuids(by_city["results"])) == {"run1", "run3", "cook"}

    both = await call(
        ctx,
        "search_entries",
        query="stew",
        tags=["food"],
        city="Madrid",
        date_from="2024-02-01",
        date_to="2024-02-01",
    )
    [item] = both["results"]
    assert item["uuid"] == "cook" and item["date"] == "2024-02-01" and item["city"] == "Madrid"
    assert item["tags"] == ["food"] and "lentil stew" in item["snippet"]
    assert item["matched"] == ["text", "meaning"]


async def test_search_snippets_show_the_passage_with_the_words(db: Database) -> None:
    filler = " ".join(f"ordinary{i} words" for i in range(120))
    await add_entry(db, "long", "2024-01-01T09:00", f"{filler}. Then we went swimming in the sea.")
    await add_entry(db, "other", "2024-01-02T09:00", f"{filler}. Nothing else happened.")
    found = await call(make_ctx(db), "search_entries", query="swim")
    by_uuid = {r["uuid"]: r for r in found["results"]}
    assert "Then we went swimming" in by_uuid["long"]["snippet"]  # not the entry's start
    assert by_uuid["other"]["snippet"].startswith("ordinary0 words")  # by meaning: the start


async def test_search_limit_and_caps(db: Database) -> None:
    for i in range(12):
        await add_entry(db, f"e{i:02d}", f"2024-01-{i + 1:02d}T09:00", f"walk number {i} today")
    ctx = make_ctx(db)
    assert (await call(ctx, "search_entries", query="walk"))["count"] == 10  # default
    assert (await call(ctx, "search_entries", query="walk", limit=3))["count"] == 3
    assert (await call(ctx, "search_entries", query="walk", limit=50))["count"] == 12
    for bad in (0, 51):
        err = await call_error(ctx, "search_entries", {"query": "walk", "limit": bad})
        assert err["field"] == "limit"
    err = await call_error(ctx, "search_entries", {"query": "walk", "date_from": "2024-1-1"})
    assert err["field"] == "date_from"
    err = await call_error(
        ctx, "search_entries", {"query": "walk", "date_from": "2024-02-01", "date_to": "2024-01-01"}
    )
    assert err == {"error": "date_from must not be after date_to", "field": "date_from"}


def noisy(v: np.ndarray, seed: int, amount: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = v + amount * rng.standard_normal(DIMS).astype(np.float32)
    unit: np.ndarray = (out / np.linalg.norm(out)).astype(np.float32)
    return unit


async def test_hybrid_fusion_ranks_entry_found_by_both_arms_first(db: Database) -> None:
    query = "sunrise swim lake"
    q = bag_of_words(query)
    far = bag_of_words("tax forms accountant spreadsheet invoices")
    # best full-text match, but no vector at all
    await add_entry(
        db,
        "text-only",
        "2024-01-01T07:00",
        "Sunrise swim in the lake. Sunrise swim, lake again!",
        embed=False,
    )
    # second in both arms
    await add_entry(
        db,
        "both",
        "2024-01-02T07:00",
        "Woke early; after a long while I went for a swim at the lake near sunrise.",
        vector=noisy(q, 1, 0.05),
    )
    # nearest vector, no words in common
    await add_entry(db, "vector-only", "2024-01-03T07:00", "Dawn dip in cold water.", vector=q)
    for i in range(3):
        await add_entry(
            db,
            f"other{i}",
            f"2024-01-0{4 + i}T07:00",
            "Paperwork all day.",
            vector=noisy(far, i, 0.3),
        )
    result = await call(make_ctx(db), "search_entries", query=query, limit=3)
    got = uuids(result["results"])
    assert got[0] == "both"
    assert set(got[1:]) == {"text-only", "vector-only"}
    first = result["results"][0]
    assert first["matched"] == ["text", "meaning"]


async def test_search_degrades_to_full_text_when_embedding_fails(db: Database) -> None:
    await seed_search(db)
    broken = FakeEmbedder(fail=True)
    result = await call(make_ctx(db, broken), "search_entries", query="lentil stew")
    assert result["degraded"] is True and "embedding failed (RuntimeError)" in result["note"]
    assert uuids(result["results"]) == ["cook"]
    assert result["results"][0]["matched"] == ["text"]
    assert broken.calls == [(["lentil stew"], "embedding", 1)]

    no_model = ToolContext(db=db, embedder=None, chat_id=1, timezone="UTC", now=NOW)
    result = await call(no_model, "search_entries", query="river")
    assert result["degraded"] is True and set(uuids(result["results"])) == {"run1", "run2", "run3"}


# --- get_entry / get_entries_by_date / on_this_day -----------------------------------------------


async def test_get_entry_in_its_own_timezone(db: Database) -> None:
    await add_entry(
        db,
        "tokyo",
        "2024-01-01T23:30",
        "New year in Tokyo.",
        tz="Asia/Tokyo",
        tags=["travel"],
        city="Tokyo",
    )
    await add_entry(db, "nowhere", "2024-01-01T23:30", "No zone.", tz=None)
    await add_entry(db, "bogus", "2024-01-01T23:30", "Bad zone.", tz="Mars/Base")
    ctx = make_ctx(db, tz="America/New_York")
    tokyo = await call(ctx, "get_entry", uuid="tokyo")
    assert (tokyo["date"], tokyo["time"]) == ("2024-01-02", "08:30")
    assert tokyo["timezone"] == "Asia/Tokyo"
    assert tokyo["text"] == "New year in Tokyo." and tokyo["tags"] == ["travel"]
    assert tokyo["city"] == "Tokyo" and tokyo["word_count"] == 4
    for uuid in ("nowhere", "bogus"):  # context time zone
        got = await call(ctx, "get_entry", uuid=uuid)
        assert (got["date"], got["time"]) == ("2024-01-01", "18:30")
    err = await call_error(ctx, "get_entry", {"uuid": "missing"})
    assert err == {"error": "no entry with uuid 'missing'", "field": "uuid"}


async def test_get_entries_by_date(db: Database) -> None:
    # 23:30 UTC on the 1st is already the 2nd in Madrid
    await add_entry(db, "late", "2024-02-01T23:30", "Late night thoughts.")
    await add_entry(db, "a", "2024-02-02T08:00", "Morning.")
    await add_entry(db, "b", "2024-02-03T08:00", "Next day " + "word " * 1000)
    await add_entry(db, "c", "2024-02-05T08:00", "Later.")
    ctx = make_ctx(db)
    one_day = await call(ctx, "get_entries_by_date", date_from="2024-02-02")
    assert uuids(one_day["entries"]) == ["late", "a"] and one_day["total"] == 2
    assert one_day["date_to"] == "2024-02-02"
    ranged = await call(
        ctx, "get_entries_by_date", date_from="2024-02-02", date_to="2024-02-05", limit=3
    )
    assert uuids(ranged["entries"]) == ["late", "a", "b"]
    assert ranged["total"] == 4 and ranged["count"] == 3
    assert ranged["entries"][2]["truncated"] is True and len(ranged["entries"][2]["text"]) == 2000
    assert "truncated" not in ranged["entries"][0]
    assert (await call(ctx, "get_entries_by_date", date_from="2020-01-01"))["entries"] == []
    err = await call_error(ctx, "get_entries_by_date", {"date_from": "2024-02-30"})
    assert err["field"] == "date_from" and "not a valid calendar date" in err["error"]
    err = await call_error(ctx, "get_entries_by_date", {"date_from": "2024-02-01", "limit": 51})
    assert err["field"] == "limit"


async def test_on_this_day_across_years(db: Database) -> None:
    await add_entry(db, "y2021", "2021-06-15T09:00", "Three years back.")
    await add_entry(db, "y2023", "2023-06-15T09:00", "A year back.")
    await add_entry(db, "y2023b", "2023-06-14T22:30", "Past midnight in Madrid.")  # 06-15 local
    await add_entry(db, "other", "2023-06-16T09:00", "Not today.")
    await add_entry(db, "leap", "2020-02-29T09:00", "Leap day.")
    ctx = make_ctx(db)
    today = await call(ctx, "on_this_day")
    assert today["month_day"] == "06-15"
    assert uuids(today["entries"]) == ["y2023", "y2023b", "y2021"]
    assert [e["years_ago"] for e in today["entries"]] == [1, 1, 3]
    assert today["entries"][0]["text"] == "A year back."
    leap = await call(ctx, "on_this_day", month_day="02-29")
    assert uuids(leap["entries"]) == ["leap"] and leap["entries"][0]["years_ago"] == 4
    assert (await call(ctx, "on_this_day", limit=1))["count"] == 1
    for bad in ("6-15", "13-01", "02-30"):
        err = await call_error(ctx, "on_this_day", {"month_day": bad})
        assert err["field"] == "month_day"


async def test_on_this_day_default_uses_context_timezone(db: Database) -> None:
    await add_entry(db, "new-year", "2023-01-01T11:00", "New year's day.")
    late = datetime(2023, 12, 31, 23, 30, tzinfo=UTC)  # already Jan 1st in Madrid
    result = await call(make_ctx(db, now=late), "on_this_day")
    assert result["month_day"] == "01-01" and uuids(result["entries"]) == ["new-year"]
    assert result["entries"][0]["years_ago"] == 1


# --- find_similar / list_tags / entry_stats -------------------------------------------------------


async def test_find_similar_excludes_source(db: Database) -> None:
    await add_entry(db, "src", "2024-01-01T09:00", "garden tomatoes basil watering")
    await add_entry(db, "close", "2024-01-02T09:00", "garden tomatoes basil harvest")
    await add_entry(db, "mid", "2024-01-03T09:00", "garden fence repair")  # sim 0.29
    await add_entry(db, "far", "2024-01-04T09:00", "piano lesson")  # sim 0
    await add_entry(db, "unembedded", "2024-01-05T09:00", "garden tomatoes", embed=False)
    ctx = make_ctx(db)
    result = await call(ctx, "find_similar", uuid="src")
    assert uuids(result["results"]) == ["close", "mid", "far"]
    sims = [r["similarity"] for r in result["results"]]
    assert sims == sorted(sims, reverse=True) and sims[0] > 0.5
    assert uuids((await call(ctx, "find_similar", uuid="src", limit=1))["results"]) == ["close"]
    # no stored vector: its text is embedded on the fly
    fresh = await call(ctx, "find_similar", uuid="unembedded")
    assert uuids(fresh["results"])[0] in {"src", "close"} and "unembedded" not in uuids(
        fresh["results"]
    )
    assert (await call_error(ctx, "find_similar", {"uuid": "src", "limit": 21}))["field"] == "limit"
    err = await call_error(ctx, "find_similar", {"uuid": "nope"})
    assert err["field"] == "uuid"
    no_model = ToolContext(db=db, embedder=None, chat_id=1, timezone="UTC", now=NOW)
    assert "unavailable" in (await call_error(no_model, "find_similar", {"uuid": "src"}))["error"]


async def test_list_tags_counts(db: Database) -> None:
    await add_entry(db, "1", "2024-01-01T09:00", "x", tags=["work", "family"])
    await add_entry(db, "2", "2024-01-02T09:00", "x", tags=["work"])
    await add_entry(db, "3", "2024-01-03T09:00", "x", tags=["work", "sport"])
    await add_entry(db, "4", "2024-01-04T09:00", "x", tags=["family"])
    await add_entry(db, "5", "2024-01-05T09:00", "x")
    result = await call(make_ctx(db), "list_tags")
    assert result == {
        "count": 3,
        "tags": [
            {"tag": "work", "count": 3},
            {"tag": "family", "count": 2},
            {"tag": "sport", "count": 1},
        ],
    }
    assert (await call_error(make_ctx(db), "list_tags", {"limit": 3}))["field"] == "limit"


async def test_entry_stats_streaks_weekdays_months(db: Database) -> None:
    # local days (Madrid): May 1-4 (Wed-Sat, longest streak 4), June 13-14 (current streak 2)
    for i, day in enumerate(["05-01", "05-02", "05-03", "05-04", "06-13", "06-14"]):
        await add_entry(db, f"d{i}", f"2024-{day}T09:00", "one two three four")
    await add_entry(db, "extra", "2024-05-01T20:00", "six words in this one here")
    await add_entry(db, "old", "2023-06-10T09:00", "a b")
    ctx = make_ctx(db)
    stats = await call(ctx, "entry_stats", date_from="2024-01-01")
    assert stats["total_entries"] == 7 and stats["days_with_entries"] == 6
    assert stats["first_date"] == "2024-05-01" and stats["last_date"] == "2024-06-14"
    assert stats["total_words"] == 30 and stats["average_words"] == round(30 / 7, 1)
    assert stats["longest_streak"] == {"days": 4, "start": "2024-05-01", "end": "2024-05-04"}
    assert stats["current_streak"] == {"days": 2}
    assert stats["by_weekday"] == {
        "Monday": 0,
        "Tuesday": 0,
        "Wednesday": 2,
        "Thursday": 2,
        "Friday": 2,
        "Saturday": 1,
        "Sunday": 0,
    }
    assert stats["by_month"]["May"] == 5 and stats["by_month"]["June"] == 2
    assert sum(stats["by_month"].values()) == 7
    weeks = ((date(2024, 6, 14) - date(2024, 1, 1)).days + 1) / 7
    assert stats["entries_per_week"] == round(7 / weeks, 2)

    everything = await call(ctx, "entry_stats")
    assert everything["total_entries"] == 8 and everything["first_date"] == "2023-06-10"
    assert everything["by_month"]["June"] == 3
    # a day later with no entry today or yesterday: the current streak is broken
    later = await call(make_ctx(db, now=NOW + timedelta(days=2)), "entry_stats")
    assert later["current_streak"] == {"days": 0}
    # a late-evening entry in UTC that is already the next day in Madrid extends the streak
    await add_entry(db, "midnight", "2024-06-14T22:30", "after midnight")
    today = await call(ctx, "entry_stats")
    assert today["current_streak"] == {"days": 3}


# --- log_weight / get_usage ---------------------------------------------------------------------


async def weights(db: Database, chat_id: int = 1) -> list[tuple[date, float]]:
    rows = await db.fetch(
        "SELECT date, weight_kg FROM daily_metrics WHERE chat_id = $1 ORDER BY date", chat_id
    )
    return [(r["date"], r["weight_kg"]) for r in rows]


async def test_log_weight_defaults_to_local_today_and_upserts(db: Database) -> None:
    near_midnight = datetime(2024, 3, 9, 23, 30, tzinfo=UTC)  # March 10 in Madrid
    ctx = make_ctx(db, now=near_midnight)
    first = await call(ctx, "log_weight", weight_kg=77.2, date="2024-03-08")
    assert first == {"logged": {"date": "2024-03-08", "weight_kg": 77.2}, "previous": None}
    today = await call(ctx, "log_weight", weight_kg=76.5)
    assert today["logged"] == {"date": "2024-03-10", "weight_kg": 76.5}
    assert today["previous"] == {"date": "2024-03-08", "weight_kg": 77.2, "change_kg": -0.7}
    assert "replaced_kg" not in today
    again = await call(ctx, "log_weight", weight_kg=76.4)
    assert again["logged"] == {"date": "2024-03-10", "weight_kg": 76.4}
    assert again["replaced_kg"] == 76.5
    assert await weights(db) == [(date(2024, 3, 8), 77.2), (date(2024, 3, 10), 76.4)]
    # in UTC the same instant is still March 9; other chats are separate
    utc = make_ctx(db, now=near_midnight, tz="UTC", chat_id=2)
    assert (await call(utc, "log_weight", weight_kg=60))["logged"]["date"] == "2024-03-09"
    assert await weights(db, 2) == [(date(2024, 3, 9), 60.0)]


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"weight_kg": -70}, "weight_kg"),
        ({"weight_kg": 0}, "weight_kg"),
        ({"weight_kg": 500}, "weight_kg"),
        ({"weight_kg": "76.5"}, "weight_kg"),
        ({}, "weight_kg"),
        ({"weight_kg": 70, "date": "yesterday"}, "date"),
        ({"weight_kg": 70, "date": "2024-02-30"}, "date"),
        ({"weight_kg": 70, "date": "2024-06-20"}, "date"),  # in the future
        ({"weight_kg": 70, "unit": "lb"}, "unit"),
    ],
)
async def test_log_weight_invalid(db: Database, raw: dict[str, Any], field: str) -> None:
    err = await call_error(make_ctx(db), "log_weight", raw)
    assert err["field"] == field
    assert await weights(db) == []


async def test_get_usage(db: Database) -> None:
    for purpose, tokens in (("agent", 1_000_000), ("agent", 1_000_000), ("compaction", 100_000)):
        await log_api_usage(
            db,
            provider="anthropic",
            model="claude-sonnet-4-5",
            purpose=purpose,
            chat_id=1,
            input_tokens=tokens,
        )
    await db.execute(
        "INSERT INTO api_usage (provider, model, purpose, cost_usd, created_at) "
        "VALUES ('openai', 'whisper-1', 'transcription', 0.5, '2024-05-01T12:00Z')"
    )
    await log_api_usage(  # another chat's spend is never reported here
        db,
        provider="anthropic",
        model="claude-sonnet-4-5",
        purpose="agent",
        chat_id=999,
        input_tokens=5_000_000,
    )
    now = datetime.now(UTC)
    ctx = make_ctx(db, now=now)
    result = await call(ctx, "get_usage")
    assert result["total_usd"] == pytest.approx(6.3) and result["calls"] == 3
    assert result["scope"].startswith("this chat")  # what the model tells the person
    assert result["by_purpose"] == {
        "agent": {"calls": 2, "cost_usd": 6.0},
        "compaction": {"calls": 1, "cost_usd": 0.3},
    }
    assert sum(d["calls"] for d in result["by_day"]) == 3
    assert result["tokens"] == {
        "input": 2_100_000,
        "output": 0,
        "of_input_read_from_cache": 0,
        "of_input_written_to_cache": 0,
    }
    assert result["date_to"] == ctx.today.isoformat()
    assert result["date_from"] == (ctx.today - timedelta(days=29)).isoformat()
    old = await call(ctx, "get_usage", date_from="2024-05-01", date_to="2024-05-01")
    assert old["total_usd"] == 0.5 and old["by_day"] == [
        {"date": "2024-05-01", "calls": 1, "cost_usd": 0.5}
    ]
    assert old["by_model"] == {"whisper-1": {"calls": 1, "cost_usd": 0.5}}


# --- failures -----------------------------------------------------------------------------------


class BrokenDb:
    async def execute(self, query: str, *args: Any) -> str:
        raise RuntimeError("connection reset")

    async def fetch(self, query: str, *args: Any) -> list[Any]:
        raise RuntimeError("connection reset")

    async def fetchrow(self, query: str, *args: Any) -> Any:
        raise RuntimeError("connection reset")


async def test_handler_exception_is_a_tool_error() -> None:
    ctx = make_ctx(BrokenDb())
    for name, raw in (("search_entries", {"query": "x"}), ("log_weight", {"weight_kg": 70})):
        err = await call_error(ctx, name, raw)
        assert err == {"error": f"tool {name} failed (RuntimeError); try again later"}
    assert (await call_error(ctx, "no_such_tool", {}))["error"] == "unknown tool 'no_such_tool'"


# --- search speed paths (issue 4): same rows whichever path runs ---------------------------------


async def seed_vectors(db: Database, n: int) -> list[tuple[int, np.ndarray, str]]:
    """``n`` entries, one a day from 2023-01-01 (every 10th tagged "rare"), random vectors."""
    rng = np.random.default_rng(5)
    rows = []
    for i in range(n):
        v = rng.standard_normal(DIMS).astype(np.float32)
        v /= np.linalg.norm(v)
        at = (datetime(2023, 1, 1, 12, tzinfo=UTC) + timedelta(days=i)).isoformat()[:16]
        tags = ["rare"] if i % 10 == 0 else []
        entry_id = await add_entry(db, f"v{i:03d}", at, f"note {i}", tags=tags, vector=v)
        rows.append((entry_id, v, at[:10]))
    return rows


def nearest(rows: list[tuple[int, np.ndarray, str]], q: np.ndarray, k: int = 100) -> list[int]:
    dist = sorted((1.0 - float(v @ q), -i, i) for i, v, _ in rows)
    return [i for _, _, i in dist[:k]]


async def test_vector_arm_uses_the_hnsw_index_with_more_than_40_rows(db: Database) -> None:
    rows = await seed_vectors(db, 300)
    await ensure_vector_index(db, "entry_embeddings", MODEL, DIMS)
    q = rows[7][1]
    async with db.connection() as conn:
        # 300 rows: make the planner pick it (over a scan of the chat's rows by the primary key
        # (chat_id, entry_id, model), then a sort)
        await conn.execute("SET enable_seqscan = off; SET enable_sort = off")
        sql = Sql("UTC", 1)
        plan = await conn.fetch(
            f"EXPLAIN {LOCAL} {vector_arm(sql, q, MODEL, DIMS, exact=False)}", *sql.args
        )
        hnsw = index_name("entry_embeddings", MODEL, DIMS)
        assert any(hnsw in r["QUERY PLAN"] for r in plan), plan
        _, vec_ids = await search_candidates(make_ctx(conn), "zzz", q)
    # pgvector returns at most hnsw.ef_search rows (40 by default): raised for the statement
    assert len(vec_ids) == CANDIDATES_PER_ARM
    assert vec_ids[0] == rows[7][0]
    assert len(set(vec_ids) & set(nearest(rows, q))) >= 95  # approximate, but close
    assert await db.fetchval("SELECT current_setting('hnsw.ef_search')") == "40"


async def test_filtered_vector_search_exact_and_index_paths_agree(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = await seed_vectors(db, 300)
    await ensure_vector_index(db, "entry_embeddings", MODEL, DIMS)
    q = rows[42][1]
    rare = [r for r in rows if r[0] in {rows[i][0] for i in range(0, 300, 10)}]
    in_range = [r for r in rows if "2023-03-01" <= r[2] <= "2023-05-31"]
    ctx = make_ctx(db, tz="UTC")
    got: dict[str, list[list[int]]] = {}
    for path, exact_max in (("exact", 2000), ("index", 0)):
        monkeypatch.setattr(journal_search, "EXACT_MAX", exact_max)
        by_tag = await search_candidates(ctx, "zzz", q, tags=["RARE"])
        by_date = await search_candidates(
            ctx, "zzz", q, date.fromisoformat("2023-03-01"), date.fromisoformat("2023-05-31")
        )
        got[path] = [by_tag[1], by_date[1]]
    assert got["exact"] == got["index"]
    assert got["exact"] == [nearest(rare, q), nearest(in_range, q)]


async def test_text_arm_ranks_the_newest_matches(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    await add_entry(db, "old-best", "2020-01-01T09:00", "walk walk walk walk by the walk path")
    for i in range(6):
        await add_entry(db, f"new{i}", f"2024-01-0{i + 1}T09:00", f"a short walk, day {i}")
    ctx = make_ctx(db, embedder=None)
    uuid_of = {r["id"]: r["uuid"] for r in await db.fetch("SELECT id, uuid FROM entries")}
    text_ids, _ = await search_candidates(ctx, "walk", None)
    assert uuid_of[text_ids[0]] == "old-best" and len(text_ids) == 7  # all matches ranked
    monkeypatch.setattr(journal_search, "FTS_POOL", 6)
    text_ids, _ = await search_candidates(ctx, "walk", None)
    assert sorted(uuid_of[i] for i in text_ids) == [f"new{i}" for i in range(6)]


class WatchedPool(Database):
    """The pool, noting when a full-text arm statement has finished."""

    def __init__(self, db: Database) -> None:
        super().__init__(db._pool, db.url)
        self.text_arm_done = trio.Event()

    async def fetch(self, query: str, *args: Any) -> Any:
        rows = await super().fetch(query, *args)
        if "text_search @@" in query and "<=>" not in query:
            self.text_arm_done.set()
        return rows


@attrs.define
class EmbedsAfterTextArm(FakeEmbedder):
    """Answers only once the full-text arm is done: sequential code would never get there."""

    pool: WatchedPool | None = None

    async def embed(
        self, texts: Sequence[str], *, purpose: str, chat_id: int | None = None
    ) -> list[np.ndarray]:
        assert self.pool is not None
        with trio.fail_after(10):
            await self.pool.text_arm_done.wait()
        return await super().embed(texts, purpose=purpose, chat_id=chat_id)


async def test_the_text_arm_runs_while_the_query_is_embedded(db: Database) -> None:
    await add_entry(db, "a", "2024-01-01T09:00", "a long walk by the river")
    await add_entry(db, "b", "2024-01-02T09:00", "river swim at dawn")
    pool = WatchedPool(db)
    ctx = make_ctx(pool, embedder=EmbedsAfterTextArm(pool=pool))
    text_ids, vector_ids, problem = await find_candidates(ctx, "river walk")
    assert problem is None
    assert len(text_ids) == 1 and len(vector_ids) == 2


async def test_on_one_connection_the_arms_run_in_turn(db: Database) -> None:
    await add_entry(db, "a", "2024-01-01T09:00", "a long walk by the river")
    async with db.connection() as conn:
        text_ids, vector_ids, problem = await find_candidates(make_ctx(conn), "river walk")
    assert problem is None and len(text_ids) == 1 and len(vector_ids) == 1
    failing = make_ctx(db, embedder=FakeEmbedder(fail=True))
    text_ids, vector_ids, problem = await find_candidates(failing, "river walk")
    assert text_ids and vector_ids == [] and problem == "embedding failed (RuntimeError)"


async def test_unknown_time_zones_are_stored_as_null(raw_db: Database) -> None:
    [first, *rest] = load_migrations()
    await apply_migrations(raw_db, [first])
    for uuid, tz in (("old-bad", "Mars/Base"), ("old-abbrev", "PST")):  # schema 001's columns
        await raw_db.execute(
            "INSERT INTO entries (uuid, created_at, timezone, text) VALUES ($1, $2, $3, 'x')",
            uuid,
            datetime(2024, 1, 1, 10, tzinfo=UTC),
            tz,
        )
    await apply_migrations(raw_db, [first, *rest])  # 002 clears what the reads ignored
    await add_entry(raw_db, "new-bad", "2024-01-01T10:00", "x", tz="Nowhere/Else", embed=False)
    await add_entry(raw_db, "tokyo", "2024-01-01T10:00", "x", tz="Asia/Tokyo", embed=False)
    zones = {
        r["uuid"]: r["timezone"] for r in await raw_db.fetch("SELECT uuid, timezone FROM entries")
    }
    assert zones == {"old-bad": None, "old-abbrev": None, "new-bad": None, "tokyo": "Asia/Tokyo"}
    await raw_db.execute("UPDATE entries SET timezone = 'Bad/Zone' WHERE uuid = 'tokyo'")
    assert await raw_db.fetchval("SELECT timezone FROM entries WHERE uuid = 'tokyo'") is None
    got = await call(make_ctx(raw_db, tz="Asia/Tokyo"), "get_entry", uuid="new-bad")
    assert (got["date"], got["time"]) == ("2024-01-01", "19:00")  # the context zone


# --- default limits -----------------------------------------------------------------------------


async def test_get_entries_by_date_and_on_this_day_default_to_20(db: Database) -> None:
    start = datetime(2024, 3, 10, 6, 0)  # UTC: 07:00 onwards in Madrid, all on March 10
    made = [f"day{i:02d}" for i in range(25)]
    for i, uuid in enumerate(made):
        at = (start + timedelta(minutes=10 * i)).isoformat()
        await add_entry(db, uuid, at, f"entry {i} of a busy day", embed=False)
    ctx = make_ctx(db)
    by_date = await call(ctx, "get_entries_by_date", date_from="2024-03-10")
    assert by_date["total"] == len(made)
    assert by_date["count"] == 20 and uuids(by_date["entries"]) == made[:20]  # oldest first
    on_day = await call(ctx, "on_this_day", month_day="03-10")
    assert on_day["count"] == 20 and uuids(on_day["entries"]) == made[::-1][:20]  # newest first


async def test_find_similar_defaults_to_5(db: Database) -> None:
    await add_entry(db, "src", "2024-01-01T09:00", "garden tomatoes basil watering")
    similar = [f"sim{i}" for i in range(8)]
    for i, uuid in enumerate(similar):
        await add_entry(db, uuid, f"2024-01-{i + 2:02d}T09:00", f"garden tomatoes basil day{i}")
    result = await call(make_ctx(db), "find_similar", uuid="src")
    assert result["count"] == 5 and len(result["results"]) == 5
    got = uuids(result["results"])
    assert "src" not in got and set(got) <= set(similar)


# --- the tools on a journal imported from the Day One fixture -----------------------------------

DAYONE = Path(__file__).resolve().parents[2] / "fixtures" / "dayone_small.json"
DAYONE_NOW = datetime(2024, 6, 15, 10, 0, tzinfo=UTC)


@attrs.frozen
class FixtureEntry:
    """One importable entry of the fixture file, as the tools should show it."""

    uuid: str
    created: datetime
    local: datetime
    timezone: str
    text: str
    tags: list[str]
    city: str | None
    media: dict[str, int]


def dayone_entries() -> list[FixtureEntry]:
    """The fixture's entries with a uuid, an ISO creation date and a list of tags (the others
    are malformed and skipped by the importer), read straight from the JSON file."""
    out = []
    for raw in json.loads(DAYONE.read_text())["entries"]:
        uuid, tags = raw.get("uuid"), raw.get("tags", [])
        try:
            created = datetime.fromisoformat(raw["creationDate"])
        except (KeyError, TypeError, ValueError):
            continue
        if not isinstance(uuid, str) or not isinstance(tags, list):
            continue
        zone = raw["timeZone"]
        out.append(
            FixtureEntry(
                uuid=uuid,
                created=created,
                local=created.astimezone(ZoneInfo(zone)),
                timezone=zone,
                text=raw.get("text", ""),
                tags=list(dict.fromkeys(t.strip() for t in tags if t.strip())),
                city=(raw.get("location") or {}).get("localityName"),
                media={k: len(raw.get(k, [])) for k in ("photos", "videos", "audios")},
            )
        )
    return out


DAYONE_ENTRIES = dayone_entries()


@pytest.fixture
async def dayone(db: Database, local: LocalEmbedder) -> ToolContext:
    """The fixture imported by the real importer, embedded by the local model."""
    report = await import_dayone(db, DAYONE, chat_id=1, embedder=local)
    assert report.imported == report.embedded == len(DAYONE_ENTRIES)
    return ToolContext(db=db, embedder=local, chat_id=1, timezone="Europe/Madrid", now=DAYONE_NOW)


async def test_dayone_search_by_tag_and_by_dates(dayone: ToolContext) -> None:
    [(tag, n)] = Counter(t for e in DAYONE_ENTRIES for t in e.tags).most_common(1)
    tagged = {e.uuid for e in DAYONE_ENTRIES if tag in e.tags}
    assert n > 1 and len(tagged) == n
    by_tag = await call(dayone, "search_entries", query="run", tags=[tag.upper()], limit=50)
    assert set(uuids(by_tag["results"])) == tagged and by_tag["degraded"] is False
    assert all(tag in r["tags"] for r in by_tag["results"])

    local_date = {e.uuid: e.local.date().isoformat() for e in DAYONE_ENTRIES}
    year = Counter(e.local.year for e in DAYONE_ENTRIES).most_common(1)[0][0]
    in_year = {u for u, d in local_date.items() if d.startswith(f"{year}-")}
    by_date = await call(
        dayone,
        "search_entries",
        query="day",
        date_from=f"{year}-01-01",
        date_to=f"{year}-12-31",
        limit=50,
    )
    assert set(uuids(by_date["results"])) == in_year
    assert all(r["date"] == local_date[r["uuid"]] for r in by_date["results"])


async def test_dayone_get_entry_shows_every_field(dayone: ToolContext) -> None:
    for e in DAYONE_ENTRIES:
        got = await call(dayone, "get_entry", uuid=e.uuid)
        assert (got["date"], got["time"]) == (e.local.date().isoformat(), e.local.strftime("%H:%M"))
        assert (got["text"], got["tags"], got["timezone"]) == (e.text, e.tags, e.timezone)
        assert got.get("city") == e.city
        assert got["word_count"] == word_count(e.text)
        for kind, n in e.media.items():
            assert got.get(kind) == (n or None)


async def test_dayone_get_entries_by_date(dayone: ToolContext) -> None:
    # the longest run of consecutive local days in the fixture
    days = sorted({e.local.date() for e in DAYONE_ENTRIES})
    runs: list[list[date]] = []
    for d in days:
        if runs and d - runs[-1][-1] == timedelta(days=1):
            runs[-1].append(d)
        else:
            runs.append([d])
    run = max(runs, key=len)
    assert len(run) > 1
    expected = sorted(
        (e for e in DAYONE_ENTRIES if run[0] <= e.local.date() <= run[-1]), key=lambda e: e.created
    )
    got = await call(
        dayone, "get_entries_by_date", date_from=run[0].isoformat(), date_to=run[-1].isoformat()
    )
    assert got["total"] == got["count"] == len(expected)
    assert uuids(got["entries"]) == [e.uuid for e in expected]
    assert [x["text"] for x in got["entries"]] == [e.text for e in expected]
    one_day = await call(dayone, "get_entries_by_date", date_from=run[1].isoformat())
    assert uuids(one_day["entries"]) == [e.uuid for e in expected if e.local.date() == run[1]]


async def test_dayone_on_this_day(dayone: ToolContext) -> None:
    today = DAYONE_NOW.astimezone(ZoneInfo(dayone.timezone)).date()
    [(busiest, _)] = Counter(e.local.strftime("%m-%d") for e in DAYONE_ENTRIES).most_common(1)
    for month_day in (busiest, None):
        wanted = month_day or today.strftime("%m-%d")
        expected = sorted(
            (e for e in DAYONE_ENTRIES if e.local.strftime("%m-%d") == wanted),
            key=lambda e: e.local.replace(tzinfo=None),
            reverse=True,
        )
        args = {"month_day": month_day} if month_day else {}
        got = await call(dayone, "on_this_day", **args)
        assert got["month_day"] == wanted
        assert uuids(got["entries"]) == [e.uuid for e in expected]
        assert [x["years_ago"] for x in got["entries"]] == [
            today.year - e.local.year for e in expected
        ]
        assert month_day is None or len(expected) > 1  # a month-day of several years


async def test_dayone_find_similar_excludes_source(
    dayone: ToolContext, local: LocalEmbedder
) -> None:
    # the nearest entries by the same model, computed here (the source itself is nearest)
    vectors = await local.embed([e.text for e in DAYONE_ENTRIES], purpose="test")
    source = DAYONE_ENTRIES[0]
    sims = sorted(
        ((float(v @ vectors[0]), e.uuid) for e, v in zip(DAYONE_ENTRIES, vectors, strict=True)),
        reverse=True,
    )
    assert sims[0][1] == source.uuid
    got = await call(dayone, "find_similar", uuid=source.uuid)
    assert got["uuid"] == source.uuid and got["count"] == 5
    assert uuids(got["results"]) == [u for _, u in sims[1:6]]
    assert [r["similarity"] for r in got["results"]] == pytest.approx(
        [s for s, _ in sims[1:6]], abs=2e-3
    )


async def test_dayone_list_tags_counts(dayone: ToolContext) -> None:
    expected = Counter(t for e in DAYONE_ENTRIES for t in e.tags)
    got = await call(dayone, "list_tags")
    assert got["count"] == len(expected)
    assert {t["tag"]: t["count"] for t in got["tags"]} == dict(expected)
    counts = [t["count"] for t in got["tags"]]
    assert counts == sorted(counts, reverse=True)


async def test_dayone_entry_stats_totals(dayone: ToolContext) -> None:
    days = Counter(e.local.date() for e in DAYONE_ENTRIES)
    words = sum(word_count(e.text) for e in DAYONE_ENTRIES)
    stats = await call(dayone, "entry_stats")
    assert stats["total_entries"] == len(DAYONE_ENTRIES)
    assert stats["days_with_entries"] == len(days)
    assert (stats["first_date"], stats["last_date"]) == (
        min(days).isoformat(),
        max(days).isoformat(),
    )
    assert stats["total_words"] == words
    assert stats["average_words"] == round(words / len(DAYONE_ENTRIES), 1)
    assert stats["by_weekday"] == {
        name: sum(n for d, n in days.items() if calendar.day_name[d.weekday()] == name)
        for name in calendar.day_name
    }
    assert stats["by_month"] == {
        name: sum(n for d, n in days.items() if calendar.month_name[d.month] == name)
        for name in calendar.month_name[1:]
    }
    year = max(days).year
    in_year = await call(dayone, "entry_stats", date_from=f"{year}-01-01")
    assert in_year["total_entries"] == sum(n for d, n in days.items() if d.year == year)
