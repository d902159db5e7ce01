"""Contradicting a pattern and the relations between patterns, inside the caller's transaction
(seed 000 "Pattern extraction during compaction", "Pattern hierarchy"): ``contradicts``,
``supersedes`` and ``parent_of`` rows in ``pattern_relations``, and a meta pattern's strength.

* a **contradiction** lowers confidence (:func:`memory.patterns.reinforcement.contradict`),
  counts it, and sets ``disputed`` via
  :func:`memory.patterns.reinforcement.status_after_contradiction`; the ``contradicts`` relation
  runs from the rival pattern to the contradicted one (see :func:`contradict_pattern`);
* a **supersede** makes the old pattern ``superseded`` and relates the new one to it.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from memory.patterns.audit import LIVE, Actor, change_status
from memory.patterns.reinforcement import (
    STRENGTH_CAP,
    PatternStats,
    contradict,
    status_after_contradiction,
)
from memory.patterns.writes import LOCK_PATTERN
from runtime.db import Queries


@attrs.frozen
class Contradicted:
    pattern_id: int
    confidence_before: float
    confidence_after: float
    contradiction_count: int
    status: str


async def contradict_pattern(
    conn: Queries,
    pattern_id: int,
    chat_id: int,
    *,
    signal: str,
    reason: str,
    rival_id: int | None = None,
) -> Contradicted | None:
    """A soft contradiction of one of the chat's patterns; None if it is not one.

    Confidence drops by the signal-weighted penalty, ``contradiction_count + 1``, and the
    status becomes ``disputed`` on the second contradiction of an active pattern (the reason is
    kept in ``status_reason``). The ``contradicts`` relation goes from ``rival_id`` (the new
    pattern of the same extraction that states the opposite, when there is one) to the
    contradicted pattern; without a rival it is a self-relation (from = to = the pattern),
    recorded once: "contradicted by the user's own words". The count, not the relation,
    tracks how often.
    """
    row = await conn.fetchrow(LOCK_PATTERN, pattern_id, chat_id, None)
    if row is None:
        return None
    after = contradict(PatternStats(row["strength"], row["confidence"], row["times_seen"]), signal)
    count = int(row["contradiction_count"]) + 1
    status = status_after_contradiction(row["status"], count)
    await conn.execute(
        "UPDATE patterns SET confidence = $2, contradiction_count = $3, updated_at = now() "
        "WHERE chat_id = $4 AND id = $1",
        pattern_id,
        after.confidence,
        count,
        chat_id,
    )
    if status != row["status"]:  # disputed: the status change and its audit row
        await change_status(
            conn,
            chat_id,
            pattern_id,
            status,
            action="dispute",
            actor="compaction",
            reason=f"contradicted: {reason}",
            allowed_from=(row["status"],),
            other_id=rival_id,
        )
    await add_relation(conn, chat_id, rival_id or pattern_id, pattern_id, "contradicts")
    return Contradicted(pattern_id, row["confidence"], after.confidence, count, status)


async def add_relation(
    conn: Queries, chat_id: int, from_id: int, to_id: int, relation: str
) -> None:
    await conn.execute(
        "INSERT INTO pattern_relations (chat_id, from_pattern_id, to_pattern_id, relation) "
        "VALUES ($1, $2, $3, $4) ON CONFLICT "
        "(chat_id, from_pattern_id, to_pattern_id, relation) DO NOTHING",
        chat_id,
        from_id,
        to_id,
        relation,
    )


async def supersede_pattern(
    conn: Queries,
    old_id: int,
    new_id: int,
    chat_id: int,
    reason: str,
    *,
    actor: Actor = "compaction",
) -> bool:
    """``old_id`` -> ``superseded`` (reason kept, audited) and ``new_id`` ``supersedes`` it
    (relation from the new pattern to the old one); False when ``old_id`` is not one of the
    chat's. A pattern no longer live (forgotten, merged) keeps its status."""
    change = await change_status(
        conn,
        chat_id,
        old_id,
        "superseded",
        action="supersede",
        actor=actor,
        reason=reason,
        allowed_from=LIVE,
        other_id=new_id,
    )
    if change is None:
        return False
    await add_relation(conn, chat_id, new_id, old_id, "supersedes")
    return True


async def children_strength(conn: Queries, chat_id: int, child_ids: Sequence[int]) -> float:
    """A meta pattern's strength: the sum of its children's, capped (higher than any child)."""
    total = await conn.fetchval(
        "SELECT coalesce(sum(strength), 0) FROM patterns WHERE chat_id = $1 AND id = ANY($2)",
        chat_id,
        list(child_ids),
    )
    return float(min(max(float(total), 1.0), STRENGTH_CAP))
