"""Writes to the pattern tables: the building blocks of a compaction transaction and of the
``remember`` tool (:func:`memory.patterns.explicit.store_explicit_pattern`).

Every function here takes a :class:`runtime.db.Connection` (or anything with the same query
methods) and runs inside the caller's transaction; none calls an LLM or an embedding model
(vectors are computed by the caller before the transaction; a missing vector is left to
:class:`memory.embeddings.store.EmbeddingBackfill`).

Rules, in the order the seed gives them (000: "Spacing-sensitive reinforcement", "Pattern
extraction during compaction", "Pattern hierarchy", "Pattern ↔ entry linking"):

* a **new pattern** is a ``patterns`` row (``canonical_hash`` of its text, ``first_seen`` =
  ``last_seen`` = the time of its newest evidence message; an event's day and time; a core
  tenet's flag and ``pinned_at``), its vector (when there is one) and a
  ``pattern_observations`` row with the immutable evidence text, roles and message ids; the same
  text is the same claim only on the same day (an event on another day is another event);
* a **reinforcement** (explicit, or a new pattern found to be a duplicate) locks the row, applies
  :func:`memory.patterns.reinforcement.reinforce` with the days since ``last_seen`` (spacing boost,
  signal
  weight, cap 20, ``times_seen + 1``; confidence moves towards 1 by the reinforcement rule, the
  extractor's own confidence is kept on the observation), moves ``last_seen`` forward and
  appends an observation; a duplicate's differing text becomes a ``pattern_aliases`` row (with
  its vector);
* a **contradiction**, a supersede and the other relations between patterns are
  :mod:`memory.patterns.relations`;
* **entry links** are upserted with ``source='compaction'`` (a compaction link overrides a
  tool-loop one), ``times_linked + 1`` and ``last_linked_at``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import date, datetime, time
from typing import Any

import attrs
import numpy as np

from memory.embeddings.providers import PURPOSE as EMBED_PURPOSE
from memory.embeddings.providers import Embedder
from memory.embeddings.store import ensure_vector_index, store_vectors
from memory.patterns.audit import Actor, set_pin
from memory.patterns.canonical import canonical_hash, lock_key
from memory.patterns.reinforcement import (
    STRENGTH_CAP,
    PatternStats,
    reinforce,
)
from runtime.db import Queries
from runtime.logs import get_logger

log = get_logger(__name__)

EXTRACTOR_VERSION = "v1"
VECTOR_TABLES = (
    ("pattern_embeddings", "pattern_id"),
    ("alias_embeddings", "alias_id"),
    ("episode_embeddings", "episode_id"),
)


@attrs.frozen
class Evidence:
    """One observation's provenance: cited message ids, their immutable text and roles."""

    message_ids: tuple[int, ...] = ()
    text: str = ""
    roles: tuple[str, ...] = ()
    signal: str = "explicit"
    confidence: float = 0.5
    observed_at: datetime | None = None  # None: the transaction's now()


@attrs.frozen
class Vectors:
    """The embedding model and the vectors computed before the transaction (by text)."""

    model: str
    by_text: dict[str, np.ndarray] = attrs.field(factory=dict)

    def get(self, text: str) -> np.ndarray | None:
        return self.by_text.get(text)


async def ensure_indexes(db: Queries, vectors: Vectors) -> None:
    """Create the model's HNSW indexes before a transaction stores vectors (so that no
    ``CREATE INDEX`` race can abort the transaction)."""
    if not vectors.by_text:
        return
    dims = int(next(iter(vectors.by_text.values())).shape[0])
    for table, _ in VECTOR_TABLES:
        await ensure_vector_index(db, table, vectors.model, dims)


# --- patterns, observations, aliases ----------------------------------------------------------

