"""Explicit patterns: a fact the person asked engram to keep (seed 002; seed 004 Test 8).

One path for the model's ``remember`` tool and the person's ``/remember`` command:
:func:`remember` (which calls :func:`store_explicit_pattern` and reads back what was
reinforced). Same dedup as compaction (canonical hash, then similarity, adjudicated in the grey
zone; an event only against events of its day), source ``explicit``, signal explicit,
confidence :data:`EXPLICIT_CONFIDENCE`. The command calls no model: its adjudicator is
:func:`keep_apart` (a near duplicate in the grey zone is stored as new), and its kind is
:func:`guess_kind`'s. Both refuse instruction-like text first (:func:`refusal`).
"""

from __future__ import annotations

import re
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
from memory.untrusted import instruction_reason
from runtime.logs import get_logger

log = get_logger(__name__)

EXPLICIT_CONFIDENCE = 0.9
MIN_FACT_CHARS = 3
MAX_FACT_CHARS = 500  # a fact to remember is one claim, not a document


async def keep_apart(a: str, b: str, chat_id: int) -> None:
    """The adjudicator that calls no model: a near duplicate in the grey zone stays apart."""
    return None


_PREFERENCE = re.compile(
    r"\b(prefer|prefers|like|likes|love|loves|hate|hates|dislike|dislikes|enjoy|enjoys|"
    r"favou?rite|rather|always answer|answer me|reply|replies|respond)\b",
    re.IGNORECASE,
)
_GOAL = re.compile(
    r"\b(goal|goals|want to|wants to|plan to|plans to|planning to|aim to|aims to|trying to|"
    r"hope to|going to|intend to|by (?:the end of|q[1-4]|20\d\d))\b",
    re.IGNORECASE,
)


def guess_kind(fact: str) -> str:
    """The kind of a fact the person typed, without a model: ``preference`` when it says what
    they like or how to be answered, ``goal`` when it says what they want to do, else
    ``fact``."""
    if _PREFERENCE.search(fact):
        return "preference"
    if _GOAL.search(fact):
        return "goal"
    return "fact"


def clean_fact(text: str) -> str:
    """The fact on one line (whitespace collapsed)."""
    return " ".join(text.split())


def refusal(fact: str) -> str | None:
    """The one-line answer refusing ``fact`` when it reads like an instruction (compaction's
    rule, :func:`memory.untrusted.instruction_reason`: it would be shown as trusted
    "About the person" in every turn); None when it may be stored."""
    rule = instruction_reason(fact)
    if rule is None:
        return None
    return f"I won't remember that: it reads like an instruction, not a fact about you ({rule})."


@attrs.frozen
class Remembered:
    """What :func:`remember` did: a new pattern, or an existing one reinforced (its text and
    how often it has been seen now)."""

    pattern_id: int
    reinforced: bool
    content: str
    times_seen: int = 1
    similarity: float | None = None


async def remember(
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
) -> Remembered:
    """Store ``content`` (:func:`store_explicit_pattern`) and say what happened."""
    fact = clean_fact(content)
    decision = await store_explicit_pattern(
        db,
        embedder,
        adjudicator,
        chat_id=chat_id,
        content=fact,
        kind=kind,
        now=now,
        thresholds=thresholds,
        occurs_on=occurs_on,
        occurs_at=occurs_at,
    )
    assert decision.pattern_id is not None
    if decision.action != "reinforce":
        return Remembered(decision.pattern_id, False, fact)
    row = await db.fetchrow(
        "SELECT content, times_seen FROM patterns WHERE id = $1 AND chat_id = $2",
        decision.pattern_id,
        chat_id,
    )
    existing, seen = (fact, 1) if row is None else (str(row["content"]), int(row["times_seen"]))
    return Remembered(decision.pattern_id, True, existing, seen, decision.similarity)


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
        db,
        chat_id=chat_id,
        content=content,
        kind=kind,
        vector=vectors.get(content),
        model=model or "none",
        thresholds=thresholds or thresholds_for(model),
        adjudicator=adjudicator,
        occurs_on=occurs_on,
    )
    evidence = Evidence(
        text=f"[remember] {content}",
        signal="explicit",
        confidence=EXPLICIT_CONFIDENCE,
        observed_at=now,
    )
    await ensure_indexes(db, vectors)
    async with db.transaction() as conn:
        if decision.action == "reinforce" and decision.pattern_id is not None:
            done = await reinforce_pattern(
                conn, decision.pattern_id, chat_id, evidence, alias=content, vectors=vectors
            )
            if done is not None:
                return decision
        pattern_id = await insert_pattern(
            conn,
            chat_id=chat_id,
            content=content,
            kind=kind,
            confidence=EXPLICIT_CONFIDENCE,
            evidence=evidence,
            vectors=vectors,
            source="explicit",
            occurs_on=occurs_on,
            occurs_at=occurs_at,
        )
    log.info("patterns.remembered", chat_id=chat_id, pattern_id=pattern_id)
    return attrs.evolve(decision, action="insert", pattern_id=pattern_id)
