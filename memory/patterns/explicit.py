"""The ``remember`` tool's write: a fact the user asked engram to keep (seed 002).

Same dedup as compaction (canonical hash, then similarity, adjudicated in the grey zone; an event
only against events of its day), source ``explicit``, signal explicit, confidence
:data:`EXPLICIT_CONFIDENCE`.
"""

from __future__ import annotations

from datetime import date, datetime, time
from typing import Any

import attrs

from memory.embeddings.providers import Embedder
from memory.embeddings.thresholds import Thresholds, thresholds_for
from memory.patterns.dedup import Adjudicator, DedupDecision, find_duplicate
from memory.patterns.writes import (
    Evidence,
    Vectors,
    embed_texts,
    ensure_indexes,
    insert_pattern,
    reinforce_pattern,
)
from runtime.logs import get_logger

log = get_logger(__name__)

EXPLICIT_CONFIDENCE = 0.9


async def store_explicit_pattern(
    db: Any,
    embedder: Embedder | None,
    adjudicator: Adjudicator,
    *,
    chat_id: int,
    content: str,
    kind: str,
    now: datetime,
    thresholds: Thresholds | None = None,
    occurs_on: date | None = None,
    occurs_at: time | None = None,
) -> DedupDecision:
    """Store a fact the user asked to remember (source ``explicit``, signal explicit).

    Canonical hash, then similarity dedup (adjudicated in the grey zone): a duplicate is
    reinforced (its differing text kept as an alias), anything else inserted. The decision's
    ``pattern_id`` is the reinforced or the new pattern. ``db``: a ``Database`` or a held
    ``Connection``. Without an embedder (or when embedding fails) the dedup is by hash only and
    the vector is left to the backfill job. ``occurs_on``/``occurs_at``: an event's day and
    local time (the caller checks that only an event has them).
    """
    model = embedder.model if embedder is not None else ""
    vectors = await embed_texts(embedder, [content], chat_id) if embedder else Vectors(model)
    decision = await find_duplicate(
        db, chat_id=chat_id, content=content, kind=kind, vector=vectors.get(content),
        model=model or "none", thresholds=thresholds or thresholds_for(model),
        adjudicator=adjudicator, occurs_on=occurs_on,
    )  # fmt: skip
    evidence = Evidence(text=f"[remember] {content}", signal="explicit",
                        confidence=EXPLICIT_CONFIDENCE, observed_at=now)  # fmt: skip
    await ensure_indexes(db, vectors)
    async with db.transaction() as conn:
        if decision.action == "reinforce" and decision.pattern_id is not None:
            done = await reinforce_pattern(conn, decision.pattern_id, chat_id, evidence,
                                           alias=content, vectors=vectors)  # fmt: skip
            if done is not None:
                return decision
        pattern_id = await insert_pattern(
            conn, chat_id=chat_id, content=content, kind=kind, confidence=EXPLICIT_CONFIDENCE,
            evidence=evidence, vectors=vectors, source="explicit", occurs_on=occurs_on,
            occurs_at=occurs_at,
        )  # fmt: skip
    log.info("patterns.remembered", chat_id=chat_id, pattern_id=pattern_id)
    return attrs.evolve(decision, action="insert", pattern_id=pattern_id)
