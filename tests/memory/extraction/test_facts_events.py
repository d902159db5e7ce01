"""Facts, dated events and core tenets (issue 14, item 4): the extraction schema, the compaction
storing them (the day resolved against the message's local time, not the compaction's), the
``remember`` tool, and dedup/merge never folding two events of different days together.

The compaction runs on a real database through the real Anthropic SDK against the strict fake
server, with scripted extraction answers and the local embedding model.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from fakes.anthropic_api import FakeAnthropic

from memory.compaction.run import CompactionOptions, compact_chat
from memory.conversation.messages import ChatMessage, insert_rows
from memory.embeddings.providers import LocalEmbedder
from memory.errors import ExtractionInvalid
from memory.extraction.claims import ChunkMessage, KnownPattern, NewPattern, parse_extraction
from memory.extraction.prompt import EXTRACTION_SYSTEM, user_prompt
from memory.llm.anthropic_provider import AnthropicLLM
from memory.patterns.dedup import Adjudication
from memory.patterns.merge_candidates import candidate_pairs
from memory.tools.memory_tools import memory_registry
from memory.tools.registry import ToolContext, ToolRegistry
from runtime.db import Database

CHAT, OTHER = 8880001, 8880002
TZ = "Europe/Madrid"
# Monday 3 March 2025, 10:00 in Madrid: "next Friday" is 7 March
SAID = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
OPTS = CompactionOptions(timezone=TZ, keep_recent=2, max_messages=6)


def extraction(**parts: Any) -> str:
    body: dict[str, Any] = {"new_patterns": [], "episode_summary": "User talked about plans."}
    body.update(parts)
    return json.dumps(body)


def new(content: str, evidence: list[int], kind: str, **kw: Any) -> dict[str, Any]:
    return {
        "content": content,
        "kind": kind,
        "confidence": 0.8,
        "signal": "explicit",
        "evidence_message_ids": evidence,
        **kw,
    }


# --- the schema (pure) ---------------------------------------------------------------------------


def test_fact_and_event_parse_with_their_fields() -> None:
    ex = parse_extraction(
        extraction(
            new_patterns=[
                new(
                    "User works as a Solution Architect at GovTech",
                    [1],
                    "fact",
                    confidence=0.95,
                    core=True,
                ),
                new(
                    "User has a team offsite",
                    [2],
                    "event",
                    occurs_on="2025-03-07",
                    occurs_at="09:30",
                ),
                new(
                    "User has a dentist appointment",
                    [3],
                    "event",
                    occurs_on="2025-04-01",
                    occurs_at=None,
                    core=False,
                ),
            ]
        )
    )
    fact, offsite, dentist = ex.new_patterns
    assert (fact.kind, fact.occurs_on, fact.core, fact.pinned) == ("fact", None, True, True)
    assert (offsite.kind, offsite.occurs_on, offsite.occurs_at) == (
        "event",
        date(2025, 3, 7),
        time(9, 30),
    )
    assert (dentist.occurs_on, dentist.occurs_at, dentist.core) == (date(2025, 4, 1), None, False)
    supersede = {
        "old_pattern_id": 4,
        "reason": "moved",
        "new_pattern_content": "User has a team offsite",
        "kind": "event",
        "confidence": 0.9,
        "signal": "explicit",
        "evidence_message_ids": [5],
        "occurs_on": "2025-03-14",
    }
    [moved] = parse_extraction(extraction(supersedes=[supersede])).supersedes
    assert moved.occurs_on == date(2025, 3, 14)


@pytest.mark.parametrize(
    ("kind", "confidence", "core", "pinned"),
    [
        ("belief", 0.9, True, True),
        ("fact", 0.95, True, True),
        ("belief", 0.89, True, False),
        ("goal", 0.99, True, False),
        ("preference", 1.0, True, False),
        ("fact", 1.0, False, False),
    ],
)
def test_core_is_honoured_for_confident_beliefs_and_facts_only(
    kind: str, confidence: float, core: bool, pinned: bool
) -> None:
    p = NewPattern("User values honesty", kind, confidence, "explicit", (1,), core=core)
    assert p.pinned is pinned


@pytest.mark.parametrize(
    ("item", "reason"),
    [
        ({"kind": "event"}, "occurs_on: required for an event"),
        ({"kind": "event", "occurs_on": "2025-02-30"}, "is not a date"),
        ({"kind": "event", "occurs_on": "7 March"}, "expected a date"),
        ({"kind": "event", "occurs_on": "2025-3-7"}, "expected a date"),
        ({"kind": "event", "occurs_on": 20250307}, "expected a date"),
        ({"kind": "event", "occurs_on": "2025-03-07", "occurs_at": "7pm"}, "expected a local"),
        ({"kind": "event", "occurs_on": "2025-03-07", "occurs_at": "25:00"}, "not a time"),
        ({"kind": "goal", "occurs_on": "2025-06-30"}, "only an event has a day"),
        ({"kind": "fact", "occurs_at": "10:00"}, "only an event has a day"),
        ({"kind": "fact", "core": "yes"}, "core: expected true or false"),
        ({"kind": "mood"}, "is not one of"),
    ],
)
def test_invalid_days_and_flags_are_rejected(item: dict[str, Any], reason: str) -> None:
    body = extraction(new_patterns=[new("User has plans", [1], **item)])  # type: ignore[arg-type]
    with pytest.raises(ExtractionInvalid, match=reason):
        parse_extraction(body)


def test_the_extractor_is_told_the_kinds_and_sees_each_messages_weekday() -> None:
    for word in ("fact", "event", "occurs_on", "occurs_at", "core", "time_of_day", "season"):
        assert word in EXTRACTION_SYSTEM
    assert "never against today" in EXTRACTION_SYSTEM
    prompt = user_prompt(
        [ChunkMessage(7, "user", "My team offsite is next Friday", SAID)],
        [
            KnownPattern(
                3,
                "User has a dentist appointment",
                "event",
                1.0,
                0.8,
                date(2025, 3, 10),
                time(16, 0),
            )
        ],
        ZoneInfo(TZ),
    )
    assert "[#7 user, 2025-03-03 Mon 10:00] My team offsite is next Friday" in prompt
    assert "#3 [event on Mon 10 Mar 2025, 16:00, strength 1.0" in prompt


# --- through compaction --------------------------------------------------------------------------


async def store(db: Database, rows: Sequence[ChatMessage], chat_id: int = CHAT) -> list[int]:
    before = await db.fetchval("SELECT coalesce(max(id), 0) FROM chat_messages")
    await insert_rows(db, chat_id, rows)
    got = await db.fetch("SELECT id FROM chat_messages WHERE id > $1 ORDER BY id", before)
    return [r["id"] for r in got]


def said(text: str, minutes: int = 0, role: str = "user") -> ChatMessage:
    return ChatMessage(role=role, content=text, created_at=SAID + timedelta(minutes=minutes))  # type: ignore[arg-type]


def conversation() -> list[ChatMessage]:
    return [
        said("My team offsite is next Friday, from 9:30."),
        said("Sounds fun!", 1, "assistant"),
        said("I work as a Solution Architect at GovTech, that is who I am.", 2),
        said("Nice.", 3, "assistant"),
        said("ok", 4),
        said("ok", 5),
    ]


async def patterns(db: Database, chat_id: int = CHAT) -> list[dict[str, Any]]:
    rows = await db.fetch("SELECT * FROM patterns WHERE chat_id = $1 ORDER BY id", chat_id)
    return [dict(r) for r in rows]


async def test_next_friday_said_on_monday_3_march_is_stored_as_7_march(
    db: Database, claude: AnthropicLLM, fake_claude: FakeAnthropic, local: LocalEmbedder
) -> None:
    """Compacted weeks later: the extractor sees the message's own local date and weekday, and
    the day it answers (resolved against that message) is what the row keeps."""
    r = await store(db, conversation())
    fake_claude.queue_text(
        extraction(
            new_patterns=[
                new(
                    "User has a team offsite",
                    [r[0]],
                    "event",
                    occurs_on="2025-03-07",
                    occurs_at="09:30",
                ),
                new(
                    "User works as a Solution Architect at GovTech",
                    [r[2]],
                    "fact",
                    confidence=0.95,
                    core=True,
                ),
            ]
        )
    )
    out = await compact_chat(db, claude, local, CHAT, options=OPTS)
    assert out.status == "ok" and out.patterns_created == 2

    offsite, job = await patterns(db)
    assert (offsite["kind"], offsite["occurs_on"], offsite["occurs_at"]) == (
        "event",
        date(2025, 3, 7),
        time(9, 30),
    )
    assert offsite["last_seen"] == SAID and not offsite["is_core_tenet"]
    assert (job["kind"], job["occurs_on"], job["is_core_tenet"]) == ("fact", None, True)
    assert job["pinned_at"] is not None
    prompt = fake_claude.answered[0].messages[0]["content"]
    prompt = prompt if isinstance(prompt, str) else prompt[0]["text"]
    assert f"[#{r[0]} user, 2025-03-03 Mon 10:00] My team offsite is next Friday" in prompt
    assert "2025-03-07" not in prompt  # the model resolved it; nothing resolved it for it


async def test_an_invalid_day_gets_the_one_repair_and_then_counts(
    db: Database, claude: AnthropicLLM, fake_claude: FakeAnthropic, local: LocalEmbedder
) -> None:
    r = await store(db, conversation())
    fake_claude.queue_text(
        extraction(
            new_patterns=[new("User has a team offsite", [r[0]], "event", occurs_on="2025-02-30")]
        )
    )
    fake_claude.queue_text(
        extraction(
            new_patterns=[new("User has a team offsite", [r[0]], "event", occurs_on="2025-03-07")]
        )
    )
    out = await compact_chat(db, claude, local, CHAT, options=OPTS)
    assert out.status == "ok"
    [repair] = [m for m in fake_claude.answered[1].messages if m["role"] == "user"][1:]
    text = repair["content"] if isinstance(repair["content"], str) else repair["content"][0]["text"]
    assert "occurs_on" in text and "is not a date" in text
    [offsite] = await patterns(db)
    assert offsite["occurs_on"] == date(2025, 3, 7)


async def test_twice_invalid_days_store_nothing(
    db: Database, claude: AnthropicLLM, fake_claude: FakeAnthropic, local: LocalEmbedder
) -> None:
    r = await store(db, conversation())
    for _ in range(2):  # an event without its day, twice
        fake_claude.queue_text(
            extraction(new_patterns=[new("User has a team offsite", [r[0]], "event")])
        )
    out = await compact_chat(db, claude, local, CHAT, options=OPTS)
    assert out.status == "failed" and out.messages_compacted == 0
    assert await patterns(db) == []


async def test_an_event_on_another_day_is_another_event(
    db: Database, claude: AnthropicLLM, fake_claude: FakeAnthropic, local: LocalEmbedder
) -> None:
    """Dedup by hash and by vector stays within one day: the same words on another day are
    inserted, on the same day reinforced."""
    r = await store(db, conversation())
    fake_claude.queue_text(
        extraction(
            new_patterns=[new("User has a team offsite", [r[0]], "event", occurs_on="2025-03-07")]
        )
    )
    await compact_chat(db, claude, local, CHAT, options=OPTS)
    r2 = await store(
        db, [said("Another team offsite next month, on 4 April.", 60), said("x", 61), said("y", 62)]
    )
    fake_claude.queue_text(
        extraction(
            new_patterns=[
                new("User has a team offsite", [r2[0]], "event", occurs_on="2025-04-04"),
            ]
        )
    )
    out = await compact_chat(db, claude, local, CHAT, options=OPTS)
    assert out.patterns_created == 1 and out.patterns_reinforced == 0
    days = [(p["content"], p["occurs_on"], p["times_seen"]) for p in await patterns(db)]
    assert days == [
        ("User has a team offsite", date(2025, 3, 7), 1),
        ("User has a team offsite", date(2025, 4, 4), 1),
    ]
    r3 = await store(
        db, [said("The offsite on the 7th is still on.", 120), said("x", 121), said("y", 122)]
    )
    fake_claude.queue_text(
        extraction(
            new_patterns=[new("User has a team offsite", [r3[0]], "event", occurs_on="2025-03-07")]
        )
    )
    out = await compact_chat(db, claude, local, CHAT, options=OPTS)
    assert (out.patterns_created, out.patterns_reinforced) == (0, 1)
    assert [p["times_seen"] for p in await patterns(db)] == [2, 1]


# --- remember -------------------------------------------------------------------------------------


class Judge:
    """An adjudicator that says "the same" to everything (so only the day can keep apart)."""

    async def __call__(self, a: str, b: str, chat_id: int) -> Adjudication | None:
        return Adjudication("none", True, True)


def ctx(db: Database, embedder: LocalEmbedder, chat_id: int = CHAT) -> ToolContext:
    return ToolContext(db=db, embedder=embedder, chat_id=chat_id, timezone=TZ, now=SAID)


async def call(registry: ToolRegistry, args: dict[str, Any], c: ToolContext) -> dict[str, Any]:
    outcome = await registry.call("remember", args, c)
    body: dict[str, Any] = json.loads(outcome.content)
    body["is_error"] = outcome.is_error
    return body


async def test_remember_an_event_and_a_fact(db: Database, local: LocalEmbedder) -> None:
    registry = memory_registry(Judge())
    c = ctx(db, local)
    first = await call(
        registry,
        {
            "fact": "User has a dentist appointment",
            "kind": "event",
            "date": "2025-03-10",
            "time": "16:00",
        },
        c,
    )
    assert first["status"] == "new" and first["date"] == "2025-03-10"
    other_day = await call(
        registry,
        {"fact": "User has a dentist appointment", "kind": "event", "date": "2025-04-10"},
        c,
    )
    near = await call(
        registry,
        {"fact": "User has a dentist appointment soon", "kind": "event", "date": "2025-05-02"},
        c,
    )
    same = await call(
        registry,
        {"fact": "User has a dentist appointment", "kind": "event", "date": "2025-03-10"},
        c,
    )
    fact = await call(registry, {"fact": "User lives in Valencia", "kind": "fact"}, c)
    assert (other_day["status"], near["status"], fact["status"]) == ("new", "new", "new")
    assert same["status"] == "reinforced" and same["id"] == first["id"]
    rows = [(p["kind"], p["occurs_on"], p["occurs_at"], p["source"]) for p in await patterns(db)]
    assert rows == [
        ("event", date(2025, 3, 10), time(16, 0), "explicit"),
        ("event", date(2025, 4, 10), None, "explicit"),
        ("event", date(2025, 5, 2), None, "explicit"),
        ("fact", None, None, "explicit"),
    ]
    recalled = await registry.call("recall_memory", {"query": "dentist appointment"}, c)
    dentist = [m for m in json.loads(recalled.content)["memories"] if m["id"] == first["id"]]
    assert dentist and (dentist[0]["date"], dentist[0]["time"]) == ("2025-03-10", "16:00")


@pytest.mark.parametrize(
    ("args", "field", "reason"),
    [
        ({"kind": "event"}, "date", "an event needs its date"),
        ({"kind": "event", "date": "2025-02-30"}, "date", "not a valid calendar date"),
        ({"kind": "event", "date": "2025-03-10", "time": "25:61"}, "time", "not a time of day"),
        ({"kind": "event", "date": "2025-03-10", "time": "4pm"}, "time", "pattern"),
        ({"kind": "goal", "date": "2025-06-30"}, "date", "only an event has a date"),
    ],
)
async def test_remember_refuses_a_bad_day(
    db: Database, local: LocalEmbedder, args: dict[str, Any], field: str, reason: str
) -> None:
    body = await call(
        memory_registry(), {"fact": "User has a dentist appointment", **args}, ctx(db, local)
    )
    assert body["is_error"] and body["field"] == field and reason in body["error"]
    assert await patterns(db) == []


# --- the merge job --------------------------------------------------------------------------------


async def test_merge_never_pairs_events_of_different_days(
    db: Database, local: LocalEmbedder
) -> None:
    registry = memory_registry()
    c = ctx(db, local)
    for day in ("2025-03-10", "2025-04-10"):
        await call(
            registry, {"fact": "User has a dentist appointment", "kind": "event", "date": day}, c
        )
    await call(registry, {"fact": "User has a dentist appointment", "kind": "belief"}, c)
    await call(
        registry,
        {"fact": "User sees the dentist about a tooth", "kind": "event", "date": "2025-03-10"},
        c,
    )
    assert len(await patterns(db)) == 4
    pairs = await candidate_pairs(db, local.model, 0.3, chat_id=CHAT)
    rows = {p["id"]: p["occurs_on"] for p in await patterns(db)}
    assert pairs, "the same-day pair is a candidate"
    assert all(rows[p.a_id] == rows[p.b_id] == date(2025, 3, 10) for p in pairs)
