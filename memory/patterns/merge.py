"""The periodic merge job (seed 000 "Periodic merge job"): fold duplicate patterns together.

For each chat (never across chats), every pair of *active* patterns whose vectors for the embedder's
model have cosine similarity ``>= thresholds.merge`` is a candidate (computed here as a block matrix
product over the chat's stored vectors by :mod:`memory.patterns.merge_candidates`). Pairs are taken
most similar first; each is adjudicated by the LLM (:class:`memory.patterns.dedup.Adjudicator`; no
answer means "not the same"; a merge needs both ``core_intent_match`` and ``merge_decision``). A
confirmed pair is merged in one transaction:

* the survivor is the stronger pattern (then the more often seen, then the older);
* the loser gets ``status='merged'`` and ``status_reason='merged into #<survivor>: ...'``;
* its observations, entry links (``pattern_entries``, upserted: link counts added, the higher
  confidence and the later link time kept), aliases and relations move to the survivor;
* its content becomes an alias of the survivor, with the loser's stored vectors copied to
  ``alias_embeddings`` (same text, same vectors: no embedding call);
* the survivor's strength and ``times_seen`` are added (strength capped at
  :data:`memory.patterns.reinforcement.STRENGTH_CAP`), confidence is the higher one, ``first_seen``
  / ``last_seen`` span both.

Two events on different days are never a pair (nor an event and a pattern without a day); a
survivor absorbing a core tenet becomes one. A pattern merged away in this run is skipped in
later pairs. ``dry_run`` adjudicates and reports
the pairs and decisions but changes nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import attrs

from memory.embeddings.store import check_model, ensure_vector_index
from memory.embeddings.thresholds import Thresholds
from memory.patterns.audit import Actor, change_status
from memory.patterns.dedup import Adjudicator
from memory.patterns.merge_candidates import Candidate, candidate_pairs
from memory.patterns.reinforcement import STRENGTH_CAP
from memory.patterns.writes import set_core_tenet
from runtime.db import Connection, Database
from runtime.logs import get_logger
from runtime.progress import Progress

log = get_logger(__name__)

Decision = Literal["merge", "keep", "no-answer", "skipped"]


@attrs.frozen
class PatternStats:
    """What the survivor choice and the combined statistics need of one pattern."""

    id: int
    strength: float
    times_seen: int
    confidence: float
    first_seen: datetime
    last_seen: datetime
    contradiction_count: int = 0


@attrs.frozen
class MergePair(Candidate):
    """One candidate pair and what happened to it."""

    decision: Decision
    survivor_id: int | None = None
    loser_id: int | None = None
    differences: str = ""


@attrs.frozen
class MergeReport:
    dry_run: bool
    model: str
    threshold: float
    pairs: tuple[MergePair, ...]

    @property
    def merged(self) -> int:
        return sum(p.decision == "merge" for p in self.pairs)

    @property
    def chats(self) -> int:
        return len({p.chat_id for p in self.pairs})


# --- pure rules ---------------------------------------------------------------------------------


def choose_survivor(a: PatternStats, b: PatternStats) -> tuple[PatternStats, PatternStats]:
    """``(survivor, loser)``: the stronger, then the more often seen, then the older id."""
    ranked = sorted((a, b), key=lambda p: (-p.strength, -p.times_seen, p.id))
    return ranked[0], ranked[1]


def combine(survivor: PatternStats, loser: PatternStats) -> PatternStats:
    """The survivor's statistics after absorbing the loser."""
    return attrs.evolve(
        survivor,
        strength=min(survivor.strength + loser.strength, STRENGTH_CAP),
        times_seen=survivor.times_seen + loser.times_seen,
        confidence=max(survivor.confidence, loser.confidence),
        first_seen=min(survivor.first_seen, loser.first_seen),
        last_seen=max(survivor.last_seen, loser.last_seen),
        contradiction_count=survivor.contradiction_count + loser.contradiction_count,
    )


def merge_reason(survivor_id: int, differences: str) -> str:
    note = " ".join(differences.split())[:300]
    return f"merged into #{survivor_id}" + (f": {note}" if note else "")


# --- one merge ----------------------------------------------------------------------------------

_LOCK = """
SELECT id, chat_id, content, status, strength, times_seen, confidence, first_seen, last_seen,
       contradiction_count, is_core_tenet
FROM patterns WHERE chat_id = $2 AND id = ANY($1::bigint[])
ORDER BY id FOR UPDATE
"""
_CHATS_OF = (
    "/* all chats: the chats of patterns known by id (a merge without its chat) */ "
    "SELECT DISTINCT chat_id FROM patterns WHERE id = ANY($1::bigint[]) AND status = 'active'"
)

