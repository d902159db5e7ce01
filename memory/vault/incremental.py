"""The vault writer's incremental write: after a turn, only the daily pages of the days that
got new messages, so the write lag after a turn does not grow with the size of the chat.

The writer keeps a :class:`ChatState` per chat: a *signature* of the chat's rows read with its
last write (count and largest id of its messages, observations, relations, audit rows and
episodes; count, largest id and latest ``updated_at`` of its patterns: index lookups and
index-only counts), the message ids shown on each local day, and each day's lines after the
conversation (episodes, pattern changes), which only change with those rows. A write reads the
signature again in one read-only snapshot:

* unchanged: nothing is written;
* only messages added above the last largest id (the count says none was deleted or committed
  late below it): those days' pages are rendered again from their messages (read by id) and
  their kept lines, with the same functions as a rebuild (:func:`memory.vault.render.render_day`);
* anything else (a compaction, a /forget, a pattern or episode changed, a message deleted), the
  first write after start, a failed write before, or a write the periodic sweep asked for
  (``full_due``; it also catches a row changed in place without a signature change,
  e.g. a photo's description added to its message after the turn): the whole chat
  (:func:`memory.vault.write.render_and_sync`), which rebuilds the state.

So what an incremental write leaves is what ``engram vault rebuild`` writes, byte for byte.
"""

from __future__ import annotations

from datetime import date
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import trio

from memory.vault.data import ChatData, Message, load_chat, message_from_row
from memory.vault.files import SyncStats, write_files
from memory.vault.render import day_path, day_tails, local_day, messages_by_day, render_day
from memory.vault.settings import chat_folder
from memory.vault.write import render_and_sync
from runtime.db import Database, Queries

_SIGNATURE = """
SELECT (SELECT count(*) FROM chat_messages WHERE chat_id = $1) AS messages,
       (SELECT coalesce(max(id), 0) FROM chat_messages WHERE chat_id = $1) AS message_max,
       (SELECT count(*) FROM patterns WHERE chat_id = $1) AS patterns,
       (SELECT coalesce(max(id), 0) FROM patterns WHERE chat_id = $1) AS pattern_max,
       (SELECT max(updated_at) FROM patterns WHERE chat_id = $1) AS pattern_updated,
       (SELECT count(*) FROM pattern_observations WHERE chat_id = $1) AS observations,
       (SELECT coalesce(max(id), 0) FROM pattern_observations WHERE chat_id = $1) AS obs_max,
       (SELECT count(*) FROM pattern_relations WHERE chat_id = $1) AS relations,
       (SELECT coalesce(max(id), 0) FROM pattern_relations WHERE chat_id = $1) AS rel_max,
       (SELECT count(*) FROM pattern_audit WHERE chat_id = $1) AS audit,
       (SELECT coalesce(max(id), 0) FROM pattern_audit WHERE chat_id = $1) AS audit_max,
       (SELECT count(*) FROM episodes WHERE chat_id = $1) AS episodes,
       (SELECT coalesce(max(id), 0) FROM episodes WHERE chat_id = $1) AS episode_max
"""
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
_SHOWN = ("user", "assistant")


@attrs.define
class ChatState:
    """What the writer knows of one chat's vault since its last write (see the module doc)."""

    signature: tuple[Any, ...] | None = None
    day_ids: dict[date, list[int]] = attrs.field(factory=dict)
    tails: dict[date, list[str]] = attrs.field(factory=dict)
    #: a digest of each file last written (unchanged files are not read back)
    known: dict[str, bytes] = attrs.field(factory=dict)
    #: the next write is a whole one (the periodic sweep sets it)
    full_due: bool = False

    def reset(self) -> None:
        """Forget everything: the next write is a whole one."""
        self.signature = None
        self.day_ids.clear()
        self.tails.clear()
        self.known.clear()


@attrs.frozen
class _Days:
    """An incremental write's plan: the signature read and each affected day's messages."""

    signature: tuple[Any, ...]
    days: dict[date, list[Message]]


async def _signature(conn: Queries, chat_id: int) -> tuple[Any, ...]:
    row = await conn.fetchrow(_SIGNATURE, chat_id)
    assert row is not None
    return tuple(row.values())


async def _plan(
    conn: Queries, chat_id: int, timezone: str, state: ChatState, now: tuple[Any, ...]
) -> _Days | None:
    """The days to render again when only messages were added since ``state``; None when
    anything else changed (a whole write)."""
    before = state.signature
    assert before is not None
    if now[2:] != before[2:] or now[1] < before[1]:
        return None
    new = await conn.fetch(_NEW_MESSAGES, chat_id, before[1])
    if now[0] != before[0] + len(new):  # a message deleted, or one committed late below
        return None
    ids: dict[date, list[int]] = {}
    for r in new:
        if r["role"] in _SHOWN:
            day = local_day(timezone, r["created_at"])
            ids.setdefault(day, list(state.day_ids.get(day, []))).append(r["id"])
    days: dict[date, list[Message]] = {}
    for day, wanted in ids.items():
        rows = await conn.fetch(_DAY_MESSAGES, chat_id, wanted)
        days[day] = [message_from_row(r) for r in rows]
    return _Days(now, days)


def _full(data: ChatData, folder: Path, state: ChatState, signature: tuple[Any, ...]) -> SyncStats:
    """The whole chat rendered and synced, the state rebuilt from it (blocking)."""
    state.reset()
    stats = render_and_sync(data, folder, known=state.known)
    if stats.written + stats.unchanged:  # a chat with something to show
        state.day_ids = {d: [m.id for m in ms] for d, ms in messages_by_day(data).items()}
        state.tails = day_tails(data)
        state.signature = signature
    return stats


def _days(plan: _Days, timezone: str, folder: Path, state: ChatState) -> SyncStats:
    """The affected days' pages written, the state advanced (blocking)."""
    files = {
        day_path(day): render_day(timezone, day, messages, state.tails.get(day, []))
        for day, messages in plan.days.items()
    }
    stats = write_files(folder, files, state.known)
    for day, messages in plan.days.items():
        state.day_ids[day] = [m.id for m in messages]
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
    due, state.full_due = state.full_due, False
    try:
        plan: _Days | None = None
        async with db.transaction() as conn:
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            signature = await _signature(conn, chat_id)
            if state.signature is not None and not due:
                if signature == state.signature:
                    return SyncStats()
                plan = await _plan(conn, chat_id, timezone, state, signature)
            data = None if plan is not None else await load_chat(conn, chat_id, timezone)
        if plan is not None:
            job = partial(_days, plan, timezone, folder, state)
            return await trio.to_thread.run_sync(job)
        assert data is not None
        return await trio.to_thread.run_sync(partial(_full, data, folder, state, signature))
    except BaseException:
        state.reset()
        raise
