"""The conversation store: ``chat_messages`` rows (user, assistant and tool_result).

A turn stores its user row at once, in its own transaction (:meth:`SqlConversationStore.
add_user`, or :meth:`~SqlConversationStore.add_user_and_recent` with the recent window in the
same round trip), keyed by the source update's ``external_message_id`` so re-running the turn after
a crash finds the same row instead of adding a second one. The assistant and tool_result rows
are written by :meth:`~SqlConversationStore.add_rows` inside the chat actor's outbox
transaction. Assistant rows keep their ``tool_use`` blocks in ``tool_calls``; tool_result rows
keep the (already truncated) result with the ``tool_call_id`` it answers.

:func:`repair_rows` drops broken tool pairs (a crash mid-loop, a window cut between a call and
its result) and :func:`render_tool_result` puts a stored result inside ``<untrusted>`` tags for
any prompt (the recent window, the compactor's extraction prompt).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, Protocol

import attrs

from memory.untrusted import wrap_untrusted
from runtime.db import Connection, Queries

Role = Literal["user", "assistant", "tool_result"]
#: the rows of a chat the agent reads as its recent window, at most
DEFAULT_WINDOW_LIMIT = 120  # WINDOW_MESSAGES' default (memory/settings.py)


def _object(value: Mapping[str, Any]) -> dict[str, Any]:
    return dict(value)


def _aware(_: object, __: object, value: datetime) -> None:
    if value.tzinfo is None:
        raise ValueError("ChatMessage.created_at must be timezone-aware")


@attrs.frozen
class ToolCall:
    """One ``tool_use`` block of an assistant row."""

    id: str
    name: str
    input: Mapping[str, Any] = attrs.field(converter=_object)

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "input": dict(self.input)}


@attrs.frozen(kw_only=True)
class ChatMessage:
    """One ``chat_messages`` row; ``id`` is None until stored."""

    role: Role
    content: str
    created_at: datetime = attrs.field(validator=_aware)
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    tool_name: str | None = None
    external_message_id: str | None = None
    id: int | None = None
    #: a routine's message (``source='routine'``): the routine's name and the summary the
    #: window shows instead of ``content`` (the full text, for recall)
    routine_name: str | None = None
    summary: str | None = None

    @property
    def is_routine(self) -> bool:
        return self.routine_name is not None and self.summary is not None


class ConversationStore(Protocol):
    """What the agent needs of ``chat_messages`` (SQL in production, memory in timer tests)."""

    async def add_user(
        self, chat_id: int, text: str, external_id: str | None, created_at: datetime
    ) -> int:
        """Store the user row now (committed); the same ``external_id`` gives the same row."""
        ...

    async def recent(self, chat_id: int, limit: int) -> list[ChatMessage]:
        """The last ``limit`` uncompacted rows, oldest first, pairs repaired."""
        ...

    async def add_user_and_recent(
        self, chat_id: int, text: str, external_id: str | None, created_at: datetime, limit: int
    ) -> tuple[int, list[ChatMessage]]:
        """:meth:`add_user`, then :meth:`recent` (``limit`` rows, the user row included)
        without the user row: its id and the window before it."""
        ...

    async def add_rows(self, conn: Connection, chat_id: int, rows: Sequence[ChatMessage]) -> None:
        """Store assistant/tool_result rows on ``conn`` (the outbox transaction)."""
        ...


# --- pure helpers ------------------------------------------------------------------------------


def repair_rows(rows: Iterable[ChatMessage]) -> list[ChatMessage]:
    """``rows`` with every broken tool pair removed.

    A tool call survives only when a tool_result row answering it follows; a tool_result
    survives only when it answers an earlier call (the first answer wins). An assistant row
    left with neither text nor calls is dropped.
    """
    rows = list(rows)
    called: set[str] = set()
    answered: set[str] = set()
    for row in rows:
        if row.role == "assistant":
            called.update(c.id for c in row.tool_calls)
        elif row.role == "tool_result" and row.tool_call_id in called:
            answered.add(row.tool_call_id)
    out: list[ChatMessage] = []
    kept_results: set[str] = set()
    for row in rows:
        if row.role == "assistant" and row.tool_calls:
            calls = tuple(c for c in row.tool_calls if c.id in answered)
            if calls != row.tool_calls:
                if not calls and not row.content.strip():
                    continue
                row = attrs.evolve(row, tool_calls=calls)
        elif row.role == "tool_result":
            if row.tool_call_id not in answered or row.tool_call_id in kept_results:
                continue
            kept_results.add(row.tool_call_id)
        out.append(row)
    return out


def render_tool_result(row: ChatMessage) -> str:
    """A stored tool result inside ``<untrusted source="<tool name>">`` tags, for prompts."""
    return wrap_untrusted(row.tool_name or "tool", row.content)


def render_tool_call(call: ToolCall) -> str:
    """``name {"arg": ...}``: a tool call as one line of text."""
    return f"{call.name} {json.dumps(dict(call.input), ensure_ascii=False, sort_keys=True)}"


# --- SQL -----------------------------------------------------------------------------------------

_INSERT_USER = """
INSERT INTO chat_messages (chat_id, external_message_id, role, content, created_at)
VALUES ($1, $2, 'user', $3, $4)
ON CONFLICT (chat_id, external_message_id) DO UPDATE SET content = EXCLUDED.content
RETURNING id
"""
_INSERT_ROWS = """
INSERT INTO chat_messages (chat_id, external_message_id, role, content, tool_calls,
                           tool_call_id, tool_name, created_at)
SELECT $1, r.ext, r.role, r.content, r.calls::jsonb, r.call_id, r.tool, r.at
FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
            $8::timestamptz[]) WITH ORDINALITY AS r(ext, role, content, calls, call_id, tool, at, n)
