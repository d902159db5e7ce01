"""The compaction transaction and what it needs computed before it opens.

:func:`plan_patterns` (no transaction open): one embedding call for every text to store
(new patterns, replacements, meta patterns, the episode summary) and a
:func:`memory.patterns.dedup.find_duplicate` decision for each pattern text (an adjudication LLM
call happens here, never inside a transaction). A replacement is never deduplicated onto the
pattern it supersedes.

:func:`apply_extraction` (inside the caller's transaction) writes the plan with
:mod:`memory.patterns.writes` and closes the chunk: ``compacted_at`` on exactly its rows, the
episode row and the ``ok`` run row. Decisions recorded here:

* ``contradicts`` runs from the rival pattern (a new pattern of the same extraction citing one
  of the contradiction's evidence messages) to the contradicted one; without a rival it is a
  self-relation on the contradicted pattern (see
  :func:`memory.patterns.relations.contradict_pattern`);
* ``supersedes`` runs from the replacement to the old pattern (old <- new), old -> superseded;
* a meta pattern starts with the sum of its children's strengths (capped at 20), ``parent_of``
  from it to each child, and an observation quoting the children (signal implicit);
* an event keeps its day and time (dedup only against events of that day); a claim the
  extractor proposed as core (:attr:`memory.extraction.claims.NewPattern.pinned`) makes the new
  or the reinforced pattern a core tenet;
* an episode is written only when the summary survived the guardrails.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, time
from typing import Any

import attrs

from memory.conversation.messages import ChatMessage, render_tool_call
from memory.embeddings.providers import Embedder
from memory.embeddings.store import store_vectors
from memory.embeddings.thresholds import Thresholds
from memory.extraction.claims import ChunkMessage, Extraction, KnownPattern, NewPattern, Supersede
from memory.extraction.guardrails import evidence_for
from memory.patterns.dedup import Adjudicator, DedupDecision, find_duplicate
from memory.patterns.entry_links import link_entries
from memory.patterns.relations import (
    add_relation,
    children_strength,
    contradict_pattern,
    supersede_pattern,
)
from memory.patterns.writes import (
    Evidence,
    Vectors,
    embed_texts,
    insert_pattern,
    reinforce_pattern,
    set_core_tenet,
)
from runtime.db import Connection
from runtime.logs import get_logger

log = get_logger(__name__)


# --- before the transaction: vectors and dedup decisions --------------------------------------


def chunk_message(row: ChatMessage) -> ChunkMessage:
    """A stored row as the extractor sees it (an assistant row's tool calls as text lines)."""
    content = row.content
    if row.role == "assistant" and row.tool_calls:
        calls = "\n".join(f"called {render_tool_call(c)}" for c in row.tool_calls)
        content = f"{content}\n{calls}".strip()
    return ChunkMessage(row.id or 0, row.role, content, row.created_at, row.tool_name)


def evidence(
    ids: Sequence[int], chunk: Sequence[ChunkMessage], signal: str, confidence: float
) -> Evidence:
    """The immutable evidence of the cited rows, observed at the newest one's time."""
    text, roles = evidence_for(ids, chunk)
    times = [m.created_at for m in chunk if m.id in set(ids)]
    return Evidence(tuple(ids), text, roles, signal, confidence, max(times, default=None))


@attrs.frozen
class Planned:
    """A pattern text to store (new, replacement or meta) with its dedup decision."""

    content: str
    kind: str
    confidence: float
    evidence: Evidence
    decision: DedupDecision
    entry_uuids: tuple[str, ...] = ()
    temporal: dict[str, Any] | None = None
    occurs_on: date | None = None
    occurs_at: time | None = None
    core: bool = False


@attrs.frozen
class Plan:
    """Everything the transaction needs, computed before it opens."""

    extraction: Extraction
    messages: tuple[ChunkMessage, ...]
    vectors: Vectors
    new: tuple[Planned, ...]
    supersedes: tuple[Planned, ...]  # aligned with extraction.supersedes
    metas: tuple[Planned, ...]  # aligned with extraction.meta_patterns


async def plan_patterns(
    conn: Connection,
    embedder: Embedder,
    ex: Extraction,
    messages: Sequence[ChunkMessage],
    *,
    chat_id: int,
    thresholds: Thresholds,
    adjudicator: Adjudicator,
    known: Sequence[KnownPattern],
) -> Plan:
    """Embed every text to store in one call, then decide insert/reinforce for each."""
    texts = [p.content for p in ex.new_patterns] + [s.new_pattern_content for s in ex.supersedes]
    texts += [m.content for m in ex.meta_patterns] + [ex.episode_summary]
    vectors = await embed_texts(embedder, texts, chat_id)
    by_id = {p.id: p for p in known}

    async def plan(
        content: str,
        kind: str,
        conf: float,
        ev: Evidence,
        uuids: tuple[str, ...],
        temporal: dict[str, Any] | None = None,
        never: int | None = None,
        dated: NewPattern | Supersede | None = None,
    ) -> Planned:
        day = dated.occurs_on if dated is not None else None
        decision = await find_duplicate(
            conn,
            chat_id=chat_id,
            content=content,
            kind=kind,
            vector=vectors.get(content),
            model=vectors.model,
            thresholds=thresholds,
            adjudicator=adjudicator,
            occurs_on=day,
        )
        if decision.pattern_id is not None and decision.pattern_id == never:
            reason = "a replacement is never the pattern it supersedes"
            decision = DedupDecision("insert", None, decision.similarity, reason)
        at, core = (dated.occurs_at, dated.pinned) if dated is not None else (None, False)
        return Planned(content, kind, conf, ev, decision, uuids, temporal, day, at, core)

    new = [
        await plan(
            p.content,
            p.kind,
            p.confidence,
            evidence(p.evidence_message_ids, messages, p.signal, p.confidence),
            p.entry_uuids,
            p.temporal,
            dated=p,
        )
        for p in ex.new_patterns
    ]
    supersedes = [
        await plan(
            s.new_pattern_content,
            s.kind,
            s.confidence,
            evidence(s.evidence_message_ids, messages, s.signal, s.confidence),
            s.entry_uuids,
            never=s.old_pattern_id,
            dated=s,
        )
        for s in ex.supersedes
    ]
    metas = []
    for m in ex.meta_patterns:
        text = "\n".join(f"[pattern #{c}] {by_id[c].content}" for c in m.child_pattern_ids)
        ev = Evidence(text=text, signal="implicit", confidence=m.confidence)
        metas.append(await plan(m.content, m.kind, m.confidence, ev, ()))
    return Plan(ex, tuple(messages), vectors, tuple(new), tuple(supersedes), tuple(metas))


# --- the transaction ---------------------------------------------------------------------------


@attrs.define
class Counts:
    created: int = 0
    reinforced: int = 0
    contradicted: int = 0
    superseded: int = 0
    meta: int = 0
    episode_id: int | None = None


async def apply_extraction(
    conn: Connection, plan: Plan, chunk: Sequence[ChatMessage], *, chat_id: int, run_id: int
) -> Counts:
    """Write ``plan`` and close the chunk, on ``conn`` inside the caller's transaction.

    Order: explicit reinforcements, new patterns, supersedes, contradictions (so a rival new
    pattern exists), meta patterns (children already updated), the episode, ``compacted_at``,
    the run row. A pattern reinforced twice by one compaction (explicitly and as a duplicate)
    gets its strength bump once: the second sighting is massed repetition.
    """
    counts = Counts()
    bumped: set[int] = set()
    ex, messages = plan.extraction, plan.messages

    async def put(p: Planned, *, source: str = "compaction", strength: float = 1.0) -> int:
        target = p.decision.pattern_id
        if p.decision.action == "reinforce" and target is not None:
            done = await reinforce_pattern(
                conn,
                target,
                chat_id,
                p.evidence,
                alias=p.content,
                vectors=plan.vectors,
                bump=target not in bumped,
            )
            if done is not None:
                counts.reinforced += target not in bumped
                bumped.add(target)
                await link_entries(conn, target, chat_id, p.entry_uuids, at=p.evidence.observed_at)
                if p.core:
                    await set_core_tenet(conn, chat_id, target)
                return target
        pattern_id = await insert_pattern(
            conn,
            chat_id=chat_id,
            content=p.content,
            kind=p.kind,
            confidence=p.confidence,
            evidence=p.evidence,
            vectors=plan.vectors,
            source=source,
            temporal=p.temporal,
            strength=strength,
            occurs_on=p.occurs_on,
            occurs_at=p.occurs_at,
            core=p.core,
        )
        counts.created += 1
        await link_entries(conn, pattern_id, chat_id, p.entry_uuids, at=p.evidence.observed_at)
        return pattern_id

    for r in ex.reinforcements:
        ev = evidence(r.evidence_message_ids, messages, r.signal, r.confidence)
        if await reinforce_pattern(conn, r.pattern_id, chat_id, ev) is not None:
            counts.reinforced += 1
            bumped.add(r.pattern_id)
            await link_entries(conn, r.pattern_id, chat_id, r.entry_uuids, at=ev.observed_at)
    new_ids = [(p, await put(p)) for p in plan.new]
    for s, p in zip(ex.supersedes, plan.supersedes, strict=True):
        new_id = await put(p)
        counts.superseded += await supersede_pattern(
            conn, s.old_pattern_id, new_id, chat_id, s.reason
        )
        new_ids.append((p, new_id))
    for c in ex.contradictions:
        cited = set(c.evidence_message_ids)
        rival = next(
            (i for p, i in new_ids if cited & set(p.evidence.message_ids) and i != c.pattern_id),
            None,
        )
        done = await contradict_pattern(
            conn, c.pattern_id, chat_id, signal=c.signal, reason=c.reason, rival_id=rival
        )
        counts.contradicted += done is not None
    for m, p in zip(ex.meta_patterns, plan.metas, strict=True):
        strength = await children_strength(conn, chat_id, m.child_pattern_ids)
        meta_id = await put(p, strength=strength)
        for child in m.child_pattern_ids:
            if child != meta_id:
                await add_relation(conn, chat_id, meta_id, child, "parent_of")
        counts.meta += 1
    counts.episode_id = await _episode(conn, plan, chunk, chat_id)
    ids = [r.id for r in chunk]
    status = await conn.execute(
        "UPDATE chat_messages SET compacted_at = now() "
        "WHERE chat_id = $1 AND id = ANY($2::bigint[]) AND compacted_at IS NULL",
        chat_id,
        ids,
    )
    if int(status.split()[-1]) != len(ids):
        log.warning("compaction.rows_changed", chat_id=chat_id, expected=len(ids), status=status)
    await conn.execute(
        "UPDATE compaction_runs SET status = 'ok', finished_at = now(), messages_compacted = $2, "
        "patterns_created = $3, patterns_reinforced = $4, patterns_contradicted = $5 "
        "WHERE chat_id = $6 AND id = $1",
        run_id,
        len(ids),
        counts.created,
        counts.reinforced,
        counts.contradicted,
        chat_id,
    )
    return counts


async def _episode(
    conn: Connection, plan: Plan, chunk: Sequence[ChatMessage], chat_id: int
) -> int | None:
    """The episode row of the chunk (none when the summary was rejected) and its vector."""
    summary = plan.extraction.episode_summary
    if not summary:
        return None
    episode_id = int(
        await conn.fetchval(
            "INSERT INTO episodes (chat_id, summary, started_at, ended_at, message_count, "
            "first_message_id, last_message_id) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
            chat_id,
            summary,
            min(r.created_at for r in chunk),
            max(r.created_at for r in chunk),
            len(chunk),
            chunk[0].id,
            chunk[-1].id,
        )
    )
    vector = plan.vectors.get(summary)
    if vector is not None:
        await store_vectors(
            conn,
            "episode_embeddings",
            "episode_id",
            [(episode_id, vector, chat_id)],
            plan.vectors.model,
        )
    return episode_id
