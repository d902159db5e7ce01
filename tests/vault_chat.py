"""A scripted chat for the vault tests: a fixed clock and fixed ids, written straight into the
tables the vault reads (two days of conversation with a tool call and a routine message, a
compaction's episode and patterns with evidence, relations and audit rows)."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, time

from runtime.db import Queries

CHAT = 4242
TZ = "Europe/Madrid"
SECRET = "sleep eight hours"


def at(day: int, hh: int, mm: int, ss: int = 0) -> datetime:
    return datetime(2026, 3, 13 + day, hh, mm, ss, tzinfo=UTC)


async def add_message(
    db: Queries,
    id: int,
    role: str,
    content: str,
    created: datetime,
    *,
    calls: list[dict[str, object]] | None = None,
    routine: str | None = None,
) -> None:
    await db.execute(
        "INSERT INTO chat_messages (id, chat_id, role, content, created_at, tool_calls, "
        "tool_call_id, tool_name, source, routine_name, summary) "
        "VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9, $10, $11)",
        id,
        CHAT,
        role,
        content,
        created,
        None if calls is None else json.dumps(calls),
        "call-1" if role == "tool_result" else None,
        "recall_conversation" if role == "tool_result" else None,
        "routine" if routine else "conversation",
        routine,
        "Asked how the tea went." if routine else None,
    )


async def day_one(db: Queries) -> None:
    """The first day's conversation (nothing compacted yet)."""
    await add_message(
        db,
        1001,
        "user",
        "Morning! I switched to green tea, coffee was wrecking my sleep.",
        at(1, 9, 15),
    )
    call: dict[str, object] = {
        "id": "call-1",
        "name": "recall_conversation",
        "input": {"query": "coffee sleep"},
    }
    await add_message(db, 1002, "assistant", "", at(1, 9, 15, 20), calls=[call])
    await add_message(db, 1003, "tool_result", '{"messages": []}', at(1, 9, 15, 21))
    await add_message(
        db,
        1004,
        "assistant",
        "Good call. Tea has less caffeine, so evenings get easier.",
        at(1, 9, 16),
    )
    await add_message(
        db,
        1005,
        "assistant",
        "Evening check-in: how did the tea go today?",
        at(1, 18, 0),
        routine="evening_checkin",
    )
    await add_message(
        db,
        1006,
        "user",
        "Great. My sister Ana visits on 20 March.\nShe lands at 10:40.\n"
        "I want to sleep eight hours before.",
        at(1, 18, 5),
    )


async def _pattern(
    db: Queries,
    id: int,
    kind: str,
    content: str,
    *,
    status: str = "active",
    strength: float = 1.0,
    confidence: float = 0.7,
    core: bool = False,
    occurs: tuple[date, time] | None = None,
) -> None:
    await db.execute(
        "INSERT INTO patterns (id, chat_id, content, kind, confidence, strength, times_seen, "
        "status, source, canonical_hash, first_seen, last_seen, created_at, updated_at, "
        "is_core_tenet, occurs_on, occurs_at) VALUES ($1, $2, $3, $4, $5, $6, 1, $7, "
        "'compaction', $8, $9, $10, $11, $11, $12, $13, $14)",
        id,
        CHAT,
        content,
        kind,
        confidence,
        strength,
        status,
        f"hash-{id}",
        at(1, 9, 15),
        at(1, 18, 5),
        at(2, 3, 0),
        core,
        None if occurs is None else occurs[0],
        None if occurs is None else occurs[1],
    )
    await db.execute(
        "INSERT INTO pattern_observations (pattern_id, chat_id, chat_message_ids, evidence, "
        "signal, confidence, observed_at) VALUES ($1, $2, '{1001,1006}', $3, 'explicit', $4, $5)",
        id,
        CHAT,
        f"user said: {content.lower()}",
        confidence,
        at(2, 3, 0),
    )


async def _audit(
    db: Queries,
    id: int,
    pattern_id: int,
    action: str,
    old: str,
    new: str,
    actor: str,
    when: datetime,
    other: int | None = None,
) -> None:
    await db.execute(
        "INSERT INTO pattern_audit (chat_id, id, pattern_id, action, old_status, new_status, "
        "reason, actor, other_pattern_id, at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        CHAT,
        id,
        pattern_id,
        action,
        old,
        new,
        f"{action} during the scripted chat",
        actor,
        other,
        when,
    )


async def compaction(db: Queries) -> None:
    """The night's compaction: day one compacted into an episode and six patterns."""
    await db.execute(
        "UPDATE chat_messages SET compacted_at = $2 WHERE chat_id = $1", CHAT, at(2, 3, 0)
    )
    await db.execute(
        "INSERT INTO episodes (id, chat_id, summary, started_at, ended_at, message_count, "
        "first_message_id, last_message_id, created_at) VALUES (501, $1, $2, $3, $4, 6, 1001, "
        "1006, $5)",
        CHAT,
        "The person switched to green tea for sleep; their sister Ana visits on 20 March.",
        at(1, 9, 15),
        at(1, 18, 5),
        at(2, 3, 0),
    )
    await _pattern(
        db, 701, "preference", "Prefers green tea over coffee", strength=1.4, confidence=0.85
    )
    await _pattern(
        db, 702, "event", "Sister Ana visits on 20 March", occurs=(date(2026, 3, 20), time(10, 40))
    )
    await _pattern(db, 703, "fact", "Has a sister named Ana", confidence=0.9)
    await _pattern(db, 704, "behavior", "Drinks espresso after dinner", status="superseded")
    await _pattern(db, 705, "belief", "Thinks coffee helps focus | really", status="disputed")
    await _pattern(db, 706, "goal", "Wants to sleep eight hours a night", strength=1.2)
    for a, b, rel in ((701, 704, "supersedes"), (701, 706, "supports"), (702, 703, "parent_of")):
        await db.execute(
            "INSERT INTO pattern_relations (chat_id, from_pattern_id, to_pattern_id, relation, "
            "created_at) VALUES ($1, $2, $3, $4, $5)",
            CHAT,
            a,
            b,
            rel,
            at(2, 3, 0),
        )
    await _audit(db, 9001, 704, "supersede", "active", "superseded", "compaction", at(2, 3, 0), 701)


async def day_two(db: Queries) -> None:
    """The second day: a message, a dispute and a pin by the person, a reinforcement."""
    await add_message(db, 1007, "user", "Actually coffee does not help me focus.", at(2, 10, 0))
    await add_message(db, 1008, "assistant", "Noted, I'll stop assuming that.", at(2, 10, 1))
    await _audit(db, 9002, 705, "dispute", "active", "disputed", "person", at(2, 10, 5))
    await _audit(db, 9003, 703, "pin", "active", "active", "person", at(2, 10, 6))
    await db.execute("UPDATE patterns SET is_core_tenet = true WHERE id = 703")
    await db.execute(
        "INSERT INTO pattern_observations (pattern_id, chat_id, evidence, signal, confidence, "
        "observed_at) VALUES (701, $1, 'user said: tea again today', 'implicit', 0.6, $2)",
        CHAT,
        at(2, 10, 0),
    )
    await db.execute(
        "UPDATE patterns SET times_seen = 2, last_seen = $1 WHERE id = 701", at(2, 10, 0)
    )


async def scripted_chat(db: Queries) -> None:
    """The whole script: day one, the compaction, day two."""
    await day_one(db)
    await compaction(db)
    await day_two(db)
