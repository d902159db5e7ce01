"""The vault writer's incremental write: only the files that what changed since its last write
for the chat affects, so the write lag after a turn does not grow with the size of the chat.

The writer keeps a :class:`ChatState` per chat: a *signature* of the chat's rows read with its
last write (count, largest id and sum of ids of its messages, patterns, observations,
relations, audit rows and episodes: index-only scans; its patterns' latest ``updated_at``: an
index lookup, :func:`memory.vault.delta.read_signature`), the message ids shown
on each local day, each day's lines after the conversation (episodes, pattern changes), and the
pattern side without evidence text (:class:`memory.vault.delta.PatternState`). A write reads the
signature again in one read-only snapshot:

* unchanged: nothing is written;
* messages added above the last largest id: those days' pages, rendered again from their
  messages (read by id) and their kept lines; messages deleted (a /forget, the retention
  purge): the days that showed them;
* the pattern side changed (a compaction, a control, a forget): what
  :func:`memory.vault.delta.apply_delta` finds: the pages of the patterns changed or whose
  evidence, relations or audit changed, removed pages deleted, ``MEMORY.md`` when a pattern
  changed (rendered from the kept patterns), and the days whose kept lines changed;
* a count that does not add up (a row committed late below a largest id), the first write
  after start, a failed write before, or a write the periodic sweep asked for (``full_due``;
  it also catches a row changed in place without a signature change, e.g. a photo's
  description added to its message after the turn): the whole chat
  (:func:`memory.vault.write.render_and_sync`), which rebuilds the state.

Every file is rendered by the functions a rebuild uses, from the same rows, so what an
incremental write leaves is what ``engram vault rebuild`` writes, byte for byte.
"""

from __future__ import annotations

from datetime import date
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import trio

from memory.vault.data import ChatData, Message, Observation, load_chat, message_from_row
from memory.vault.delta import (
    AUD,
    EPI,
    EVIDENCE,
    MSG,
    PAT,
    Changes,
    PatternState,
    adds_up,
    apply_delta,
    changed_days,
    read_signature,
    read_since,
)
from memory.vault.files import SyncStats, write_files
from memory.vault.render import (
    day_path,
    day_tails,
    local_day,
    messages_by_day,
    render_day,
    render_memory,
    render_patterns,
)
from memory.vault.settings import chat_folder
from memory.vault.write import render_and_sync
from runtime.db import Database, Queries

_NEW_MESSAGES = """
SELECT id, role, content, created_at, tool_calls, routine_name
FROM chat_messages WHERE chat_id = $1 AND id > $2 ORDER BY created_at, id
"""
_DAY_MESSAGES = """
SELECT id, role, content, created_at, tool_calls, routine_name
FROM chat_messages WHERE chat_id = $1 AND id = ANY($2::bigint[])
  AND role IN ('user', 'assistant')
ORDER BY created_at, id
"""
_IDS_UP_TO = "SELECT id FROM chat_messages WHERE chat_id = $1 AND id <= $2"
_HIDDEN = "SELECT id FROM chat_messages WHERE chat_id = $1 AND role NOT IN ('user', 'assistant')"
_SHOWN = ("user", "assistant")


@attrs.define
class ChatState:
    """What the writer knows of one chat's vault since its last write (see the module doc)."""

    signature: tuple[Any, ...] | None = None
    day_ids: dict[date, list[int]] = attrs.field(factory=dict)
    tails: dict[date, list[str]] = attrs.field(factory=dict)
    #: the ids of the chat's messages not shown (tool results)
    hidden: set[int] = attrs.field(factory=set)
    patterns: PatternState = attrs.field(factory=PatternState)
    #: how many whole writes this state had (the first, fallbacks, the sweep's)
    whole_writes: int = 0
    #: a digest of each file last written (unchanged files are not read back)
    known: dict[str, bytes] = attrs.field(factory=dict)
    #: the next write is a whole one (the periodic sweep sets it)
    full_due: bool = False

    def reset(self) -> None:
        """Forget everything: the next write is a whole one."""
        self.signature = None
        self.day_ids.clear()
        self.tails.clear()
        self.hidden.clear()
        self.patterns = PatternState()
        self.known.clear()


@attrs.frozen
class _Plan:
    """An incremental write: the signature read, each affected day's messages, and what the
    pattern side changed (None: nothing) with the evidence of the pages to render."""

    signature: tuple[Any, ...]
    days: dict[date, list[Message]]
    changes: Changes | None = None
    evidence: tuple[Observation, ...] = ()


def _view(state: ChatState, timezone: str, evidence: tuple[Observation, ...] = ()) -> ChatData:
    """The state as the data a rebuild renders from (messages aside; evidence: ``evidence``
    with text, else stubs)."""
    patterns, stubs, audit = state.patterns.view()
    return ChatData(
        chat_id=0,
        timezone=timezone,
        episodes=state.patterns.episodes,
        patterns=patterns,
        observations=evidence or stubs,
        relations=tuple(state.patterns.relations),
        audit=audit,
    )


