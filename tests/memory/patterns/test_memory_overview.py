"""``/memory`` and ``/stats`` say what they count (issue 20, deliverable 10): every active memory
counted in "Memories: N active" shows in the profile (a remembered belief, a past event, a
behaviour...), and counts read in the person's grammar ("1 model call", not "1 model calls"),
through one rule (:func:`runtime.words.count`). On a real PostgreSQL; no model is called."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from chat_bot import CHAT, NOW, OTHER, TZ, add_messages, add_pattern

from actors.chat.command_base import CommandCall
from actors.chat.memory_commands import MemoryServices, profile
from actors.chat.summary_stats import stats_text, summary_text
from memory.embeddings.providers import LocalEmbedder
from memory.extraction.claims import KINDS
from memory.patterns.views import profile_view
from runtime.db import Database
from runtime.words import count, plural


def test_count_is_singular_for_exactly_one() -> None:
    assert count(1, "model call") == "1 model call"
    assert [count(n, "model call") for n in (0, 2, 11)] == [
        "0 model calls",
        "2 model calls",
        "11 model calls",
    ]
    assert count(1, "summary") == "1 summary" and count(2, "summary") == "2 summaries"
    assert count(3, "reply") == "3 replies" and count(3, "day") == "3 days"
    assert count(2, "match") == "2 matches" and count(2, "box") == "2 boxes"
    assert count(-1, "degree") == "-1 degrees"
    assert count(2, "person", "people") == "2 people"
    assert plural("older summary") == "older summaries" and plural("key") == "keys"


async def test_every_active_memory_counted_is_shown_once(db: Database) -> None:
    """Each kind, core or not (an event a day past and one coming): the profile's groups hold
    exactly the active patterns, each once; the others (and another chat's) none."""
    today, ids = NOW.date(), set()
    for kind, core in itertools.product(KINDS, (False, True)):
        days = (today - timedelta(days=3), today + timedelta(days=3)) if kind == "event" else [None]
        for day in days:
            ids.add(
                await add_pattern(
                    db, None, f"{kind} {core} {day}", kind=kind, core=core, occurs_on=day
                )
            )
    for status in ("deprecated", "superseded", "disputed", "merged"):
        await add_pattern(db, None, f"a {status} belief", kind="belief", status=status)
    await add_pattern(db, None, "another chat's belief", kind="belief", chat=OTHER)
    view = await profile_view(db, CHAT, now=NOW, timezone=TZ, per_group=1000)
    shown = [item.id for items in view.groups.values() for item in items]
    assert sorted(shown) == sorted(ids)
    assert view.by_status["active"] == len(ids) == 2 * (len(KINDS) + 1)
    assert {item.kind for item in view.groups["other"]} >= {"belief", "behavior", "event"}


@pytest.mark.parametrize("kind", ["belief", "behavior", "emotion", "causal", "temporal"])
async def test_a_remembered_belief_is_shown_next_to_its_count(
    db: Database, local: LocalEmbedder, kind: str
) -> None:
    s = MemoryServices(db, local, timezone=TZ)
    call = CommandCall(CHAT, "memory", "", now=NOW)
    empty = (await profile(s, call)).text.splitlines()
    assert "I don't know anything about you for sure yet." in empty
    assert "🧠 Memories: none" in empty
    pid = await add_pattern(db, None, "User believes honesty matters more than comfort", kind=kind)
    lines = (await profile(s, call)).text.splitlines()
    assert "🧠 Memories: 1 active" in lines
    assert "I don't know anything about you for sure yet." not in lines
    header = lines.index("🗂 Also remembered:")
    assert lines[header + 1] == f"  • User believes honesty matters more than comfort (#{pid})"


async def test_counts_of_one_read_singular(db: Database, local: LocalEmbedder) -> None:
    s = MemoryServices(db, local, timezone=TZ)
    await db.execute(
        "INSERT INTO api_usage (chat_id, provider, model, purpose, cost_usd, created_at) "
        "VALUES ($1, 'anthropic', 'claude-sonnet-4-6', 'agent', 0.25, $2)",
        CHAT,
        NOW - timedelta(minutes=5),
    )
    stats = await stats_text(s, CHAT, NOW)
    assert "(1 model call)" in stats and "model calls" not in stats
    await add_messages(db, [("user", "hi")])
    await db.execute(
        "INSERT INTO episodes (chat_id, summary, started_at, ended_at, message_count) "
        "VALUES ($1, 'Talked.', $2, $2, 1)",
        CHAT,
        NOW - timedelta(days=5),
    )
    summary = await summary_text(s, CHAT)
    assert "(1 message):" in summary and "In view now: 1 message, since " in summary
    lines = (await profile(s, CommandCall(CHAT, "memory", "", now=NOW))).text.splitlines()
    assert (
        "💬 Conversation: 1 message kept (1 not yet summarised), 1 summary of 1 earlier "
        "message" in lines
    )
