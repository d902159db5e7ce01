"""The pattern side of an incremental vault write: what changed in a chat's patterns, evidence,
relations, audit rows and episodes since the writer's last write, read by id and ``updated_at``
ranges (not the whole chat), applied to the writer's :class:`PatternState`, and which files it
affects: the pages of the patterns changed or whose evidence, relations or audit changed, the
pages of removed patterns (deleted), ``MEMORY.md`` when any pattern changed, and the days whose
lines after the conversation changed (recomputed from the state, compared with the last ones).

A count that does not add up (a row committed late below the last largest id) gives up: the
caller then writes the whole chat. A pattern updated by a transaction that began more than
:data:`OVERLAP` before the latest ``updated_at`` seen and committed after the last write (no
writer of patterns holds one that long) waits for the periodic sweep's whole write.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

import attrs

from memory.vault.data import (
    AUDIT_SQL,
    EPISODES_SQL,
    RELATIONS_SQL,
    Audit,
    Episode,
    Observation,
    Pattern,
)
from memory.vault.data import Relation as Rel
from memory.vault.render import page_path
from runtime.db import Queries

_COLUMNS = (
    "id, kind, status, content, strength, confidence, times_seen, first_seen, last_seen, "
    "created_at, source, is_core_tenet, occurs_on, occurs_at, status_reason"
)
_CHANGED = f"""
SELECT {_COLUMNS} FROM patterns
WHERE chat_id = $1 AND (updated_at >= $2::timestamptz - make_interval(secs => $4)
                      OR $2::timestamptz IS NULL OR id > $3)
ORDER BY id
"""
_IDS = "SELECT id FROM patterns WHERE chat_id = $1"
_OBS = "SELECT id, pattern_id, observed_at FROM pattern_observations WHERE chat_id = $1"
_NEW_OBS = _OBS + " AND id > $2"
_OBS_OF = _OBS + " AND pattern_id = ANY($2::bigint[])"
_NEW_AUDIT = """
SELECT id, pattern_id, action, old_status, new_status, reason, actor, other_pattern_id, at
FROM pattern_audit WHERE chat_id = $1 AND id > $2
"""
EVIDENCE = """
SELECT pattern_id, observed_at, evidence, signal, confidence, id FROM pattern_observations
WHERE chat_id = $1 AND pattern_id = ANY($2::bigint[]) ORDER BY pattern_id, observed_at, id
"""
#: seconds before the last ``updated_at`` seen that are read again: a transaction that began
#: before it (its ``now()`` older) but committed after the last write is found by the next one
OVERLAP = 300.0
# the signature's positions (memory.vault.incremental._SIGNATURE)
PATTERNS, PATTERN_MAX, UPDATED, OBS, OBS_MAX, RELS, REL_MAX, AUDIT, AUDIT_MAX = range(2, 11)


@attrs.define
class PatternState:
    """The chat's pattern-side rows as the vault last showed them (evidence text aside)."""

    patterns: dict[int, Pattern] = attrs.field(factory=dict)
    observations: dict[int, tuple[int, datetime]] = attrs.field(factory=dict)
    relations: list[Rel] = attrs.field(factory=list)
    audit: dict[int, Audit] = attrs.field(factory=dict)
    episodes: tuple[Episode, ...] = ()

    def view(self) -> tuple[tuple[Pattern, ...], tuple[Observation, ...], tuple[Audit, ...]]:
        """Patterns, evidence stubs (no text) and audit rows in the order a rebuild reads them."""
        obs = tuple(Observation(pid, at, "", "", 0.0) for pid, at in self.observations.values())
        audit = tuple(sorted(self.audit.values(), key=lambda a: (a.at, a.id)))
        return tuple(self.patterns.values()), obs, audit


@attrs.frozen
class Changes:
    """Which files a delta affects (days are found after, from the state's tails)."""

    pages: frozenset[int]
    remove: frozenset[str]
    memory: bool


def _obs_diff(
    state: PatternState, rows: list[Any], scope: set[int] | None, touched: set[int]
) -> None:
    """Bring ``state.observations`` to ``rows`` (all of the chat's, or those of the patterns
    ``scope``), noting the patterns whose evidence changed."""
    fresh = {r["id"]: (r["pattern_id"], r["observed_at"]) for r in rows}
    for oid, old in list(state.observations.items()):
        if (scope is None or old[0] in scope) and fresh.get(oid) != old:
            touched.add(old[0])
            del state.observations[oid]
    for oid, new in fresh.items():
        if state.observations.get(oid) != new:
            touched.add(new[0])
            state.observations[oid] = new