_MOVE_ENTRIES = """
WITH moved AS (DELETE FROM pattern_entries WHERE chat_id = $3 AND pattern_id = $2 RETURNING *)
INSERT INTO pattern_entries AS pe (pattern_id, entry_uuid, chat_id, source, confidence,
                                   times_linked, last_linked_at, created_at)
SELECT $1, entry_uuid, chat_id, source, confidence, times_linked, last_linked_at, created_at
FROM moved
ON CONFLICT (chat_id, pattern_id, entry_uuid) DO UPDATE SET
    times_linked = pe.times_linked + EXCLUDED.times_linked,
    confidence = GREATEST(pe.confidence, EXCLUDED.confidence),
    last_linked_at = GREATEST(pe.last_linked_at, EXCLUDED.last_linked_at),
    created_at = LEAST(pe.created_at, EXCLUDED.created_at),
    source = CASE WHEN 'compaction' IN (pe.source, EXCLUDED.source) THEN 'compaction'
                  ELSE pe.source END
"""

_MOVE_ALIASES = """
UPDATE pattern_aliases a SET pattern_id = $1 WHERE a.chat_id = $3 AND a.pattern_id = $2
  AND NOT EXISTS (SELECT 1 FROM pattern_aliases s
                  WHERE s.chat_id = $3 AND s.pattern_id = $1 AND s.content = a.content)
"""

_ADD_ALIAS = """
WITH ins AS (
    INSERT INTO pattern_aliases (pattern_id, chat_id, content) VALUES ($1, $3, $4)
    ON CONFLICT (chat_id, pattern_id, content) DO NOTHING RETURNING id
)
INSERT INTO alias_embeddings (alias_id, model, chat_id, dims, embedding)
SELECT ins.id, pe.model, pe.chat_id, pe.dims, pe.embedding
FROM ins JOIN pattern_embeddings pe ON pe.chat_id = $3 AND pe.pattern_id = $2
"""

_MOVE_RELATIONS = """
UPDATE pattern_relations r SET {col} = $1 WHERE r.chat_id = $3 AND r.{col} = $2 AND r.{other} <> $1
  AND NOT EXISTS (SELECT 1 FROM pattern_relations x WHERE x.chat_id = $3 AND x.{col} = $1
                  AND x.{other} = r.{other} AND x.relation = r.relation)
"""

_SURVIVOR = """
UPDATE patterns SET strength = $2, times_seen = $3, confidence = $4, first_seen = $5,
    last_seen = $6, contradiction_count = $7, updated_at = now()
WHERE chat_id = $8 AND id = $1
"""


def _stats(row: Any) -> PatternStats:
    return PatternStats(
        id=int(row["id"]),
        strength=float(row["strength"]),
        times_seen=int(row["times_seen"]),
        confidence=float(row["confidence"]),
        first_seen=row["first_seen"],
        last_seen=row["last_seen"],
        contradiction_count=int(row["contradiction_count"]),
    )


