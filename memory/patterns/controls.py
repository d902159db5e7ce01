"""What a person (through a chat command) or the model (through a tool) does to memory: the one
path for each action, scoped to one chat (another chat's id reads exactly like an unknown id).

* :func:`forget_pattern` / :func:`forget_patterns` — forget (``/memory forget``, ``/forget``,
  the ``forget_memory`` tool once the person confirmed): the audit row (no text), then the
  pattern and everything derived from it are deleted
  (:func:`memory.patterns.forgetting.erase_patterns`);
* :func:`pin_pattern` — make a core tenet, or an ordinary pattern again (``/memory pin|unpin``);
* :func:`merge_two` — the merge job's merge of one pair (:func:`memory.patterns.merge.merge_pair`)
  for ``/memory merge``, without the model's adjudication (the person decided);
* :func:`link_patterns` — a relation the person states (the ``link_memories`` tool);
* the messages that mention a topic (``/forget``'s "also delete the messages") are
  :mod:`memory.patterns.forgetting`'s.

Explicit patterns (``/remember`` and the ``remember`` tool) are
:func:`memory.patterns.explicit.remember`; every status change is written by
:mod:`memory.patterns.audit`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import attrs

from memory.patterns.audit import Actor, StatusChange, change_status, set_pin
from memory.patterns.forgetting import erase_patterns
from memory.patterns.merge import merge_pair
from memory.patterns.relations import add_relation, supersede_pattern
from runtime.db import Connection, Database, Queries

FORGOTTEN_BY_PERSON = "forgotten by the person"
#: what may be forgotten: anything still shown or kept apart (a merged pattern lives on in its
#: survivor, which is the one to forget)
FORGETTABLE = ("active", "disputed", "superseded")
#: the relations of ``pattern_relations`` (migration 001's CHECK)
RELATIONS = ("supports", "contradicts", "parent_of", "causes", "supersedes")
Relation = Literal["supports", "contradicts", "parent_of", "causes", "supersedes"]


@attrs.frozen
class Forgotten:
    """The outcome of forgetting one pattern: ``forgotten`` now, ``already`` forgotten, or
    ``merged`` into another (``note``: the merge's reason)."""

    pattern_id: int
    content: str
    outcome: Literal["forgotten", "already", "merged"]
    note: str = ""


def _outcome(change: StatusChange, note: str = "") -> Forgotten:
    if change.changed:
        return Forgotten(change.pattern_id, change.content, "forgotten")
    if change.old_status == "merged":
        return Forgotten(change.pattern_id, change.content, "merged", note)
    return Forgotten(change.pattern_id, change.content, "already")


async def forget_pattern(
    db: Queries, chat_id: int, pattern_id: int, *, reason: str, actor: Actor
) -> Forgotten | None:
    """Forget one of the chat's patterns (audited, then deleted with everything derived from
    it, in one transaction); None when it is not one of them. A merged pattern is not
    forgotten (its survivor is the one to forget)."""
    if isinstance(db, Database):
        async with db.transaction() as conn:
            return await _forget_one(conn, chat_id, pattern_id, reason=reason, actor=actor)
    return await _forget_one(db, chat_id, pattern_id, reason=reason, actor=actor)


async def _forget_one(
    db: Queries, chat_id: int, pattern_id: int, *, reason: str, actor: Actor
) -> Forgotten | None:
    change = await change_status(
        db,
        chat_id,
        pattern_id,
        "deprecated",
        action="forget",
        actor=actor,
        reason=reason,
        allowed_from=FORGETTABLE,
    )
    if change is None:
        return None
    note = ""
    if change.old_status == "merged":
        note = str(
            await db.fetchval(
                "SELECT coalesce(status_reason, '') FROM patterns WHERE id = $1 AND chat_id = $2",
                pattern_id,
                chat_id,
            )
        )
    if change.changed or change.old_status == "deprecated":
        await erase_patterns(db, chat_id, [pattern_id])
    return _outcome(change, note)


async def forget_patterns(
    conn: Queries, chat_id: int, pattern_ids: Sequence[int], *, reason: str, actor: Actor
) -> list[Forgotten]:
    """Forget several of the chat's patterns (``/forget``'s "Forget all"; give a
    transaction's connection for all or nothing); the ones found, in the order given."""
    out: list[Forgotten] = []
    for pattern_id in dict.fromkeys(pattern_ids):
        change = await change_status(
            conn,
            chat_id,
            pattern_id,
            "deprecated",
            action="forget",
            actor=actor,
            reason=reason,
            allowed_from=FORGETTABLE,
        )
        if change is not None:
            out.append(_outcome(change))
    await erase_patterns(conn, chat_id, [f.pattern_id for f in out if f.outcome != "merged"])
    return out


@attrs.frozen
class Pinned:
    pattern_id: int
    content: str
    changed: bool  # False: it already was (or was not) a core tenet
    status: str


async def pin_pattern(
    db: Database, chat_id: int, pattern_id: int, pinned: bool, *, actor: Actor
) -> Pinned | None:
    """Pin (a core tenet: always in the profile, no decay) or unpin one of the chat's live
    patterns, audited; None when it is not one of the chat's patterns. A pattern no longer live
    (forgotten, merged, superseded) is not pinned (``changed`` False)."""
    reason = "pinned by the person" if pinned else "unpinned by the person"
    async with db.transaction() as conn:
        row = await conn.fetchrow(
            "SELECT content, status FROM patterns WHERE id = $1 AND chat_id = $2 FOR UPDATE",
            pattern_id,
            chat_id,
        )
        if row is None:
            return None
        changed = False
        if not pinned or row["status"] in ("active", "disputed"):
            changed = bool(
                await set_pin(conn, chat_id, pattern_id, pinned, actor=actor, reason=reason)
            )
    return Pinned(pattern_id, str(row["content"]), changed, str(row["status"]))


@attrs.frozen
class Merged:
    """A merge asked for by the person: ``survivor`` absorbed ``loser``; or why not
    (``problem``)."""

    survivor: int | None = None
    loser: int | None = None
    problem: str = ""


_PAIR = """
SELECT id, content, status, occurs_on FROM patterns
WHERE chat_id = $1 AND id = ANY($2::bigint[]) ORDER BY id
"""


async def check_mergeable(db: Queries, chat_id: int, a_id: int, b_id: int) -> str:
    """Why the chat's patterns ``a_id`` and ``b_id`` cannot be merged ('' when they can)."""
    if a_id == b_id:
        return "a memory cannot be merged with itself"
    rows = {int(r["id"]): r for r in await db.fetch(_PAIR, chat_id, [a_id, b_id])}
    for pid in (a_id, b_id):
        if pid not in rows:
            return f"memory #{pid} not found"
        if rows[pid]["status"] != "active":
            return f"memory #{pid} is {rows[pid]['status']}, not active"
    if rows[a_id]["occurs_on"] != rows[b_id]["occurs_on"]:
        return "two events on different days (or an event and a non-event) are never merged"
    return ""


async def merge_two(
    db: Database | Connection, chat_id: int, a_id: int, b_id: int, *, actor: Actor = "person"
) -> Merged:
    """Merge two of the chat's active patterns as the merge job does (the stronger survives,
    observations, links, aliases and relations move to it; audited as ``actor``'s)."""
    problem = await check_mergeable(db, chat_id, a_id, b_id)
    if problem:
        return Merged(problem=problem)
    done = await merge_pair(
        db,
        a_id,
        b_id,
        chat_id=chat_id,
        actor=actor,
        differences=f"merged by the {actor.replace('_', ' ')}",
    )
    if done is None:
        return Merged(problem="one of them changed meanwhile; nothing was merged")
    return Merged(done[0], done[1])


async def check_link(db: Queries, chat_id: int, from_id: int, to_id: int, relation: str) -> str:
    """Why ``from_id -relation-> to_id`` cannot be recorded between two of the chat's patterns
    ('' when it can); a supersede needs the older one still live."""
    if relation not in RELATIONS:
        return f"unknown relation {relation!r} (one of {', '.join(RELATIONS)})"
    if from_id == to_id:
        return "a memory cannot be linked to itself"
    rows = {int(r["id"]): r for r in await db.fetch(_PAIR, chat_id, [from_id, to_id])}
    for pid in (from_id, to_id):
        if pid not in rows:
            return f"memory #{pid} not found"
    if relation == "supersedes" and rows[to_id]["status"] not in ("active", "disputed"):
        return f"memory #{to_id} is {rows[to_id]['status']}, not active"
    return ""


async def link_patterns(
    db: Database | Connection,
    chat_id: int,
    from_id: int,
    to_id: int,
    relation: Relation,
    *,
    actor: Actor,
) -> str:
    """Record ``from_id -relation-> to_id`` between two of the chat's patterns; '' when done,
    else why not (:func:`check_link`). ``supersedes`` also retires ``to_id`` (``superseded``,
    audited)."""
    problem = await check_link(db, chat_id, from_id, to_id, relation)
    if problem:
        return problem
    async with db.transaction() as conn:
        if relation == "supersedes":
            await supersede_pattern(
                conn, to_id, from_id, chat_id, f"superseded by #{from_id}", actor=actor
            )
        else:
            await add_relation(conn, chat_id, from_id, to_id, relation)
    return ""
