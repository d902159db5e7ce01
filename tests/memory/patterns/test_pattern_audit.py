"""The audit trail (issue 16, item 4) and the memory actions' one path (item 5), on a real
PostgreSQL: every status change and pin — forget (by the model's tool and by the person),
merge (the job and the person), supersede and dispute (compaction), pin/unpin, TTL expiry —
writes its ``pattern_audit`` row in the same transaction; nothing changes, nothing is written;
another chat's id is not found; ``link_memories`` records a stated relation."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from memory.patterns.audit import change_status, history
from memory.patterns.canonical import canonical_hash
from memory.patterns.controls import forget_pattern, link_patterns, merge_two, pin_pattern
from memory.patterns.maintenance import PatternTtlJob, cap_patterns, expire_stale_patterns
from memory.patterns.merge import merge_pair
from memory.patterns.relations import contradict_pattern, supersede_pattern
from memory.patterns.writes import (
    Evidence,
    Vectors,
    insert_pattern,
)
from memory.tools.memory_tools import memory_registry
from memory.tools.registry import ToolContext
from runtime.db import Database

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
CHAT, OTHER = 4401, 4402


async def add(
    db: Database,
    content: str,
    *,
    chat: int = CHAT,
    kind: str = "belief",
    strength: float = 1.0,
    confidence: float = 0.8,
    times_seen: int = 1,
    last_seen: datetime | None = None,
) -> int:
    seen = last_seen or NOW - timedelta(days=3)
    pid: int = await db.fetchval(
        "INSERT INTO patterns (chat_id, content, kind, confidence, strength, times_seen, "
        "canonical_hash, first_seen, last_seen) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) "
        "RETURNING id",
        chat,
        content,
        kind,
        confidence,
        strength,
        times_seen,
        canonical_hash(content),
        seen,
    )
    return pid


async def audit_rows(db: Database, pid: int) -> list[tuple[Any, ...]]:
    rows = await db.fetch(
        "SELECT action, old_status, new_status, reason, actor, other_pattern_id "
        "FROM pattern_audit WHERE pattern_id = $1 ORDER BY id",
        pid,
    )
    return [tuple(r) for r in rows]


async def status(db: Database, pid: int) -> str:
    return str(await db.fetchval("SELECT status FROM patterns WHERE id = $1", pid))


def ctx(db: Database, chat: int = CHAT) -> ToolContext:
    return ToolContext(db=db, embedder=None, chat_id=chat, timezone="UTC", now=NOW)


async def call(name: str, raw: dict[str, Any], c: ToolContext) -> tuple[Any, bool]:
    outcome = await memory_registry().call(name, raw, c)
    return json.loads(outcome.content), outcome.is_error


async def test_the_model_cannot_forget_only_the_person_can(db: Database) -> None:
    pid = await add(db, "User is allergic to peanuts")
    body, err = await call("forget_memory", {"id": pid, "reason": "a joke"}, ctx(db, OTHER))
    assert err and body["error"] == f"no memory with id {pid}"
    assert await audit_rows(db, pid) == [] and await status(db, pid) == "active"
    body, err = await call("forget_memory", {"id": pid, "reason": "a joke"}, ctx(db))
    assert err and "confirmation" in body["error"]  # no way to ask: refused, nothing changed
    assert await audit_rows(db, pid) == [] and await status(db, pid) == "active"
    done = await forget_pattern(db, CHAT, pid, reason="forgotten by the person", actor="person")
    assert done is not None and done.outcome == "forgotten"
    # forgotten is gone (issue 20): the pattern row went, its audit row stays
    assert await db.fetchval("SELECT count(*) FROM patterns WHERE id = $1", pid) == 0
    again = await forget_pattern(db, CHAT, pid, reason="forgotten by the person", actor="person")
    assert again is None
    assert len(await audit_rows(db, pid)) == 1  # no change, no row
    [row] = await history(db, CHAT, pid)
    assert row.actor == "person" and row.at is not None
    assert await history(db, OTHER, pid) == []


async def test_a_failed_transaction_leaves_neither_change_nor_row(db: Database) -> None:
    pid = await add(db, "User works nights")
    with pytest.raises(RuntimeError):
        async with db.transaction() as conn:
            done = await change_status(
                conn, CHAT, pid, "deprecated", action="forget", actor="person", reason="x"
            )
            assert done is not None and done.changed
            raise RuntimeError("rolled back")
    assert await status(db, pid) == "active" and await audit_rows(db, pid) == []


async def test_merge_job_and_person_merges_are_audited(db: Database) -> None:
    strong = await add(db, "User drinks tea daily", strength=3.0)
    weak = await add(db, "User has tea every day", strength=1.0)
    assert await merge_pair(db, strong, weak, differences="same habit") == (strong, weak)
    assert await audit_rows(db, weak) == [
        ("merge", "active", "merged", f"merged into #{strong}: same habit", "merge_job", strong)
    ]
    a, b = await add(db, "User likes jazz"), await add(db, "User enjoys jazz", strength=2.0)
    foreign = await add(db, "User likes jazz music", chat=OTHER)
    refused = await merge_two(db, CHAT, a, foreign)
    assert refused.problem == f"memory #{foreign} not found"
    assert (await merge_two(db, CHAT, a, a)).problem == "a memory cannot be merged with itself"
    done = await merge_two(db, CHAT, a, b)
    assert (done.survivor, done.loser) == (b, a)
    [(action, old, new, _, actor, other)] = await audit_rows(db, a)
    assert (action, old, new, actor, other) == ("merge", "active", "merged", "person", b)
    assert (await merge_two(db, CHAT, a, b)).problem == f"memory #{a} is merged, not active"


async def test_compaction_supersede_and_dispute_are_audited(db: Database) -> None:
    old, new = await add(db, "User drinks coffee"), await add(db, "User quit coffee")
    async with db.transaction() as conn:
        assert await supersede_pattern(conn, old, new, CHAT, "quit coffee in March")
    assert await audit_rows(db, old) == [
        ("supersede", "active", "superseded", "quit coffee in March", "compaction", new)
    ]
    target = await add(db, "User runs every day")
    for n in range(2):
        async with db.transaction() as conn:
            await contradict_pattern(conn, target, CHAT, signal="explicit", reason=f"said no {n}")
    assert await status(db, target) == "disputed"
    assert await audit_rows(db, target) == [
        ("dispute", "active", "disputed", "contradicted: said no 1", "compaction", None)
    ]


async def test_pins_are_audited_once(db: Database) -> None:
    pid = await add(db, "User values honesty")
    assert await pin_pattern(db, OTHER, pid, True, actor="person") is None
    done = await pin_pattern(db, CHAT, pid, True, actor="person")
    assert done is not None and done.changed
    again = await pin_pattern(db, CHAT, pid, True, actor="person")
    assert again is not None and not again.changed
    row = await db.fetchrow("SELECT is_core_tenet, pinned_at FROM patterns WHERE id = $1", pid)
    assert row is not None and row["is_core_tenet"] and row["pinned_at"] is not None
    undone = await pin_pattern(db, CHAT, pid, False, actor="person")
    assert undone is not None and undone.changed
    assert [(r[0], r[3], r[4]) for r in await audit_rows(db, pid)] == [
        ("pin", "pinned by the person", "person"),
        ("unpin", "unpinned by the person", "person"),
    ]
    # the extractor's core claim is audited as compaction's pin
    evidence = Evidence(text="I am a Buddhist", roles=("user",), confidence=0.95)
    async with db.transaction() as conn:
        core = await insert_pattern(
            conn,
            chat_id=CHAT,
            content="User is a Buddhist",
            kind="belief",
            confidence=0.95,
            evidence=evidence,
            vectors=Vectors("m"),
            core=True,
        )
    assert [(r[0], r[4]) for r in await audit_rows(db, core)] == [("pin", "compaction")]


async def test_ttl_expiry_deprecates_stale_weak_patterns(db: Database) -> None:
    old = NOW - timedelta(days=91)
    stale = await add(db, "User might like opera", confidence=0.2, last_seen=old)
    seen_twice = await add(
        db, "User might like ballet", confidence=0.2, times_seen=2, last_seen=old
    )
    sure = await add(db, "User likes theatre", confidence=0.5, last_seen=old)
    recent = await add(
        db, "User might like jazz", confidence=0.2, last_seen=NOW - timedelta(days=30)
    )
    assert await expire_stale_patterns(db, NOW) == 1
    assert await status(db, stale) == "deprecated"
    assert [await status(db, p) for p in (seen_twice, sure, recent)] == ["active"] * 3
    [(action, old_status, new, reason, actor, _)] = await audit_rows(db, stale)
    assert (action, old_status, new, actor) == ("expire", "active", "deprecated", "maintenance")
    assert "90 days" in reason
    assert await expire_stale_patterns(db, NOW) == 0


async def test_a_chat_over_its_pattern_cap_loses_its_weakest_audited(db: Database) -> None:
    strong = [await add(db, f"User fact {n}", confidence=0.9, strength=3.0) for n in range(6)]
    weak = [
        await add(
            db,
            f"User guess {n}",
            confidence=0.2 + 0.01 * n,
            strength=0.1,
            last_seen=NOW - timedelta(days=60),
        )
        for n in range(3)
    ]
    pinned_weak = await add(db, "User tenet", confidence=0.1, strength=0.0)
    await pin_pattern(db, CHAT, pinned_weak, True, actor="person")
    gone = await add(db, "User old", confidence=0.1)
    await forget_pattern(db, CHAT, gone, reason="test", actor="person")
    others = [await add(db, f"Other {n}", chat=OTHER, confidence=0.1) for n in range(12)]
    # CHAT: 10 active (6 strong, 3 weak, 1 pinned), cap 8 -> the 2 weakest unpinned go
    assert await cap_patterns(db, 8, NOW) == 2 + 4  # and OTHER: 12 -> 8
    assert [await status(db, p) for p in weak] == ["deprecated", "deprecated", "active"]
    assert {await status(db, p) for p in [*strong, pinned_weak]} == {"active"}
    [(action, old_status, new, reason, actor, _)] = await audit_rows(db, weak[0])
    assert (action, old_status, new, actor) == ("expire", "active", "deprecated", "maintenance")
    assert "MAX_PATTERNS_PER_CHAT" in reason and "8" in reason
    assert sum([await status(db, p) == "active" for p in others]) == 8
    assert await cap_patterns(db, 8, NOW) == 0  # at the cap: nothing more
    job = PatternTtlJob(db, interval=3600, max_per_chat=7)
    assert await job.run_once() == 2  # the job caps too: one more in each chat
    active = await db.fetchval(
        "SELECT count(*) FROM patterns WHERE chat_id = $1 AND status = 'active'", CHAT
    )
    assert active == 7


async def test_link_memories_records_a_stated_relation(db: Database) -> None:
    a, b = await add(db, "User sleeps badly"), await add(db, "User drinks coffee late")
    foreign = await add(db, "User drinks coffee late", chat=OTHER)
    body, err = await call(
        "link_memories", {"from_id": b, "to_id": foreign, "relation": "causes"}, ctx(db)
    )
    assert err and body["error"] == f"memory #{foreign} not found"
    body, err = await call(
        "link_memories", {"from_id": b, "to_id": a, "relation": "causes"}, ctx(db)
    )
    assert not err and body == {"from_id": b, "to_id": a, "relation": "causes", "linked": True}
    rel = await db.fetch(
        "SELECT from_pattern_id, to_pattern_id, relation, chat_id FROM pattern_relations"
    )
    assert [tuple(r.values()) for r in rel] == [(b, a, "causes", CHAT)]
    body, err = await call(
        "link_memories", {"from_id": b, "to_id": a, "relation": "likes"}, ctx(db)
    )
    assert err and body["field"] == "relation"
    newer = await add(db, "User sleeps well since May")
    assert await link_patterns(db, CHAT, newer, a, "supersedes", actor="person") == ""
    assert await status(db, a) == "superseded"
    assert [(r[0], r[4], r[5]) for r in await audit_rows(db, a)] == [("supersede", "person", newer)]


async def test_counts_by_status_follow_every_change(db: Database) -> None:
    """/memory reads chat_pattern_counts (a view since migration 023): what a count says."""

    async def agree() -> None:
        truth = await db.fetch(
            "SELECT chat_id, status, count(*) AS n FROM patterns GROUP BY 1, 2 ORDER BY 1, 2"
        )
        kept = await db.fetch(
            "SELECT chat_id, status, n FROM chat_pattern_counts WHERE n > 0 ORDER BY 1, 2"
        )
        assert [tuple(r) for r in kept] == [tuple(r) for r in truth]

    a, b = await add(db, "User likes tea"), await add(db, "User likes coffee")
    await add(db, "User likes water", chat=OTHER)
    await db.execute(
        "INSERT INTO patterns (chat_id, content, canonical_hash, first_seen, last_seen, status) "
        "SELECT $1, 'bulk ' || g, 'h' || g, now(), now(), "
        "CASE WHEN g % 3 = 0 THEN 'disputed' ELSE 'active' END FROM generate_series(1, 50) g",
        CHAT,
    )
    await agree()
    assert await forget_pattern(db, CHAT, a, reason="no", actor="person") is not None
    await db.execute("UPDATE patterns SET strength = 3 WHERE chat_id = $1", CHAT)  # no status
    await db.execute("UPDATE patterns SET status = 'superseded' WHERE content LIKE 'bulk 1%'")
    await db.execute("DELETE FROM patterns WHERE id = $1 OR content LIKE 'bulk 2%'", b)
    await agree()
    rows = await db.fetch("SELECT status, n FROM chat_pattern_counts WHERE chat_id = $1", CHAT)
    # a forgotten pattern is deleted (issue 20): counted nowhere
    assert {r["status"]: r["n"] for r in rows}.get("deprecated", 0) == 0
    await db.execute("TRUNCATE patterns CASCADE")
    assert await db.fetchval("SELECT count(*) FROM chat_pattern_counts") == 0


async def test_ttl_boundaries_follow_seed_000(db: Database) -> None:
    """Confidence < 0.3 (not 0.3), seen once, last seen more than 90 days ago (not exactly 90);
    never a core tenet, only active patterns; run by the maintenance job (``JOBS``)."""
    from actors.wiring import JOBS

    assert "pattern_ttl" in [job.name for job in JOBS]
    old = NOW - timedelta(days=90, seconds=1)
    expired = await add(db, "User may like tango", confidence=0.29, last_seen=old)
    at_limit = await add(db, "User may like salsa", confidence=0.3, last_seen=old)
    ninety = await add(
        db, "User may like swing", confidence=0.1, last_seen=NOW - timedelta(days=90)
    )
    core = await add(db, "User may like bachata", confidence=0.1, last_seen=old)
    await db.execute("UPDATE patterns SET is_core_tenet = true WHERE id = $1", core)
    disputed = await add(db, "User may like rumba", confidence=0.1, last_seen=old)
    await db.execute("UPDATE patterns SET status = 'disputed' WHERE id = $1", disputed)
    other = await add(db, "User may like polka", chat=OTHER, confidence=0.1, last_seen=old)
    assert await expire_stale_patterns(db, NOW) == 2
    assert [await status(db, p) for p in (expired, other)] == ["deprecated"] * 2
    assert [await status(db, p) for p in (at_limit, ninety, core)] == ["active"] * 3
    assert await status(db, disputed) == "disputed"
    assert [r[4] for r in await audit_rows(db, other)] == ["maintenance"]
