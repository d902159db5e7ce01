"""The pattern side of an incremental vault write: what changed in a chat's patterns, evidence,
relations, audit rows and episodes since the writer's last write, read by id and ``updated_at``
ranges (not the whole chat), applied to the writer's :class:`PatternState`, and which files it
affects: the pages of the patterns changed or whose evidence, relations or audit changed, the
pages of removed patterns (deleted), ``MEMORY.md`` when any pattern changed, and the days whose
lines after the conversation changed (recomputed from the state, compared with the last ones).

A count that does not add up (a row committed late below the last largest id) gives up: the
caller then writes the whole chat. Patterns are read again from :func:`read_since` of the last
write: the start of the oldest transaction then writing (its ``now()``, which it gives
``updated_at``), less :data:`MARGIN`, so one that began before the last write and committed
after it is read by the next.
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
from memory.vault.render import LineMemo, page_path
from runtime.db import Queries

_COLUMNS = (
    "id, kind, status, content, strength, confidence, times_seen, first_seen, last_seen, "
    "created_at, source, is_core_tenet, occurs_on, occurs_at, status_reason"
)
_CHANGED = f"""
SELECT {_COLUMNS} FROM patterns
WHERE chat_id = $1 AND (updated_at >= $2 OR $2::timestamptz IS NULL OR id > $3)
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
#: seconds subtracted from :func:`read_since` (a transaction that commits between the
#: snapshot and the read of pg_stat_activity, besides clocks)
MARGIN = 5.0
#: the start of the oldest transaction writing in this database (one with a transaction id;
#: other roles' show NULL: ignored), or now
_SINCE = """
SELECT least(now(), min(xact_start)) - make_interval(secs => $1) FROM pg_stat_activity
WHERE datname = current_database() AND backend_xid IS NOT NULL
"""


async def read_since(conn: Queries) -> datetime:
    """From when the next write reads changed patterns again (see the module doc); the first
    statement of the write's snapshot."""
    since = await conn.fetchval(_SINCE, MARGIN)
    assert isinstance(since, datetime)
    return since


#: a chat's signature: (count, largest id, sum of ids) of each of these tables' rows of the
#: chat, in this order, then its patterns' latest ``updated_at``
TABLES = (
    "chat_messages",
    "patterns",
    "pattern_observations",
    "pattern_relations",
    "pattern_audit",
    "episodes",
)
MSG, PAT, OBS, REL, AUD, EPI, UPDATED = range(7)
_SIGNATURE = " UNION ALL ".join(
    f"SELECT {i} AS t, count(*) AS n, coalesce(max(id), 0) AS top, coalesce(sum(id), 0) AS total "
    f"FROM {table} WHERE chat_id = $1"
    for i, table in enumerate(TABLES)
)
_UPDATED = "SELECT max(updated_at) FROM patterns WHERE chat_id = $1"

Signature = tuple[Any, ...]


async def read_signature(conn: Queries, chat_id: int) -> Signature:
    """The chat's signature (index-only counts and sums, an index lookup)."""
    rows = sorted(await conn.fetch(_SIGNATURE, chat_id), key=lambda r: r["t"])
    counts = tuple((int(r["n"]), int(r["top"]), int(r["total"])) for r in rows)
    return (*counts, await conn.fetchval(_UPDATED, chat_id))


def adds_up(before: tuple[int, int, int], now: tuple[int, int, int], new: list[int]) -> bool:
    """Whether a table's (count, largest id, sum of ids) went from ``before`` to ``now`` by
    adding the rows ``new`` (above ``before``'s largest id) and nothing else."""
    return now[0] == before[0] + len(new) and now[2] == before[2] + sum(new)


@attrs.define
class PatternState:
    """The chat's pattern-side rows as the vault last showed them (evidence text aside)."""

    patterns: dict[int, Pattern] = attrs.field(factory=dict)
    observations: dict[int, tuple[int, datetime]] = attrs.field(factory=dict)
    relations: list[Rel] = attrs.field(factory=list)
    audit: dict[int, Audit] = attrs.field(factory=dict)
    episodes: tuple[Episode, ...] = ()
    #: :func:`read_since` at the last write that saw a change
    since: datetime | None = None
    #: each pattern's MEMORY.md line, formatted again only when it changed
    memo: LineMemo = attrs.field(factory=LineMemo)

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
    conn: Queries, chat_id: int, state: PatternState, before: Signature, now: Signature
) -> Changes | None:
    """Read what changed between the signatures ``before`` and ``now`` into ``state``; None
    when it cannot be told apart from the whole chat (then write the whole chat)."""
    pages: set[int] = set()
    remove: set[str] = set()
    changed: dict[int, Pattern] = {}
    if now[PAT] != before[PAT] or now[UPDATED] != before[UPDATED]:
        rows = await conn.fetch(_CHANGED, chat_id, state.since, before[PAT][1])
        for r in rows:
            p = Pattern(*r.values())
            if state.patterns.get(p.id) != p:
                changed[p.id] = p
    added = [i for i in changed if i not in state.patterns]
    removed: set[int] = set()
    if not adds_up(before[PAT], now[PAT], added):
        ids = {r["id"] for r in await conn.fetch(_IDS, chat_id)}
        if any(i not in state.patterns and i not in changed for i in ids):
            return None  # a pattern committed late with an older updated_at
        removed = set(state.patterns) - ids
    for pid in removed:
        remove.add(page_path(state.patterns.pop(pid)))
        state.memo.drop(pid)
    for pid, p in changed.items():
        old = state.patterns.get(pid)
        if old is not None and page_path(old) != page_path(p):
            remove.add(page_path(old))
        state.patterns[pid] = p
    pages |= changed.keys() | removed
    # evidence: new rows, deleted ones (a count that does not add up), moved ones (a merge)
    if now[OBS] != before[OBS] or removed:
        new = await conn.fetch(_NEW_OBS, chat_id, before[OBS][1])
        if adds_up(before[OBS], now[OBS], [r["id"] for r in new]):
            _obs_diff(state, list(new), set(), pages)
        else:
            _obs_diff(state, list(await conn.fetch(_OBS, chat_id)), None, pages)
    if changed:
        scope = set(changed)
        _obs_diff(state, list(await conn.fetch(_OBS_OF, chat_id, list(scope))), scope, pages)
    # relations: read again after any pattern change too (a merge moves them in place)
    if now[REL] != before[REL] or removed or changed:
        rels = [Rel(*r.values()) for r in await conn.fetch(RELATIONS_SQL, chat_id)]
        for r in set(rels) ^ set(state.relations):
            pages |= {r.from_id, r.to_id}
        state.relations = rels
    if now[AUD] != before[AUD] or removed:
        new_audit = await conn.fetch(_NEW_AUDIT, chat_id, before[AUD][1])
        rows = new_audit
        if removed or not adds_up(before[AUD], now[AUD], [r["id"] for r in new_audit]):
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
    if now[EPI] != before[EPI]:
        state.episodes = tuple(
            Episode(*r.values()) for r in await conn.fetch(EPISODES_SQL, chat_id)
        )
    live = frozenset(p for p in pages if p in state.patterns)
    return Changes(live, frozenset(remove), bool(changed or removed))


def changed_days(old: dict[date, list[str]], new: dict[date, list[str]]) -> set[date]:
    """The days whose lines after the conversation differ (or appear, or go)."""
    return {d for d in old.keys() | new.keys() if old.get(d) != new.get(d)}
