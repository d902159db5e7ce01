"""What a chat's vault shows, read from the database in one place (:func:`load_chat`).

The rows are plain frozen values, so rendering (:mod:`memory.vault.render`) is a pure function
of them: the same database gives the same bytes, whether a file is written after a turn or by
``engram vault rebuild``. Nothing here depends on the time of reading.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import date, datetime, time
from typing import Any

import attrs

from runtime.db import Queries


@attrs.frozen
class Message:
    """A user or assistant row (tool results are not shown: untrusted text)."""

    id: int
    role: str
    content: str
    created_at: datetime
    tool_names: tuple[str, ...] = ()
    tool_inputs: tuple[str, ...] = ()  # each call's input as compact JSON, in call order
    routine_name: str | None = None


@attrs.frozen
class Episode:
    id: int
    summary: str
    started_at: datetime
    ended_at: datetime
    message_count: int


@attrs.frozen
class Pattern:
    id: int
    kind: str
    status: str
    content: str
    strength: float
    confidence: float
    times_seen: int
    first_seen: datetime
    last_seen: datetime
    created_at: datetime
    source: str
    is_core_tenet: bool = False
    occurs_on: date | None = None
    occurs_at: time | None = None
    status_reason: str | None = None


@attrs.frozen
class Observation:
    pattern_id: int
    observed_at: datetime
    evidence: str
    signal: str
    confidence: float
    id: int = 0


@attrs.frozen
class Relation:
    from_id: int
    to_id: int
    relation: str


@attrs.frozen
class Audit:
    id: int
    pattern_id: int
    action: str
    old_status: str
    new_status: str
    reason: str
    actor: str
    other_pattern_id: int | None
    at: datetime


@attrs.frozen
class ChatData:
    """Everything one chat's vault is rendered from (each list in a fixed order)."""

    chat_id: int
    timezone: str
    messages: tuple[Message, ...] = ()
    episodes: tuple[Episode, ...] = ()
    patterns: tuple[Pattern, ...] = ()
    observations: tuple[Observation, ...] = ()
    relations: tuple[Relation, ...] = ()
    audit: tuple[Audit, ...] = ()


_MESSAGES = """
SELECT id, role, content, created_at, tool_calls, routine_name
FROM chat_messages WHERE chat_id = $1 AND role IN ('user', 'assistant')
ORDER BY created_at, id
"""
EPISODES_SQL = """
SELECT id, summary, started_at, ended_at, message_count
FROM episodes WHERE chat_id = $1 ORDER BY started_at, id
"""
_PATTERNS = """
SELECT id, kind, status, content, strength, confidence, times_seen, first_seen, last_seen,
       created_at, source, is_core_tenet, occurs_on, occurs_at, status_reason
FROM patterns WHERE chat_id = $1 ORDER BY id
"""
_OBSERVATIONS = """
SELECT pattern_id, observed_at, evidence, signal, confidence, id
FROM pattern_observations WHERE chat_id = $1 ORDER BY pattern_id, observed_at, id
"""
RELATIONS_SQL = """
SELECT from_pattern_id, to_pattern_id, relation
FROM pattern_relations WHERE chat_id = $1 ORDER BY from_pattern_id, to_pattern_id, relation
"""
AUDIT_SQL = """
SELECT id, pattern_id, action, old_status, new_status, reason, actor, other_pattern_id, at
FROM pattern_audit WHERE chat_id = $1 ORDER BY at, id
"""
#: the chats that have something to show
_CHATS = """
/* all chats: the vault writer's list of chats */
SELECT chat_id FROM chat_messages UNION SELECT chat_id FROM patterns
UNION SELECT chat_id FROM episodes UNION SELECT chat_id FROM pattern_audit ORDER BY 1
"""


def _calls(raw: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    data = json.loads(raw) if isinstance(raw, str) else raw
    if not isinstance(data, list):
        return (), ()
    calls = [c for c in data if isinstance(c, dict) and "name" in c]
    names = tuple(str(c["name"]) for c in calls)
    inputs = tuple(
        json.dumps(c.get("input") or {}, ensure_ascii=False, sort_keys=True) for c in calls
    )
    return names, inputs


def message_from_row(r: Any) -> Message:
    """A :class:`Message` from a ``chat_messages`` row (id, role, content, created_at,
    tool_calls, routine_name)."""
    names, inputs = _calls(r["tool_calls"])
    return Message(
        id=r["id"],
        role=r["role"],
        content=r["content"],
        created_at=r["created_at"],
        tool_names=names,
        tool_inputs=inputs,
        routine_name=r["routine_name"],
    )


def _records(rows: Sequence[Any], cls: type[Any]) -> tuple[Any, ...]:
    return tuple(cls(*r.values()) for r in rows)


async def load_chat(db: Queries, chat_id: int, timezone: str) -> ChatData:
    """The chat's vault data (call it inside a transaction for one consistent snapshot)."""
    messages = await db.fetch(_MESSAGES, chat_id)
    episodes = await db.fetch(EPISODES_SQL, chat_id)
    patterns = await db.fetch(_PATTERNS, chat_id)
    observations = await db.fetch(_OBSERVATIONS, chat_id)
    relations = await db.fetch(RELATIONS_SQL, chat_id)
    audit = await db.fetch(AUDIT_SQL, chat_id)
    return ChatData(
        chat_id=chat_id,
        timezone=timezone,
        messages=tuple(message_from_row(r) for r in messages),
        episodes=_records(episodes, Episode),
        patterns=_records(patterns, Pattern),
        observations=_records(observations, Observation),
        relations=_records(relations, Relation),
        audit=_records(audit, Audit),
    )


async def vault_chats(db: Queries) -> list[int]:
    """Every chat that has something for a vault (messages, patterns, episodes, audit)."""
    return [r["chat_id"] for r in await db.fetch(_CHATS)]