_INSERT_PATTERN = """
INSERT INTO patterns (chat_id, content, kind, confidence, strength, source, temporal,
                      canonical_hash, first_seen, last_seen, occurs_on, occurs_at,
                      is_core_tenet, pinned_at)
VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, coalesce($9, now()), coalesce($9, now()), $10,
        $11, $12, CASE WHEN $12 THEN now() END)
RETURNING id
"""
_INSERT_OBSERVATION = """
INSERT INTO pattern_observations (pattern_id, chat_id, chat_message_ids, evidence,
                                  evidence_roles, signal, confidence, extractor_version,
                                  observed_at)
VALUES ($1, $2, $3::bigint[], $4, $5::text[], $6, $7, $8, coalesce($9, now()))
"""


_SAME_CLAIM = """
SELECT id FROM patterns
WHERE chat_id = $1 AND canonical_hash = $2 AND status IN ('active', 'disputed')
  AND occurs_on IS NOT DISTINCT FROM $3
ORDER BY id LIMIT 1
"""


async def insert_pattern(
    conn: Queries,
    *,
    chat_id: int,
    content: str,
    kind: str,
    confidence: float,
    evidence: Evidence,
    vectors: Vectors,
    source: str = "compaction",
    temporal: dict[str, Any] | None = None,
    strength: float = 1.0,
    occurs_on: date | None = None,
    occurs_at: time | None = None,
    core: bool = False,
    actor: Actor = "compaction",
) -> int:
    """A new pattern, its vector (if computed) and its first observation; its id.

    ``occurs_on``/``occurs_at``: an event's day and local time; ``core``: a core tenet
    (``pinned_at`` now, audited as pinned by ``actor``). A core claim found already stored
    makes that pattern a core tenet.

    Dedup decisions are made before the write transaction (they may call an LLM), so a
    concurrent writer (``remember`` during a compaction, or two ``remember`` calls) can have
    stored the very same claim since. Under a transaction lock on (chat, canonical hash) an
    identical active pattern found here is reinforced instead, and its id returned. (The lock
    is its own statement: a statement's snapshot is taken before it could wait for the lock,
    and would miss what the other writer commits meanwhile.)"""
    digest = canonical_hash(content)
    await conn.execute("SELECT pg_advisory_xact_lock($1)", lock_key("claim", chat_id, digest))
    existing = await conn.fetchval(_SAME_CLAIM, chat_id, digest, occurs_on)
    if existing is not None:
        done = await reinforce_pattern(
            conn, int(existing), chat_id, evidence, alias=content, vectors=vectors
        )
        if done is not None:
            log.info("patterns.concurrent_duplicate", chat_id=chat_id, pattern_id=existing)
            if core:
                await set_core_tenet(conn, chat_id, int(existing), actor=actor)
            return int(existing)
    pattern_id = int(
        await conn.fetchval(
            _INSERT_PATTERN,
            chat_id,
            content,
            kind,
            confidence,
            min(strength, STRENGTH_CAP),
            source,
            json.dumps(temporal) if temporal else None,
            digest,
            evidence.observed_at,
            occurs_on,
            occurs_at,
            False,  # pinned below, audited
        )
    )
    if core:
        await set_core_tenet(conn, chat_id, pattern_id, actor=actor)
    vector = vectors.get(content)
    if vector is not None:
        await store_vectors(
            conn, "pattern_embeddings", "pattern_id", [(pattern_id, vector, chat_id)], vectors.model
        )
    await add_observation(conn, pattern_id, chat_id, evidence)
    return pattern_id


CORE_BY_EXTRACTOR = "stated as a core belief or fact (confidence >= 0.9)"


async def set_core_tenet(
    conn: Queries,
    chat_id: int,
    pattern_id: int,
    core: bool = True,
    *,
    actor: Actor = "compaction",
    reason: str = CORE_BY_EXTRACTOR,
) -> bool:
    """Make one of the chat's patterns a core tenet (``pinned_at`` kept from the first time),
    or (``core=False``) an ordinary pattern again, audited
    (:func:`memory.patterns.audit.set_pin`); False when it is not one of the chat's."""
    return await set_pin(conn, chat_id, pattern_id, core, actor=actor, reason=reason) is not None