ORDER BY r.n
"""
_RECENT = """
SELECT * FROM (
    SELECT id, role, content, tool_calls, tool_call_id, tool_name, external_message_id,
           created_at, routine_name, summary
    FROM chat_messages
    WHERE chat_id = $1 AND compacted_at IS NULL
    ORDER BY created_at DESC, id DESC
    LIMIT $2
) w ORDER BY created_at, id
"""

#: commit without waiting for the WAL flush (see below; never inside a caller's transaction)
ASYNC_COMMIT = "set_config('synchronous_commit', 'off', true)"
# the user row and the window before it in one statement: the window reads the snapshot taken
# before the insert, and leaves out the row when a re-run finds it already stored. It commits
# without waiting for the WAL flush: the turn's reply commit (synchronous, later in the same
# WAL) makes it durable; a database crash before that loses it with the turn, and the re-run
# stores it again
_USER_AND_WINDOW = """
WITH ins AS (
    INSERT INTO chat_messages (chat_id, external_message_id, role, content, created_at)
    VALUES ($1, $2, 'user', $3, $4)
    ON CONFLICT (chat_id, external_message_id) DO UPDATE SET content = EXCLUDED.content
    RETURNING id, {commit}
)
SELECT ins.id AS user_id, w.* FROM ins LEFT JOIN LATERAL (
    SELECT id, role, content, tool_calls, tool_call_id, tool_name, external_message_id,
           created_at, routine_name, summary
    FROM chat_messages
    WHERE chat_id = $1 AND compacted_at IS NULL AND id <> ins.id
    ORDER BY created_at DESC, id DESC
    LIMIT $5
) w ON TRUE
ORDER BY w.created_at, w.id
"""


def _calls_json(row: ChatMessage) -> str | None:
    return json.dumps([c.as_json() for c in row.tool_calls]) if row.tool_calls else None


def _calls(raw: Any) -> tuple[ToolCall, ...]:
    data = json.loads(raw) if isinstance(raw, str) else raw
    if not isinstance(data, list):
        return ()
    return tuple(
        ToolCall(str(c["id"]), str(c["name"]), c.get("input") or {})
        for c in data
        if isinstance(c, Mapping) and "id" in c and "name" in c
    )


def from_record(record: Any) -> ChatMessage:
    """A ``chat_messages`` record (with the columns of the window query) as a message."""
    return ChatMessage(
        id=record["id"],
        role=record["role"],
        content=record["content"],
        created_at=record["created_at"],
        tool_calls=_calls(record["tool_calls"]),
        tool_call_id=record["tool_call_id"],
        tool_name=record["tool_name"],
        external_message_id=record["external_message_id"],
        routine_name=record.get("routine_name"),
        summary=record.get("summary"),
    )


async def insert_rows(conn: Queries, chat_id: int, rows: Sequence[ChatMessage]) -> None:
    """Insert ``rows`` in order (ids increase in that order); one statement."""
    if not rows:
        return
    await conn.execute(
        _INSERT_ROWS,
        chat_id,
        [r.external_message_id for r in rows],
        [r.role for r in rows],
        [r.content for r in rows],
        [_calls_json(r) for r in rows],
        [r.tool_call_id for r in rows],
        [r.tool_name for r in rows],
        [r.created_at for r in rows],
    )


_INSERT_ROUTINE = """
INSERT INTO chat_messages (chat_id, role, content, created_at, source, routine_name, summary)
VALUES ($1, 'assistant', $2, $3, 'routine', $4, $5)
"""


async def insert_routine_message(
    conn: Queries, chat_id: int, name: str, content: str, summary: str, at: datetime
) -> None:
    """Store what routine ``name`` sent: an assistant row with the full ``content`` (recall
    finds it) and the ``summary`` the window shows (seed 004, "Phase 2.5")."""
    await conn.execute(_INSERT_ROUTINE, chat_id, content, at, name, summary)


async def recent_rows(db: Queries, chat_id: int, limit: int) -> list[ChatMessage]:
    """The last ``limit`` uncompacted rows of the chat, oldest first, as stored (not repaired:
    their count and times are what the compaction rule looks at)."""
    return [from_record(r) for r in await db.fetch(_RECENT, chat_id, limit)]


async def recent_window(db: Queries, chat_id: int, limit: int) -> list[ChatMessage]:
    """The last ``limit`` uncompacted rows of the chat, oldest first, pairs repaired."""
    return repair_rows(await recent_rows(db, chat_id, limit))


@attrs.frozen
class SqlConversationStore:
    """:class:`ConversationStore` on PostgreSQL."""

    db: Queries

    async def add_user(
        self, chat_id: int, text: str, external_id: str | None, created_at: datetime
    ) -> int:
        row_id = await self.db.fetchval(_INSERT_USER, chat_id, external_id, text, created_at)
        return int(row_id)

    async def recent(self, chat_id: int, limit: int) -> list[ChatMessage]:
        return await recent_window(self.db, chat_id, limit)

    async def add_user_and_recent(
        self, chat_id: int, text: str, external_id: str | None, created_at: datetime, limit: int
    ) -> tuple[int, list[ChatMessage]]:
        """One round trip (the insert commits with the statement)."""
        commit = "NULL" if isinstance(self.db, Connection) else ASYNC_COMMIT
        recs = await self.db.fetch(
            _USER_AND_WINDOW.format(commit=commit),
            chat_id,
            external_id,
            text,
            created_at,
            max(0, limit - 1),
        )
        window = repair_rows(from_record(r) for r in recs if r["id"] is not None)
        return int(recs[0]["user_id"]), window

    async def add_rows(self, conn: Connection, chat_id: int, rows: Sequence[ChatMessage]) -> None:
        await insert_rows(conn, chat_id, rows)