async def apply_delta(
    conn: Queries, chat_id: int, state: PatternState, before: tuple[Any, ...], now: tuple[Any, ...]
) -> Changes | None:
    """Read what changed between the signatures ``before`` and ``now`` into ``state``; None
    when it cannot be told apart from the whole chat (then write the whole chat)."""
    pages: set[int] = set()
    remove: set[str] = set()
    changed: dict[int, Pattern] = {}
    if now[PATTERNS : UPDATED + 1] != before[PATTERNS : UPDATED + 1]:
        rows = await conn.fetch(_CHANGED, chat_id, before[UPDATED], before[PATTERN_MAX], OVERLAP)
        for r in rows:
            p = Pattern(*r.values())
            if state.patterns.get(p.id) != p:
                changed[p.id] = p
    added = [i for i in changed if i not in state.patterns]
    removed: set[int] = set()
    if now[PATTERNS] != len(state.patterns) + len(added):
        ids = {r["id"] for r in await conn.fetch(_IDS, chat_id)}
        if any(i not in state.patterns and i not in changed for i in ids):
            return None  # a pattern committed late with an older updated_at
        removed = set(state.patterns) - ids
    for pid in removed:
        remove.add(page_path(state.patterns.pop(pid)))
    for pid, p in changed.items():
        old = state.patterns.get(pid)
        if old is not None and page_path(old) != page_path(p):
            remove.add(page_path(old))
        state.patterns[pid] = p
    pages |= changed.keys() | removed
    # evidence: new rows, deleted ones (a count that does not add up), moved ones (a merge)
    if now[OBS : OBS_MAX + 1] != before[OBS : OBS_MAX + 1] or removed:
        new = await conn.fetch(_NEW_OBS, chat_id, before[OBS_MAX])
        if now[OBS] == len(state.observations) + len(new):
            _obs_diff(state, list(new), set(), pages)
        else:
            _obs_diff(state, list(await conn.fetch(_OBS, chat_id)), None, pages)
    if changed:
        scope = set(changed)
        _obs_diff(state, list(await conn.fetch(_OBS_OF, chat_id, list(scope))), scope, pages)
    # relations: read again after any pattern change too (a merge moves them in place)
    if now[RELS : REL_MAX + 1] != before[RELS : REL_MAX + 1] or removed or changed:
        rels = [Rel(*r.values()) for r in await conn.fetch(RELATIONS_SQL, chat_id)]
        for r in set(rels) ^ set(state.relations):
            pages |= {r.from_id, r.to_id}
        state.relations = rels
    if now[AUDIT : AUDIT_MAX + 1] != before[AUDIT : AUDIT_MAX + 1] or removed:
        new_audit = await conn.fetch(_NEW_AUDIT, chat_id, before[AUDIT_MAX])
        rows = new_audit
        if removed or now[AUDIT] != len(state.audit) + len(new_audit):
            rows = await conn.fetch(AUDIT_SQL, chat_id)
            fresh = {r["id"] for r in rows}
            for aid in [a for a in state.audit if a not in fresh]:
                pages.add(state.audit.pop(aid).pattern_id)
        for r in rows:
            a = Audit(*r.values())
            if state.audit.get(a.id) != a:
                pages.add(a.pattern_id)
                state.audit[a.id] = a
        pages |= {a.pattern_id for a in state.audit.values() if a.other_pattern_id in removed}
    if now[AUDIT_MAX + 1 :] != before[AUDIT_MAX + 1 :]:
        state.episodes = tuple(
            Episode(*r.values()) for r in await conn.fetch(EPISODES_SQL, chat_id)
        )
    live = frozenset(p for p in pages if p in state.patterns)
    return Changes(live, frozenset(remove), bool(changed or removed))


def changed_days(old: dict[date, list[str]], new: dict[date, list[str]]) -> set[date]:
    """The days whose lines after the conversation differ (or appear, or go)."""
    return {d for d in old.keys() | new.keys() if old.get(d) != new.get(d)}