async def add_observation(conn: Queries, pattern_id: int, chat_id: int, evidence: Evidence) -> None:
    await conn.execute(
        _INSERT_OBSERVATION,
        pattern_id,
        chat_id,
        list(evidence.message_ids),
        evidence.text,
        list(evidence.roles),
        evidence.signal,
        evidence.confidence,
        EXTRACTOR_VERSION,
        evidence.observed_at,
    )


async def add_alias(
    conn: Queries, pattern_id: int, chat_id: int, content: str, vectors: Vectors
) -> int | None:
    """``content`` as an alias of the pattern (with its vector); None when already one."""
    alias_id = await conn.fetchval(
        "INSERT INTO pattern_aliases (pattern_id, chat_id, content) VALUES ($1, $2, $3) "
        "ON CONFLICT (chat_id, pattern_id, content) DO NOTHING RETURNING id",
        pattern_id,
        chat_id,
        content,
    )
    vector = vectors.get(content)
    if alias_id is not None and vector is not None:
        await store_vectors(
            conn, "alias_embeddings", "alias_id", [(int(alias_id), vector, chat_id)], vectors.model
        )
    return None if alias_id is None else int(alias_id)


# --- reinforcement -----------------------------------------------------------------------------

#: locks one of the chat's patterns for a reinforcement or a contradiction
LOCK_PATTERN = """
SELECT content, canonical_hash, strength, confidence, times_seen, contradiction_count, status,
       last_seen, coalesce($3, now()) AS at
FROM patterns WHERE id = $1 AND chat_id = $2 FOR UPDATE
"""


@attrs.frozen
class Reinforced:
    """The outcome of :func:`reinforce_pattern`."""

    pattern_id: int
    before: PatternStats
    after: PatternStats
    days_since_last_seen: float


async def reinforce_pattern(
    conn: Queries,
    pattern_id: int,
    chat_id: int,
    evidence: Evidence,
    *,
    alias: str | None = None,
    vectors: Vectors | None = None,
    bump: bool = True,
) -> Reinforced | None:
    """Reinforce one of the chat's patterns (see the module docstring); None if it is not one.

    ``alias``: the duplicate text that led here, kept as an alias unless it is the same
    canonical text. ``bump=False`` only appends the observation (and alias): the pattern was
    already reinforced by this same compaction (massed repetition earns nothing more).
    """
    row = await conn.fetchrow(LOCK_PATTERN, pattern_id, chat_id, evidence.observed_at)
    if row is None:
        return None
    before = PatternStats(row["strength"], row["confidence"], row["times_seen"])
    days = (row["at"] - row["last_seen"]).total_seconds() / 86400.0
    after = reinforce(before, days, evidence.signal) if bump else before
    if bump:
        await conn.execute(
            "UPDATE patterns SET strength = $2, confidence = $3, times_seen = $4, "
            "last_seen = greatest(last_seen, $5), updated_at = now() "
            "WHERE chat_id = $6 AND id = $1",
            pattern_id,
            after.strength,
            after.confidence,
            after.times_seen,
            row["at"],
            chat_id,
        )
    await add_observation(conn, pattern_id, chat_id, evidence)
    if alias is not None and canonical_hash(alias) != row["canonical_hash"]:
        await add_alias(conn, pattern_id, chat_id, alias, vectors or Vectors(""))
    return Reinforced(pattern_id, before, after, days)


# --- embedding before a transaction -------------------------------------------------------------


async def embed_texts(embedder: Embedder, texts: Sequence[str], chat_id: int) -> Vectors:
    """The texts' vectors in one call; none (logged) when the embedding call fails: the caller
    stores its rows without vectors and the backfill job adds them later."""
    unique = list(dict.fromkeys(t for t in texts if t))
    if not unique:
        return Vectors(embedder.model)
    try:
        vectors = await embedder.embed(unique, purpose=EMBED_PURPOSE, chat_id=chat_id)
    except Exception as exc:  # an outage must not lose the write
        log.warning(
            "patterns.embedding_failed",
            chat_id=chat_id,
            texts=len(unique),
            error=f"{type(exc).__name__}: {exc}",
        )
        return Vectors(embedder.model)
    return Vectors(embedder.model, dict(zip(unique, vectors, strict=True)))
