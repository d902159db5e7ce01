"""Why engram believes something (``/memory why <id>``, ``engram patterns show ID``): one of the
chat's patterns with its evidence, its links and its history.

:func:`explain` reads, for one pattern of one chat (another chat's id is not found):

* the pattern itself (kind, status and why, strength, confidence, times seen, first and last
  seen, an event's day, whether it is a core tenet, its source);
* its observations, newest first (the immutable evidence text, the roles it came from, when,
  explicit or implicit), at most :data:`MAX_OBSERVATIONS` and how many in all;
* the journal entries it is linked to (uuid, entry date, how often, by compaction or a turn);
* its relations both ways (supports, contradicts, parent_of, causes, supersedes) with the
  other pattern's text and status;
* its other wordings (aliases);
* its audit history (:func:`memory.patterns.audit.history`), oldest first.
"""

from __future__ import annotations

from datetime import date, datetime, time

import attrs

from memory.patterns.audit import AuditRow, history
from runtime.db import Queries

MAX_OBSERVATIONS = 10
MAX_LINKS = 10


@attrs.frozen
class Observation:
    evidence: str
    roles: tuple[str, ...]
    signal: str
    confidence: float
    observed_at: datetime


@attrs.frozen
class EntryLink:
    entry_uuid: str
    entry_date: datetime | None  # None: the entry is no longer in the journal
    source: str
    times_linked: int


@attrs.frozen
class Relation:
    """``direction`` ``out``: this pattern -relation-> other; ``in``: other -relation-> this."""

    relation: str
    direction: str
    other_id: int
    other_content: str
    other_status: str


@attrs.frozen
class PatternDetail:
    id: int
    kind: str
    content: str
    status: str
    status_reason: str | None
    strength: float
    confidence: float
    times_seen: int
    contradictions: int
    first_seen: datetime
    last_seen: datetime
    source: str
    core: bool
    pinned_at: datetime | None
    occurs_on: date | None
    occurs_at: time | None
    observations: tuple[Observation, ...]
    observation_count: int
    entries: tuple[EntryLink, ...]
    relations: tuple[Relation, ...]
    aliases: tuple[str, ...]
    audit: tuple[AuditRow, ...]


_PATTERN = """
SELECT id, kind, content, status, status_reason, strength, confidence, times_seen,
       contradiction_count, first_seen, last_seen, source, is_core_tenet, pinned_at, occurs_on,
       occurs_at,
       (SELECT count(*) FROM pattern_observations o
        WHERE o.chat_id = p.chat_id AND o.pattern_id = p.id) AS observations
FROM patterns p WHERE id = $1 AND chat_id = $2
"""
_OBSERVATIONS = """
SELECT evidence, evidence_roles, signal, confidence, observed_at FROM pattern_observations
WHERE pattern_id = $1 AND chat_id = $2 ORDER BY observed_at DESC, id DESC LIMIT $3
"""
_ENTRIES = """
SELECT pe.entry_uuid, e.created_at, pe.source, pe.times_linked FROM pattern_entries pe
LEFT JOIN entries e ON e.chat_id = pe.chat_id AND e.uuid = pe.entry_uuid
WHERE pe.pattern_id = $1 AND pe.chat_id = $2
ORDER BY pe.last_linked_at DESC, pe.entry_uuid LIMIT $3
"""
_RELATIONS = """
SELECT r.relation, CASE WHEN r.from_pattern_id = $1 THEN 'out' ELSE 'in' END AS direction,
       o.id AS other_id, o.content AS other_content, o.status AS other_status
FROM pattern_relations r
JOIN patterns o ON o.chat_id = r.chat_id
 AND o.id = CASE WHEN r.from_pattern_id = $1 THEN r.to_pattern_id ELSE r.from_pattern_id END
WHERE r.chat_id = $2 AND (r.from_pattern_id = $1 OR r.to_pattern_id = $1)
  AND NOT (r.from_pattern_id = $1 AND r.to_pattern_id = $1)
ORDER BY r.id
"""
_ALIASES = """
SELECT content FROM pattern_aliases WHERE pattern_id = $1 AND chat_id = $2 ORDER BY id LIMIT 20
"""


async def explain(db: Queries, chat_id: int, pattern_id: int) -> PatternDetail | None:
    """The pattern with its evidence, links, relations, aliases and audit; None when it is not
    one of the chat's patterns."""
    p = await db.fetchrow(_PATTERN, pattern_id, chat_id)
    if p is None:
        return None
    observations = [
        Observation(
            str(r["evidence"]),
            tuple(r["evidence_roles"] or ()),
            str(r["signal"]),
            float(r["confidence"]),
            r["observed_at"],
        )
        for r in await db.fetch(_OBSERVATIONS, pattern_id, chat_id, MAX_OBSERVATIONS)
    ]
    entries = [
        EntryLink(str(r["entry_uuid"]), r["created_at"], str(r["source"]), int(r["times_linked"]))
        for r in await db.fetch(_ENTRIES, pattern_id, chat_id, MAX_LINKS)
    ]
    relations = [
        Relation(
            str(r["relation"]),
            str(r["direction"]),
            int(r["other_id"]),
            str(r["other_content"]),
            str(r["other_status"]),
        )
        for r in await db.fetch(_RELATIONS, pattern_id, chat_id)
    ]
    aliases = [str(r["content"]) for r in await db.fetch(_ALIASES, pattern_id, chat_id)]
    return PatternDetail(
        id=int(p["id"]),
        kind=str(p["kind"]),
        content=str(p["content"]),
        status=str(p["status"]),
        status_reason=p["status_reason"],
        strength=float(p["strength"]),
        confidence=float(p["confidence"]),
        times_seen=int(p["times_seen"]),
        contradictions=int(p["contradiction_count"]),
        first_seen=p["first_seen"],
        last_seen=p["last_seen"],
        source=str(p["source"]),
        core=bool(p["is_core_tenet"]),
        pinned_at=p["pinned_at"],
        occurs_on=p["occurs_on"],
        occurs_at=p["occurs_at"],
        observations=tuple(observations),
        observation_count=int(p["observations"]),
        entries=tuple(entries),
        relations=tuple(relations),
        aliases=tuple(aliases),
        audit=tuple(await history(db, chat_id, pattern_id)),
    )