async def _plan(
    conn: Queries, chat_id: int, timezone: str, state: ChatState, now: tuple[Any, ...]
) -> _Plan | None:
    """What to render again (see the module doc); None: write the whole chat."""
    before = state.signature
    assert before is not None
    if not (now[PAT][0] or now[AUD][0] or now[EPI][0]):
        return None  # maybe nothing left to show (an erased chat): its folder is not made again
    new = await conn.fetch(_NEW_MESSAGES, chat_id, before[MSG][1])
    ids: dict[date, list[int]] = {}
    if not adds_up(before[MSG], now[MSG], [r["id"] for r in new]):  # a message deleted
        kept = {r["id"] for r in await conn.fetch(_IDS_UP_TO, chat_id, before[MSG][1])}
        if kept - state.hidden - {i for shown in state.day_ids.values() for i in shown}:
            return None  # one committed late below the last largest id
        state.hidden &= kept
        for day, shown in state.day_ids.items():
            if any(i not in kept for i in shown):
                ids[day] = [i for i in shown if i in kept]
    for r in new:
        if r["role"] in _SHOWN:
            day = local_day(timezone, r["created_at"])
            ids.setdefault(day, list(state.day_ids.get(day, []))).append(r["id"])
        else:
            state.hidden.add(r["id"])
    changes: Changes | None = None
    evidence: tuple[Observation, ...] = ()
    if now[MSG + 1 :] != before[MSG + 1 :]:
        changes = await apply_delta(conn, chat_id, state.patterns, before, now)
        if changes is None:
            return None
        view = _view(state, timezone)
        tails = await trio.to_thread.run_sync(day_tails, view, state.patterns.memo)
        for day in changed_days(state.tails, tails):
            ids.setdefault(day, list(state.day_ids.get(day, [])))
        state.tails = tails
        if changes.pages:
            rows = await conn.fetch(EVIDENCE, chat_id, sorted(changes.pages))
            evidence = tuple(Observation(*r.values()) for r in rows)
    days: dict[date, list[Message]] = {}
    for day, wanted in ids.items():
        rows = await conn.fetch(_DAY_MESSAGES, chat_id, wanted) if wanted else []
        days[day] = [message_from_row(r) for r in rows]
    return _Plan(now, days, changes, evidence)


def _full(
    data: ChatData, folder: Path, state: ChatState, signature: tuple[Any, ...], hidden: set[int]
) -> SyncStats:
    """The whole chat rendered and synced, the state rebuilt from it (blocking)."""
    state.reset()
    state.whole_writes += 1
    memo = state.patterns.memo
    stats = render_and_sync(data, folder, known=state.known, memo=memo)
    if stats.written + stats.unchanged:  # a chat with something to show
        state.day_ids = {d: [m.id for m in ms] for d, ms in messages_by_day(data).items()}
        state.tails = day_tails(data, memo)
        state.hidden = hidden
        state.patterns = PatternState(
            patterns={p.id: p for p in data.patterns},
            observations={o.id: (o.pattern_id, o.observed_at) for o in data.observations},
            relations=list(data.relations),
            audit={a.id: a for a in data.audit},
            episodes=data.episodes,
            memo=memo,
        )
        state.signature = signature
    return stats


def _apply(plan: _Plan, timezone: str, folder: Path, state: ChatState) -> SyncStats:
    """The plan's files rendered and written, the state advanced (blocking)."""
    files: dict[str, str] = {}
    remove: set[str] = set()
    for day, messages in plan.days.items():
        state.day_ids[day] = [m.id for m in messages]
        if messages or day in state.tails:
            files[day_path(day)] = render_day(timezone, day, messages, state.tails.get(day, []))
        else:  # nothing left on that day
            remove.add(day_path(day))
            state.day_ids.pop(day, None)
    if plan.changes is not None:
        data = _view(state, timezone, plan.evidence)
        files.update(render_patterns(data, only=plan.changes.pages))
        if plan.changes.memory:
            files["MEMORY.md"] = render_memory(data, state.patterns.memo)
        remove |= plan.changes.remove
    stats = write_files(folder, files, state.known, remove)
    state.signature = plan.signature
    return stats


async def write_chat_incremental(
    db: Database,
    root: Path,
    chat_id: int,
    timezone: str,
    state: ChatState,
) -> SyncStats:
    """Bring the chat's vault folder under ``root`` up to date, touching only what changed
    since ``state`` (see the module doc); a failure leaves ``state`` empty (the next write is
    a whole one)."""
    folder = chat_folder(root, chat_id)
    # the folder gone (erased, removed by hand): only a whole write may make it again
    due, state.full_due = state.full_due or not folder.is_dir(), False
    try:
        plan: _Plan | None = None
        data: ChatData | None = None
        hidden: set[int] = set()
        async with db.transaction() as conn:
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            since = await read_since(conn)  # first: at the snapshot's start
            signature = await read_signature(conn, chat_id)
            if state.signature is not None and not due:
                if signature == state.signature:
                    return SyncStats()
                plan = await _plan(conn, chat_id, timezone, state, signature)
            if plan is None:
                data = await load_chat(conn, chat_id, timezone)
                hidden = {r["id"] for r in await conn.fetch(_HIDDEN, chat_id)}
        if plan is not None:
            job = partial(_apply, plan, timezone, folder, state)
            stats = await trio.to_thread.run_sync(job)
        else:
            assert data is not None
            job = partial(_full, data, folder, state, signature, hidden)
            stats = await trio.to_thread.run_sync(job)
        state.patterns.since = since
        return stats
    except BaseException:
        state.reset()
        raise
