"""The periodic merge job against the real PostgreSQL with the local embedding model: pairs per
chat only, adjudicated, survivor = stronger, loser's observations / entry links / aliases /
relations moved, its text kept as an alias with its vectors, statistics combined; dry run
changes nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import numpy as np
import pytest

from memory.embeddings.providers import LocalEmbedder
from memory.embeddings.store import index_name, store_vectors
from memory.embeddings.thresholds import Thresholds
from memory.patterns.canonical import canonical_hash
from memory.patterns.dedup import Adjudication
from memory.patterns.merge import (
    PatternStats,
    choose_survivor,
    combine,
    merge_patterns,
    merge_reason,
)
from memory.patterns.merge_candidates import similar_pairs
from runtime.db import Database

T0 = datetime(2026, 10, 1, tzinfo=UTC)
TH = Thresholds(min_similarity=0.05, dedup=0.92, adjudicate=0.57, merge=0.9)
A_TEXT = "User drinks green tea every morning"
B_TEXT = "User drinks green tea each morning"
C_TEXT = "Every morning the user drinks green tea"
D_TEXT = "User is allergic to peanuts"


class Judge:
    """Adjudicator double: answers by a rule, records every question."""

    def __init__(self, answer: Any = "yes", intent: bool | None = None) -> None:
        self.intent = intent
        self.answer = answer
        self.calls: list[tuple[str, str, int]] = []

    async def __call__(self, a: str, b: str, chat_id: int) -> Adjudication | None:
        self.calls.append((a, b, chat_id))
        if self.answer is None:
            return None
        same = self.answer == "yes"
        intent = same if self.intent is None else self.intent
        why = "only the wording differs" if same else "different habits"
        return Adjudication(why, intent, same)


async def add(
    db: Database,
    emb: LocalEmbedder,
    chat_id: int,
    content: str,
    *,
    strength: float = 1.0,
    times_seen: int = 1,
    days: int = 0,
) -> int:
    pid: int = await db.fetchval(
        "INSERT INTO patterns (chat_id, content, strength, times_seen, confidence, "
        "canonical_hash, first_seen, last_seen) VALUES ($1, $2, $3, $4, 0.6, $5, $6, $7) "
        "RETURNING id",
        chat_id,
        content,
        strength,
        times_seen,
        canonical_hash(content),
        T0 + timedelta(days=days),
        T0 + timedelta(days=days + 1),
    )
    [vector] = await emb.embed([content], purpose="embedding")
    await store_vectors(db, "pattern_embeddings", "pattern_id", [(pid, vector)], emb.model)
    await db.execute(
        "INSERT INTO pattern_observations (pattern_id, chat_id, evidence) VALUES ($1, $2, $3)",
        pid,
        chat_id,
        f"evidence for {content}",
    )
    return pid


async def scene(db: Database, emb: LocalEmbedder) -> dict[str, int]:
    ids = {
        "a": await add(db, emb, 1, A_TEXT, strength=3.0, times_seen=2, days=5),
        "b": await add(db, emb, 1, B_TEXT, strength=1.5, days=0),
        "c": await add(db, emb, 1, C_TEXT),
        "d": await add(db, emb, 1, D_TEXT),
        "other": await add(db, emb, 2, A_TEXT, strength=9.0),  # same text, another chat
    }
    link = (
        "INSERT INTO pattern_entries (pattern_id, entry_uuid, chat_id, source, confidence, "
        "times_linked, last_linked_at) VALUES ($1, $2, 1, $3, $4, $5, $6)"
    )
    await db.execute(link, ids["a"], "u1", "compaction", 0.5, 2, T0)
    await db.execute(link, ids["b"], "u1", "tool_loop", 0.9, 1, T0 + timedelta(days=2))
    await db.execute(link, ids["b"], "u2", "tool_loop", 0.4, 1, T0)
    await db.execute(
        "INSERT INTO pattern_aliases (pattern_id, chat_id, content) VALUES ($1, 1, $2)",
        ids["b"],
        "user has green tea in the mornings",
    )
    await db.execute(
        "INSERT INTO pattern_relations (chat_id, from_pattern_id, to_pattern_id, relation) "
        "VALUES (1, $1, $2, 'supports')",
        ids["b"],
        ids["d"],
    )
    return ids


async def snapshot(db: Database) -> list[list[Any]]:
    out = []
    for sql in (
        "SELECT * FROM patterns ORDER BY id",
        "SELECT * FROM pattern_observations ORDER BY id",
        "SELECT * FROM pattern_entries ORDER BY pattern_id, entry_uuid",
        "SELECT * FROM pattern_aliases ORDER BY id",
        "SELECT alias_id, model FROM alias_embeddings ORDER BY alias_id",
        "SELECT * FROM pattern_relations ORDER BY id",
    ):
        out.append([dict(r) for r in await db.fetch(sql)])
    return out


# --- pure rules ---------------------------------------------------------------------------------


def test_survivor_and_combined_statistics() -> None:
    a = PatternStats(1, 2.0, 3, 0.5, T0, T0 + timedelta(days=3), 1)
    b = PatternStats(2, 15.0, 1, 0.8, T0 - timedelta(days=9), T0, 2)
    survivor, loser = choose_survivor(a, b)
    assert (survivor.id, loser.id) == (2, 1)
    assert choose_survivor(a, attrs.evolve(b, strength=2.0))[0].id == 1  # more often seen
    tie = attrs.evolve(b, strength=2.0, times_seen=3)
    assert choose_survivor(tie, a)[0].id == 1  # then the older id
    c = combine(survivor, loser)
    assert c.strength == 17.0 and c.times_seen == 4 and c.confidence == 0.8
    assert c.first_seen == T0 - timedelta(days=9) and c.last_seen == T0 + timedelta(days=3)
    assert c.contradiction_count == 3
    assert combine(attrs.evolve(b, strength=15.0), attrs.evolve(a, strength=9.0)).strength == 20.0
    assert merge_reason(7, " same\n thing ") == "merged into #7: same thing"
    assert merge_reason(7, "") == "merged into #7"


def test_similar_pairs_in_blocks() -> None:
    v = np.array(
        [[1, 0, 0], [0.99, 0.1, 0], [0, 1, 0], [0, 0, 5], [0, 0.05, 1], [0, 0, 0]],
        dtype=np.float32,
    )
    expected = similar_pairs(v, 0.9, block=1024)
    assert [(i, j) for i, j, _ in expected] == [(3, 4), (0, 1)]  # most similar first
    assert expected[0][2] == pytest.approx(1 / np.sqrt(1.0025), abs=1e-6)
    for block in (1, 2, 4):  # the block size changes nothing
        assert similar_pairs(v, 0.9, block=block) == expected
    assert similar_pairs(v[:1], 0.0) == []
    assert len(similar_pairs(v[:3], -1.0)) == 3  # every i < j once, never (i, i)


# --- the job ------------------------------------------------------------------------------------


async def test_dry_run_reports_pairs_and_changes_nothing(
    db: Database, local: LocalEmbedder
) -> None:
    ids = await scene(db, local)
    before = await snapshot(db)
    judge = Judge("yes")
    report = await merge_patterns(db, local, judge, dry_run=True, thresholds=TH)
    assert await snapshot(db) == before
    assert report.dry_run and report.threshold == 0.9 and report.chats == 1
    got = [(p.a_id, p.b_id, p.decision, p.survivor_id, p.loser_id) for p in report.pairs]
    assert got == [
        (ids["a"], ids["b"], "merge", ids["a"], ids["b"]),
        (ids["a"], ids["c"], "merge", ids["a"], ids["c"]),
        (ids["b"], ids["c"], "skipped", None, None),  # b would already be merged away
    ]
    assert [p.similarity for p in report.pairs] == sorted(
        (p.similarity for p in report.pairs), reverse=True
    )
    assert all(p.similarity >= 0.9 and p.chat_id == 1 for p in report.pairs)
    assert {c[2] for c in judge.calls} == {1} and len(judge.calls) == 2
    assert report.merged == 2


async def test_merge_moves_everything_to_the_survivor(db: Database, local: LocalEmbedder) -> None:
    ids = await scene(db, local)
    report = await merge_patterns(db, local, Judge("yes"), dry_run=False, thresholds=TH)
    assert report.merged == 2
    rows = {r["id"]: r for r in await db.fetch("SELECT * FROM patterns")}
    a, b, c = rows[ids["a"]], rows[ids["b"]], rows[ids["c"]]
    assert a["status"] == "active" and a["strength"] == 5.5 and a["times_seen"] == 4
    assert a["first_seen"] == T0 and a["last_seen"] == T0 + timedelta(days=6)
    assert b["status"] == c["status"] == "merged"
    assert b["status_reason"] == f"merged into #{ids['a']}: only the wording differs"
    assert rows[ids["d"]]["status"] == rows[ids["other"]]["status"] == "active"
    assert rows[ids["other"]]["strength"] == 9.0  # the other chat is never touched

    observations = await db.fetch("SELECT pattern_id, evidence FROM pattern_observations")
    assert sorted(r["evidence"] for r in observations if r["pattern_id"] == ids["a"]) == sorted(
        f"evidence for {t}" for t in (A_TEXT, B_TEXT, C_TEXT)
    )
    links = {
        r["entry_uuid"]: r
        for r in await db.fetch("SELECT * FROM pattern_entries WHERE pattern_id = $1", ids["a"])
    }
    assert set(links) == {"u1", "u2"}
    assert links["u1"]["times_linked"] == 3 and links["u1"]["confidence"] == 0.9
    assert links["u1"]["source"] == "compaction"
    assert links["u1"]["last_linked_at"] == T0 + timedelta(days=2)
    assert links["u2"]["source"] == "tool_loop"
    assert (
        await db.fetchval("SELECT count(*) FROM pattern_entries WHERE pattern_id = $1", ids["b"])
        == 0
    )

    aliases = await db.fetch(
        "SELECT a.content, e.model, e.chat_id AS echat FROM pattern_aliases a "
        "LEFT JOIN alias_embeddings e ON e.alias_id = a.id WHERE a.pattern_id = $1",
        ids["a"],
    )
    by_text = {r["content"]: r for r in aliases}
    assert set(by_text) == {B_TEXT, C_TEXT, "user has green tea in the mornings"}
    assert by_text[B_TEXT]["model"] == by_text[C_TEXT]["model"] == local.model
    assert by_text[B_TEXT]["echat"] == 1
    alias_vec = await db.fetchval(
        "SELECT e.embedding FROM alias_embeddings e JOIN pattern_aliases a ON a.id = e.alias_id "
        "WHERE a.content = $1",
        B_TEXT,
    )
    loser_vec = await db.fetchval(
        "SELECT embedding FROM pattern_embeddings WHERE pattern_id = $1", ids["b"]
    )
    assert alias_vec == loser_vec
    assert await db.fetchval(
        "SELECT count(*) FROM pg_indexes WHERE indexname = $1",
        index_name("alias_embeddings", local.model, local.dims),
    )
    relation = await db.fetchrow("SELECT from_pattern_id, to_pattern_id FROM pattern_relations")
    assert relation is not None
    assert (relation["from_pattern_id"], relation["to_pattern_id"]) == (ids["a"], ids["d"])

    again = await merge_patterns(db, local, Judge("yes"), dry_run=False, thresholds=TH)
    assert again.pairs == ()  # merged patterns are no longer candidates


async def test_rejected_or_unanswered_pairs_are_kept(db: Database, local: LocalEmbedder) -> None:
    await scene(db, local)
    before = await snapshot(db)
    for answer, decision in (("no", "keep"), (None, "no-answer")):
        report = await merge_patterns(db, local, Judge(answer), dry_run=False, thresholds=TH)
        assert [p.decision for p in report.pairs] == [decision] * 3
        assert report.merged == 0
    assert await snapshot(db) == before
    keep = await merge_patterns(db, local, Judge("no"), dry_run=True, thresholds=TH)
    assert keep.pairs[0].differences == "different habits"
    for judge in (Judge("yes", intent=False), Judge("no", intent=True)):  # both must agree
        half = await merge_patterns(db, local, judge, dry_run=False, thresholds=TH)
        assert [p.decision for p in half.pairs] == ["keep"] * 3
    assert await snapshot(db) == before


async def test_only_the_given_chat(db: Database, local: LocalEmbedder) -> None:
    await scene(db, local)
    await add(db, local, 2, B_TEXT)
    both = await merge_patterns(db, local, Judge("no"), dry_run=True, thresholds=TH)
    assert {p.chat_id for p in both.pairs} == {1, 2} and both.chats == 2
    two = await merge_patterns(db, local, Judge("no"), dry_run=True, thresholds=TH, chat_id=2)
    assert [(p.a_content, p.b_content) for p in two.pairs] == [(A_TEXT, B_TEXT)]