async def merge_pair(
    db: Database | Connection,
    a_id: int,
    b_id: int,
    *,
    differences: str = "",
    chat_id: int | None = None,
    actor: Actor = "merge_job",
) -> tuple[int, int] | None:
    """Merge two active patterns of one chat; ``(survivor, loser)`` or None if either is no
    longer active (or, with ``chat_id``, not that chat's). The loser's status change and a
    survivor's new pin are audited as ``actor``'s (the merge job, or the person's
    ``/memory merge``)."""
    async with db.transaction() as conn:
        if chat_id is None:  # the pair's chat, read first: the lock is one chat's
            chats = await conn.fetch(_CHATS_OF, [a_id, b_id])
            if len(chats) > 1:
                raise ValueError(f"patterns {a_id} and {b_id} belong to different chats")
            if not chats:
                return None
            chat_id = int(chats[0]["chat_id"])
        rows = await conn.fetch(_LOCK, [a_id, b_id], chat_id)
        if len(rows) != 2 or any(r["status"] != "active" for r in rows):
            return None
        if rows[0]["chat_id"] != rows[1]["chat_id"]:
            raise ValueError(f"patterns {a_id} and {b_id} belong to different chats")
        by_id = {int(r["id"]): r for r in rows}
        survivor, loser = choose_survivor(_stats(rows[0]), _stats(rows[1]))
        chat_id, loser_content = rows[0]["chat_id"], by_id[loser.id]["content"]
        s, lo = survivor.id, loser.id
        await change_status(
            conn,
            chat_id,
            lo,
            "merged",
            action="merge",
            actor=actor,
            reason=merge_reason(s, differences),
            allowed_from=("active",),
            other_id=s,
        )
        await conn.execute(
            "UPDATE pattern_observations SET pattern_id = $1 "
            "WHERE chat_id = $3 AND pattern_id = $2",
            s,
            lo,
            chat_id,
        )
        await conn.execute(_MOVE_ENTRIES, s, lo, chat_id)
        await conn.execute(_MOVE_ALIASES, s, lo, chat_id)
        await conn.execute(_ADD_ALIAS, s, lo, chat_id, loser_content)
        for col, other in (
            ("from_pattern_id", "to_pattern_id"),
            ("to_pattern_id", "from_pattern_id"),
        ):
            await conn.execute(_MOVE_RELATIONS.format(col=col, other=other), s, lo, chat_id)
        c = combine(survivor, loser)
        await conn.execute(
            _SURVIVOR,
            s,
            c.strength,
            c.times_seen,
            c.confidence,
            c.first_seen,
            c.last_seen,
            c.contradiction_count,
            chat_id,
        )
        if by_id[lo]["is_core_tenet"] and not by_id[s]["is_core_tenet"]:
            await set_core_tenet(
                conn, chat_id, s, actor=actor, reason=f"absorbed core tenet #{lo} in a merge"
            )
    return s, lo


# --- the job ------------------------------------------------------------------------------------


async def merge_patterns(
    db: Database,
    embedder: Any,
    adjudicator: Adjudicator,
    *,
    dry_run: bool,
    thresholds: Thresholds,
    chat_id: int | None = None,
    progress: Progress | None = None,
) -> MergeReport:
    """Find, adjudicate and (unless ``dry_run``) merge duplicate patterns; see the module doc."""
    model = check_model(embedder.model)
    rows = await candidate_pairs(db, model, thresholds.merge, chat_id=chat_id)
    if progress is not None:
        progress.start(len(rows))
    gone: set[int] = set()  # merged away in this run (simulated in a dry run)
    pairs: list[MergePair] = []
    for c in rows:
        pair = MergePair(**attrs.asdict(c), decision="skipped")
        if pair.a_id not in gone and pair.b_id not in gone:
            pair = await _decide(db, adjudicator, pair, dry_run=dry_run)
            if pair.loser_id is not None:
                gone.add(pair.loser_id)
        pairs.append(pair)
        if progress is not None:
            progress.advance()
    report = MergeReport(dry_run, model, thresholds.merge, tuple(pairs))
    if report.merged and not dry_run:
        await ensure_vector_index(db, "alias_embeddings", model, int(embedder.dims))
    log.info("patterns.merge", model=model, dry_run=dry_run, pairs=len(pairs), merged=report.merged)
    return report


async def _decide(
    db: Database, adjudicator: Adjudicator, pair: MergePair, *, dry_run: bool
) -> MergePair:
    verdict = await adjudicator(pair.a_content, pair.b_content, pair.chat_id)
    if verdict is None:
        return attrs.evolve(pair, decision="no-answer")
    differences = verdict.differences
    if not verdict.merge:  # both core_intent_match and merge_decision
        return attrs.evolve(pair, decision="keep", differences=differences)
    if dry_run:
        rows = await db.fetch(
            _LOCK.replace(" FOR UPDATE", ""), [pair.a_id, pair.b_id], pair.chat_id
        )
        survivor, loser = choose_survivor(*(_stats(r) for r in rows))
        return attrs.evolve(
            pair,
            decision="merge",
            survivor_id=survivor.id,
            loser_id=loser.id,
            differences=differences,
        )
    merged = await merge_pair(
        db, pair.a_id, pair.b_id, differences=differences, chat_id=pair.chat_id
    )
    if merged is None:  # changed meanwhile (forgotten, merged by another run)
        return attrs.evolve(pair, decision="skipped", differences=differences)
    log.info(
        "patterns.merged",
        chat_id=pair.chat_id,
        survivor=merged[0],
        loser=merged[1],
        similarity=round(pair.similarity, 3),
    )
    return attrs.evolve(
        pair, decision="merge", survivor_id=merged[0], loser_id=merged[1], differences=differences
    )
