"""Compaction: the chunk rule (pure), and compact_chat on a real database through the real
Anthropic SDK against the strict fake server, with scripted extraction JSON and the local
embedding model."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
import trio
from fakes.anthropic_api import FakeAnthropic
from fakes.memory import DownEmbedder

from memory.compaction.run import (
    INTERRUPTED,
    CompactionOptions,
    CompactionOutcome,
    compact_chat,
    compaction_lock_key,
    oldest_uncompacted,
    select_chunk,
)
from memory.conversation.messages import ChatMessage, ToolCall, insert_rows
from memory.conversation.window import CompactionRule, WindowState
from memory.embeddings.providers import LocalEmbedder
from memory.embeddings.thresholds import default_thresholds
from memory.llm.anthropic_provider import AnthropicLLM
from memory.patterns.canonical import canonical_hash
from memory.patterns.dedup import LLMAdjudicator
from memory.patterns.entry_links import COMPACTION_LINK_CONFIDENCE, TOOL_LOOP_CONFIDENCE
from memory.patterns.explicit import store_explicit_pattern
from runtime.db import Database

CHAT = 7770001
T0 = datetime(2024, 3, 3, 8, 0, tzinfo=UTC)
OPTS = CompactionOptions(timezone="Europe/Madrid", keep_recent=2, max_messages=6)


def msg(role: str, content: str, i: int = 0, **kw: Any) -> ChatMessage:
    return ChatMessage(role=role, content=content, created_at=T0 + timedelta(minutes=i), **kw)  # type: ignore[arg-type]


# --- select_chunk (pure) -----------------------------------------------------------------------


def ids(rows: Sequence[ChatMessage]) -> list[int | None]:
    return [r.id for r in rows]


def numbered(rows: Sequence[ChatMessage]) -> list[ChatMessage]:
    return [
        ChatMessage(
            role=r.role,
            content=r.content,
            created_at=r.created_at,
            tool_calls=r.tool_calls,
            tool_call_id=r.tool_call_id,
            tool_name=r.tool_name,
            id=i + 1,
        )
        for i, r in enumerate(rows)
    ]


def call(cid: str) -> ChatMessage:
    return msg("assistant", "", tool_calls=(ToolCall(cid, "search_entries", {"query": "x"}),))


def result(cid: str) -> ChatMessage:
    return msg("tool_result", "[]", tool_call_id=cid, tool_name="search_entries")


def test_chunk_keeps_recent_and_caps_size() -> None:
    rows = numbered([msg("user", f"m{i}") for i in range(10)])
    assert ids(select_chunk(rows, keep_recent=3, max_messages=4)) == [1, 2, 3, 4]
    assert ids(select_chunk(rows, keep_recent=8, max_messages=40)) == [1, 2]
    assert select_chunk(rows, keep_recent=10, max_messages=40) == []
    assert select_chunk(rows, keep_recent=20, max_messages=40) == []
    assert select_chunk([], keep_recent=0, max_messages=40) == []


def test_chunk_never_splits_a_tool_pair() -> None:
    # 1 user, 2 call a, 3 result a, 4 call b+c (one row), 5 result b, 6 result c, 7 user, 8 user
    rows = numbered(
        [
            msg("user", "u"),
            call("a"),
            result("a"),
            msg("assistant", "", tool_calls=(ToolCall("b", "x", {}), ToolCall("c", "y", {}))),
            result("b"),
            result("c"),
            msg("user", "v"),
            msg("user", "w"),
        ]
    )
    assert ids(select_chunk(rows, keep_recent=0, max_messages=2)) == [1]  # shrinks before 2
    assert ids(select_chunk(rows, keep_recent=0, max_messages=3)) == [1, 2, 3]
    assert ids(select_chunk(rows, keep_recent=0, max_messages=5)) == [1, 2, 3]  # 4..6 together
    assert ids(select_chunk(rows, keep_recent=2, max_messages=40)) == [1, 2, 3, 4, 5, 6]
    # a tool exchange longer than the chunk at the start: extended to its end instead
    assert ids(select_chunk(rows[1:], keep_recent=0, max_messages=1)) == [2, 3]
    # unanswered calls and orphan results do not constrain the cut
    orphan = numbered([call("z"), result("q"), msg("user", "u"), msg("user", "v")])
    assert ids(select_chunk(orphan, keep_recent=1, max_messages=1)) == [1]


def test_lock_key_is_per_chat_and_stable() -> None:
    assert compaction_lock_key(1) == compaction_lock_key(1)
    assert compaction_lock_key(1) != compaction_lock_key(2)
    assert -(2**63) <= compaction_lock_key(-1001234567890) < 2**63


# --- through the fake Anthropic server and a real database -------------------------------------


async def store(db: Database, rows: Sequence[ChatMessage]) -> list[int]:
    before = await db.fetchval("SELECT coalesce(max(id), 0) FROM chat_messages")
    await insert_rows(db, CHAT, rows)
    got = await db.fetch("SELECT id FROM chat_messages WHERE id > $1 ORDER BY id", before)
    return [r["id"] for r in got]


async def test_oldest_uncompacted_reads_a_backlog_in_part(db: Database) -> None:
    r = await store(db, [msg("user", f"m{i}", i) for i in range(150)])
    async with db.connection() as conn:
        assert ids(await oldest_uncompacted(conn, CHAT, 20, 10)) == r[:10]  # reads 94 of 150
        assert ids(await oldest_uncompacted(conn, CHAT, 140, 40)) == r[:10]  # reads all
        assert await oldest_uncompacted(conn, CHAT, 150, 40) == []
    await db.execute("UPDATE chat_messages SET compacted_at = now() WHERE id = ANY($1)", r[:145])
    async with db.connection() as conn:
        assert ids(await oldest_uncompacted(conn, CHAT, 2, 40)) == r[145:148]


def extraction(**parts: Any) -> str:
    body = {
        "new_patterns": [],
        "reinforcements": [],
        "contradictions": [],
        "supersedes": [],
        "meta_patterns": [],
        "episode_summary": "User talked about running.",
    }
    body.update(parts)
    return json.dumps(body)


def new(content: str, evidence: list[int], kind: str = "behavior", **kw: Any) -> dict[str, Any]:
    return {
        "content": content,
        "kind": kind,
        "confidence": 0.8,
        "signal": "explicit",
        "evidence_message_ids": evidence,
        "entry_uuids": [],
        **kw,
    }


async def uncompacted(db: Database) -> list[int]:
    rows = await db.fetch(
        "SELECT id FROM chat_messages WHERE chat_id = $1 AND compacted_at IS NULL ORDER BY id", CHAT
    )
    return [r["id"] for r in rows]


async def compact(
    db: Database, claude: AnthropicLLM, embedder: Any, opts: CompactionOptions = OPTS
) -> CompactionOutcome:
    return await compact_chat(db, claude, embedder, CHAT, options=opts)


RUN = "I ran 10 km along the river this Sunday morning, I run there every Sunday."
COFFEE = "Coffee before running always helps me, I drink a double espresso first."
ENTRY = json.dumps([{"uuid": "e1", "date": "2024-02-25", "text": "Sunday run by the river"}])


def conversation() -> list[ChatMessage]:
    return [
        msg("user", RUN, 0),
        msg(
            "assistant",
            "Let me look.",
            1,
            tool_calls=(ToolCall("t1", "search_entries", {"query": "river run"}),),
        ),
        msg("tool_result", ENTRY, 2, tool_call_id="t1", tool_name="search_entries"),
        msg("assistant", "You run by the river every Sunday, lovely.", 3),
        msg("user", COFFEE, 4),
        msg("assistant", "", 5, tool_calls=(ToolCall("t2", "log_weight", {"weight_kg": 70}),)),
        msg("tool_result", '{"logged": true}', 6, tool_call_id="t2", tool_name="log_weight"),
        msg("assistant", "Logged.", 7),
        msg("user", "Thanks!", 8),
        msg("assistant", "Any time.", 9),
    ]


async def test_scripted_compaction_writes_patterns_and_episode(
    db: Database, claude: AnthropicLLM, fake_claude: FakeAnthropic, local: LocalEmbedder
) -> None:
    r = await store(db, conversation())
    fake_claude.queue_text(
        extraction(
            new_patterns=[
                new(
                    "User runs 10 km along the river every Sunday morning",
                    [r[0], r[2]],
                    entry_uuids=["e1", "made-up-uuid"],
                    temporal={"day_of_week": "Sunday"},
                ),
                # the assistant row and an invented id are dropped, the user row kept
                new(
                    "User drinks a double espresso before running",
                    [r[3], 999_999, r[4]],
                    kind="preference",
                ),
                # only an assistant row as evidence: rejected entirely
                new("User finds river runs lovely", [r[3]], kind="emotion"),
            ],
            episode_summary="User described Sunday river runs and coffee before running.",
        )
    )
    out = await compact(db, claude, local)

    assert out.status == "ok" and out.messages_compacted == 5
    assert out.patterns_created == 2 and out.episode_id is not None
    # the cut at 6 would split the log_weight call (#6) from its result (#7): it moved back
    assert list(out.compacted_ids) == r[:5]
    assert await uncompacted(db) == r[5:]
    assert {x.what for x in out.rejections} >= {"new_patterns[2]"}

    pats = await db.fetch("SELECT * FROM patterns WHERE chat_id = $1 ORDER BY id", CHAT)
    assert [(p["content"], p["kind"], p["status"], p["source"]) for p in pats] == [
        (
            "User runs 10 km along the river every Sunday morning",
            "behavior",
            "active",
            "compaction",
        ),
        ("User drinks a double espresso before running", "preference", "active", "compaction"),
    ]
    assert pats[0]["last_seen"] == T0 + timedelta(minutes=2)  # the newest evidence message
    assert json.loads(pats[0]["temporal"]) == {"day_of_week": "Sunday"}
    assert pats[1]["temporal"] is None
    obs = await db.fetch("SELECT * FROM pattern_observations ORDER BY pattern_id")
    assert [list(o["chat_message_ids"]) for o in obs] == [[r[0], r[2]], [r[4]]]
    assert [list(o["evidence_roles"]) for o in obs] == [["user", "tool_result"], ["user"]]
    assert RUN in obs[0]["evidence"] and "Sunday run by the river" in obs[0]["evidence"]
    assert obs[1]["signal"] == "explicit" and COFFEE in obs[1]["evidence"]
    links = await db.fetch("SELECT * FROM pattern_entries")
    assert [(x["pattern_id"], x["entry_uuid"], x["source"], x["times_linked"]) for x in links] == [
        (pats[0]["id"], "e1", "compaction", 1)
    ]
    vectors = await db.fetchval("SELECT count(*) FROM pattern_embeddings WHERE chat_id = $1", CHAT)
    assert vectors == 2

    ep = await db.fetchrow("SELECT * FROM episodes WHERE id = $1", out.episode_id)
    assert ep is not None
    assert (ep["first_message_id"], ep["last_message_id"], ep["message_count"]) == (r[0], r[4], 5)
    assert (ep["started_at"], ep["ended_at"]) == (T0, T0 + timedelta(minutes=4))
    assert ep["summary"].startswith("User described Sunday river runs")
    assert await db.fetchval("SELECT count(*) FROM episode_embeddings") == 1
    run = await db.fetchrow("SELECT * FROM compaction_runs WHERE id = $1", out.run_id)
    assert run is not None and (
        run["status"],
        run["messages_compacted"],
        run["patterns_created"],
    ) == ("ok", 5, 2)
    purposes = [x["purpose"] for x in await db.fetch("SELECT purpose FROM api_usage")]
    assert purposes == ["compaction"]
    # the extractor saw the tool call and the untrusted tool result, with ids
    prompt = fake_claude.answered[0].messages[0]["content"]
    prompt = prompt if isinstance(prompt, str) else prompt[0]["text"]
    assert f"#{r[2]} tool_result search_entries" in prompt and "<untrusted" in prompt
    assert "called search_entries" in prompt and f"#{r[5]}" not in prompt


async def seed_pattern(
    db: Database,
    content: str,
    *,
    kind: str = "behavior",
    last_seen: datetime = T0,
    strength: float = 1.0,
    confidence: float = 0.6,
) -> int:
    return int(
        await db.fetchval(
            "INSERT INTO patterns (chat_id, content, kind, strength, confidence, canonical_hash, "
            "first_seen, last_seen) VALUES ($1, $2, $3, $4, $5, md5($2), $6, $6) RETURNING id",
            CHAT,
            content,
            kind,
            strength,
            confidence,
            last_seen,
        )
    )


async def pattern(db: Database, pattern_id: int) -> dict[str, Any]:
    row = await db.fetchrow("SELECT * FROM patterns WHERE id = $1", pattern_id)
    assert row is not None
    return dict(row)


async def relations(db: Database) -> list[tuple[int, int, str]]:
    rows = await db.fetch("SELECT * FROM pattern_relations ORDER BY from_pattern_id, to_pattern_id")
    return [(r["from_pattern_id"], r["to_pattern_id"], r["relation"]) for r in rows]


def reinforce(pid: int, evidence: list[int], signal: str = "explicit") -> dict[str, Any]:
    return {
        "pattern_id": pid,
        "confidence": 0.9,
        "signal": signal,
        "evidence_message_ids": evidence,
        "entry_uuids": [],
    }


async def test_repeated_theme_reinforces_with_spacing(
    db: Database, claude: AnthropicLLM, fake_claude: FakeAnthropic, local: LocalEmbedder
) -> None:
    pid = await seed_pattern(
        db, "User runs along the river every Sunday", last_seen=T0 - timedelta(days=14)
    )
    r = await store(
        db,
        [
            msg("user", RUN, 0),
            msg("assistant", "Great!", 1),
            msg("user", "ok", 2),
            msg("user", "ok", 3),
        ],
    )
    fake_claude.queue_text(extraction(reinforcements=[reinforce(pid, [r[0]])]))
    out = await compact(db, claude, local)
    assert out.status == "ok" and out.patterns_reinforced == 1 and out.patterns_created == 0
    p = await pattern(db, pid)
    # 14 days after the last sighting: nearly the full boost 1 - e^-2
    assert p["strength"] == pytest.approx(1.0 + 1.0 - np.exp(-2.0))
    assert p["times_seen"] == 2 and p["last_seen"] == T0
    assert p["confidence"] == pytest.approx(0.6 + 0.1 * 0.4)
    obs = await db.fetch("SELECT * FROM pattern_observations WHERE pattern_id = $1", pid)
    assert [list(o["chat_message_ids"]) for o in obs] == [[r[0]]]

    # the same theme minutes later (massed): times_seen still counts, strength barely moves
    r2 = await store(db, [msg("user", RUN, 5), msg("user", "x", 6), msg("user", "y", 7)])
    fake_claude.queue_text(extraction(reinforcements=[reinforce(pid, [r2[0]], "implicit")]))
    assert (await compact(db, claude, local)).patterns_reinforced == 1
    q = await pattern(db, pid)
    assert q["times_seen"] == 3 and q["strength"] - p["strength"] < 0.01
    assert await db.fetchval("SELECT count(*) FROM pattern_observations") == 2


async def test_a_reinforcement_finalises_the_turns_entry_link(
    db: Database, claude: AnthropicLLM, fake_claude: FakeAnthropic, local: LocalEmbedder
) -> None:
    """The model opened entry e1 during a turn with the pattern injected (a ``tool_loop``
    link); compaction then cites e1 for that pattern: the link becomes a compaction link
    (upsert: source, the higher confidence, times_linked + 1), and a second entry cited on a
    reinforcement is linked fresh."""
    pid = await seed_pattern(
        db, "User runs along the river every Sunday", last_seen=T0 - timedelta(days=14)
    )
    await db.execute(
        "INSERT INTO pattern_entries (pattern_id, entry_uuid, chat_id, source, confidence,"
        " times_linked, last_linked_at) VALUES ($1, 'e1', $2, 'tool_loop', $3, 1, $4)",
        pid,
        CHAT,
        TOOL_LOOP_CONFIDENCE,
        T0 - timedelta(days=1),
    )
    two = json.dumps(
        [
            {"uuid": "e1", "date": "2024-02-25", "text": "Sunday run by the river"},
            {"uuid": "e2", "date": "2024-03-03", "text": "Another river run"},
        ]
    )
    turn = conversation()[:4]
    turn[2] = msg("tool_result", two, 2, tool_call_id="t1", tool_name="search_entries")
    r = await store(db, [*turn, msg("user", "ok", 4), msg("user", "ok", 5)])
    fake_claude.queue_text(
        extraction(reinforcements=[{**reinforce(pid, [r[0], r[2]]), "entry_uuids": ["e1", "e2"]}])
    )
    out = await compact(db, claude, local)
    assert out.status == "ok" and out.patterns_reinforced == 1
    rows = await db.fetch(
        "SELECT entry_uuid, source, confidence, times_linked, last_linked_at FROM pattern_entries"
        " WHERE pattern_id = $1 ORDER BY entry_uuid",
        pid,
    )
    assert [(x["entry_uuid"], x["source"], x["confidence"], x["times_linked"]) for x in rows] == [
        ("e1", "compaction", COMPACTION_LINK_CONFIDENCE, 2),
        ("e2", "compaction", COMPACTION_LINK_CONFIDENCE, 1),
    ]
    assert rows[0]["last_linked_at"] == T0 + timedelta(minutes=2)  # the newest evidence row


async def test_contradictions_lower_confidence_then_dispute(
    db: Database, claude: AnthropicLLM, fake_claude: FakeAnthropic, local: LocalEmbedder
) -> None:
    pid = await seed_pattern(db, "User needs melatonin to sleep", confidence=0.8)
    said = "I sleep fine now without melatonin."
    r = await store(db, [msg("user", said, 0), msg("user", "a", 1), msg("user", "b", 2)])
    contra = {
        "pattern_id": pid,
        "reason": "User sleeps well without melatonin",
        "signal": "explicit",
        "evidence_message_ids": [r[0]],
    }
    fake_claude.queue_text(extraction(contradictions=[contra]))
    out = await compact(db, claude, local)
    assert out.status == "ok" and out.patterns_contradicted == 1
    p = await pattern(db, pid)
    assert p["confidence"] == pytest.approx(0.65) and p["contradiction_count"] == 1
    assert p["status"] == "active"
    assert await relations(db) == [(pid, pid, "contradicts")]  # no rival: a self-relation

    # a second contradiction, this time with a rival new pattern citing the same message
    r2 = await store(
        db,
        [
            msg("user", "Still sleeping well without melatonin.", 5),
            msg("user", "c", 6),
            msg("user", "d", 7),
        ],
    )
    fake_claude.queue_text(
        extraction(
            new_patterns=[new("User sleeps well without melatonin", [r2[0]])],
            contradictions=[{**contra, "evidence_message_ids": [r2[0]]}],
        )
    )
    out = await compact(db, claude, local)
    assert out.patterns_contradicted == 1 and out.patterns_created == 1
    p = await pattern(db, pid)
    assert p["status"] == "disputed" and p["contradiction_count"] == 2
    assert p["confidence"] == pytest.approx(0.5)
    assert p["status_reason"] == "contradicted: User sleeps well without melatonin"
    rival = await db.fetchval("SELECT id FROM patterns WHERE content LIKE 'User sleeps well%'")
    assert (
        await db.fetchval(
            "SELECT count(*) FROM pattern_relations"
            " WHERE from_pattern_id = $1 AND to_pattern_id = $2"
            " AND relation = 'contradicts'",
            rival,
            pid,
        )
        == 1
    )


async def test_supersede_replaces_the_old_pattern(
    db: Database, claude: AnthropicLLM, fake_claude: FakeAnthropic, local: LocalEmbedder
) -> None:
    old = await seed_pattern(db, "User trains with a push pull legs split")
    said = "I switched from push pull legs to a full-body training split three times a week."
    r = await store(db, [msg("user", said, 0), msg("user", "a", 1), msg("user", "b", 2)])
    fake_claude.queue_text(
        extraction(
            supersedes=[
                {
                    "old_pattern_id": old,
                    "reason": "User permanently switched training approach",
                    "new_pattern_content": (
                        "User follows a full-body training split three times a week"
                    ),
                    "kind": "behavior",
                    "confidence": 0.9,
                    "signal": "explicit",
                    "evidence_message_ids": [r[0]],
                    "entry_uuids": [],
                }
            ]
        )
    )
    out = await compact(db, claude, local)
    assert out.status == "ok" and out.patterns_superseded == 1 and out.patterns_created == 1
    p = await pattern(db, old)
    assert (p["status"], p["status_reason"]) == (
        "superseded",
        "User permanently switched training approach",
    )
    new_id = await db.fetchval("SELECT id FROM patterns WHERE status = 'active'")
    assert await relations(db) == [(new_id, old, "supersedes")]  # old <- new


async def test_near_duplicate_is_reinforced_with_an_alias(
    db: Database, claude: AnthropicLLM, fake_claude: FakeAnthropic, local: LocalEmbedder
) -> None:
    first = "User runs along the river every Sunday morning"
    decision = await store_explicit_pattern(
        db,
        local,
        LLMAdjudicator(claude),
        chat_id=CHAT,
        content=first,
        kind="behavior",
        now=T0 - timedelta(days=7),
    )
    assert decision.action == "insert" and decision.pattern_id is not None
    pid = decision.pattern_id
    said = "I go running by the river on Sunday mornings, always."
    r = await store(db, [msg("user", said, 0), msg("user", "a", 1), msg("user", "b", 2)])
    near = "User goes running by the river on Sunday mornings"
    fake_claude.queue_text(extraction(new_patterns=[new(near, [r[0]])]))
    fake_claude.queue_text(
        json.dumps(
            {"differences": "wording only", "core_intent_match": True, "merge_decision": True}
        )
    )
    out = await compact(db, claude, local)
    assert out.status == "ok" and (out.patterns_created, out.patterns_reinforced) == (0, 1)
    assert await db.fetchval("SELECT count(*) FROM patterns") == 1
    p = await pattern(db, pid)
    assert p["times_seen"] == 2 and p["strength"] > 1.5  # a week later: a good boost
    alias = await db.fetchrow("SELECT id, content FROM pattern_aliases WHERE pattern_id = $1", pid)
    assert alias is not None and alias["content"] == near
    assert (
        await db.fetchval("SELECT count(*) FROM alias_embeddings WHERE alias_id = $1", alias["id"])
        == 1
    )
    assert (
        await db.fetchval("SELECT count(*) FROM pattern_observations WHERE pattern_id = $1", pid)
        == 2
    )
    purposes = [x["purpose"] for x in await db.fetch("SELECT purpose FROM api_usage ORDER BY id")]
    assert purposes == ["compaction", "adjudication"]


async def test_meta_pattern_links_its_children(
    db: Database, claude: AnthropicLLM, fake_claude: FakeAnthropic, local: LocalEmbedder
) -> None:
    a = await seed_pattern(db, "User feels anxious before work meetings", strength=3.0)
    b = await seed_pattern(db, "User sleeps badly before work meetings", strength=2.5)
    await store(db, [msg("user", "hi", 0), msg("user", "a", 1), msg("user", "b", 2)])
    fake_claude.queue_text(
        extraction(
            meta_patterns=[
                {
                    "content": "Work meetings make user anxious and sleep badly",
                    "kind": "causal",
                    "confidence": 0.7,
                    "child_pattern_ids": [a, b],
                }
            ]
        )
    )
    out = await compact(db, claude, local)
    assert out.status == "ok" and out.meta_patterns == 1
    meta = await db.fetchrow("SELECT * FROM patterns WHERE kind = 'causal'")
    assert meta is not None and meta["strength"] == pytest.approx(5.5)
    assert await relations(db) == [(meta["id"], a, "parent_of"), (meta["id"], b, "parent_of")]
    ev = await db.fetchval(
        "SELECT evidence FROM pattern_observations WHERE pattern_id = $1", meta["id"]
    )
    assert f"[pattern #{a}]" in ev and f"[pattern #{b}]" in ev


async def test_invalid_json_twice_leaves_every_message(
    db: Database, claude: AnthropicLLM, fake_claude: FakeAnthropic, local: LocalEmbedder
) -> None:
    r = await store(db, conversation())
    fake_claude.queue_text("Sure! Here are the patterns: none really.")
    fake_claude.queue_text('{"new_patterns": [ oops')
    out = await compact(db, claude, local)
    assert out.status == "failed" and out.error == "invalid JSON twice"
    assert await uncompacted(db) == r
    assert await db.fetchval("SELECT count(*) FROM patterns") == 0
    assert await db.fetchval("SELECT count(*) FROM episodes") == 0
    run = await db.fetchrow("SELECT status, error, finished_at FROM compaction_runs")
    assert run is not None and run["status"] == "failed" and run["finished_at"] is not None
    assert len(fake_claude.answered) == 2  # the first answer and the one repair


async def test_a_run_left_running_by_a_dead_process_is_closed_as_interrupted(
    db: Database, claude: AnthropicLLM, fake_claude: FakeAnthropic, local: LocalEmbedder
) -> None:
    await store(db, conversation())
    other_chat = CHAT + 1
    await db.execute(  # a crash mid-compaction: the row stays 'running', the lock went away
        "INSERT INTO compaction_runs (chat_id, status) VALUES ($1, 'running'), ($2, 'running')",
        CHAT,
        other_chat,
    )
    fake_claude.queue_text(extraction())
    assert (await compact(db, claude, local)).status == "ok"
    runs = await db.fetch("SELECT chat_id, status, error FROM compaction_runs ORDER BY id")
    assert [(r["chat_id"], r["status"]) for r in runs] == [
        (CHAT, "failed"),
        (other_chat, "running"),
        (CHAT, "ok"),
    ]
    assert runs[0]["error"] == INTERRUPTED  # another chat's run is not ours to judge


async def test_llm_outage_fails_the_run_and_keeps_messages(
    db: Database, claude: AnthropicLLM, fake_claude: FakeAnthropic, local: LocalEmbedder
) -> None:
    from fakes.anthropic_api import Failure

    r = await store(db, conversation())
    fake_claude.fail_next(Failure.overloaded(), times=5)
    out = await compact(db, claude, local)
    assert out.status == "failed" and "LLMOverloaded" in (out.error or "")
    assert await uncompacted(db) == r
    assert await db.fetchval("SELECT status FROM compaction_runs") == "failed"


async def test_embedding_outage_stores_patterns_without_vectors(
    db: Database, claude: AnthropicLLM, fake_claude: FakeAnthropic
) -> None:
    existing = await seed_pattern(db, "User runs 10 km along the river every Sunday morning")
    text = "User runs 10 km along the river every Sunday morning"
    await db.execute(
        "UPDATE patterns SET canonical_hash = $1 WHERE id = $2", canonical_hash(text), existing
    )
    r = await store(db, conversation())
    fake_claude.queue_text(
        extraction(
            new_patterns=[
                new(
                    "User runs 10 km along the river every Sunday morning.", [r[0]]
                ),  # same canonical
                new("User drinks a double espresso before running", [r[4]], kind="preference"),
            ]
        )
    )
    out = await compact(db, claude, DownEmbedder())
    assert out.status == "ok" and (out.patterns_created, out.patterns_reinforced) == (1, 1)
    assert await db.fetchval("SELECT count(*) FROM patterns") == 2
    assert await db.fetchval("SELECT count(*) FROM pattern_embeddings") == 0  # backfill's job
    assert await db.fetchval("SELECT count(*) FROM episode_embeddings") == 0
    assert await uncompacted(db) == r[5:]


async def test_under_budget_or_nothing_to_compact_is_not_needed(
    db: Database, claude: AnthropicLLM, fake_claude: FakeAnthropic, local: LocalEmbedder
) -> None:
    await store(db, conversation())

    async def small(chat_id: int) -> WindowState:
        return WindowState(rows=len(conversation()), tokens=100, idle_seconds=60)

    rule = CompactionRule(token_budget=1000, keep_recent=2, chunk_messages=6)
    opts = CompactionOptions(keep_recent=2, max_messages=6, rule=rule)
    out = await compact_chat(db, claude, local, CHAT, options=opts, estimate=small)
    assert out.status == "not_needed"
    out = await compact(db, claude, local, CompactionOptions(keep_recent=50))
    assert out.status == "not_needed"
    assert fake_claude.requests == []
    assert await db.fetchval("SELECT count(*) FROM compaction_runs") == 0


async def advisory_locks(db: Database) -> int:
    return int(
        await db.fetchval(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = "
            "(SELECT oid FROM pg_database WHERE datname = current_database())"
        )
    )


async def test_a_held_lock_skips_at_once(
    db: Database, claude: AnthropicLLM, fake_claude: FakeAnthropic, local: LocalEmbedder
) -> None:
    r = await store(db, conversation())
    async with db.connection() as other:
        assert await other.fetchval("SELECT pg_try_advisory_lock($1)", compaction_lock_key(CHAT))
        out = await compact(db, claude, local)
        assert out.status == "skipped" and fake_claude.requests == []
        await other.execute("SELECT pg_advisory_unlock($1)", compaction_lock_key(CHAT))
    assert await uncompacted(db) == r
    assert await db.fetchval("SELECT status FROM compaction_runs") == "skipped"
    # released: the next one runs (and releases the lock in turn)
    fake_claude.queue_text(extraction())
    assert (await compact(db, claude, local)).status == "ok"
    assert await advisory_locks(db) == 0


async def test_explicit_pattern_hash_duplicate_reinforces(
    db: Database, claude: AnthropicLLM, local: LocalEmbedder
) -> None:
    judge = LLMAdjudicator(claude)
    first = await store_explicit_pattern(
        db, local, judge, chat_id=CHAT, content="User is vegan", kind="belief", now=T0
    )
    again = await store_explicit_pattern(
        db,
        local,
        judge,
        chat_id=CHAT,
        content="user is VEGAN.",
        kind="belief",
        now=T0 + timedelta(days=3),
    )
    assert (first.action, again.action) == ("insert", "reinforce")
    assert again.pattern_id == first.pattern_id
    p = await db.fetchrow("SELECT source, times_seen, confidence FROM patterns")
    assert p is not None and (p["source"], p["times_seen"]) == ("explicit", 2)
    assert await db.fetchval("SELECT count(*) FROM pattern_aliases") == 0  # same canonical text
    assert await db.fetchval("SELECT count(*) FROM pattern_embeddings") == 1
    thresholds = default_thresholds(local.model)
    assert thresholds.dedup > thresholds.adjudicate


class Meeting:
    """The pool, whose transactions open only once both writers have decided (no duplicate
    yet): the race the transaction lock in ``insert_pattern`` is there for."""

    def __init__(self, db: Database) -> None:
        self.db, self.arrived, self.everyone = db, 0, trio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        self.arrived += 1
        if self.arrived == 2:
            self.everyone.set()
        await self.everyone.wait()
        async with self.db.transaction() as conn:
            yield conn


async def test_two_writers_of_the_same_claim_make_one_pattern(
    db: Database, claude: AnthropicLLM, local: LocalEmbedder
) -> None:
    meeting, judge = Meeting(db), LLMAdjudicator(claude)
    decisions: list[Any] = []

    async def remember(text: str) -> None:
        decisions.append(
            await store_explicit_pattern(
                meeting,
                local,
                judge,
                chat_id=CHAT,
                content=text,
                kind="belief",
                now=T0,
            )
        )

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(remember, "User is vegan")
            nursery.start_soon(remember, "user is VEGAN.")
    assert [d.action for d in decisions] == ["insert", "insert"]  # both decided alone
    assert len({d.pattern_id for d in decisions}) == 1  # the second found the first's row
    [p] = await db.fetch("SELECT times_seen FROM patterns")
    assert p["times_seen"] == 2


async def test_cancelled_compaction_releases_the_lock_and_keeps_messages(
    db: Database, claude: AnthropicLLM, fake_claude: FakeAnthropic, local: LocalEmbedder
) -> None:
    from fakes.anthropic_api import Failure

    r = await store(db, conversation())
    fake_claude.fail_next(Failure.slow(30.0))
    with trio.move_on_after(20) as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(compact, db, claude, local)
            while not fake_claude.requests:  # noqa: ASYNC110 - the fake server changes it
                await trio.sleep(0.02)
            nursery.cancel_scope.cancel()  # e.g. shutdown while the model is thinking
    assert not scope.cancelled_caught
    assert await uncompacted(db) == r
    run = await db.fetchrow("SELECT status, error FROM compaction_runs")
    assert run is not None and (run["status"], run["error"]) == ("failed", "cancelled")
    assert await advisory_locks(db) == 0
    fake_claude.queue_text(extraction())
    assert (await compact(db, claude, local)).status == "ok"
