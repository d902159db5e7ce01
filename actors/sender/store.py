"""What the sender (:mod:`actors.sender.actor`) works with: the outbox as a :class:`OutboxStore`
(:class:`DbOutbox` over :mod:`actors.queues.outbox`; tests use memory), the part of the Bot API
client it calls (:class:`MessageClient`), and how a row's text becomes its chunks
(:func:`plan_chunks`, deterministic so ``chunks_sent`` indexes into it; :func:`plain_fallback`
when Telegram cannot parse a chunk); how one chunk of a row goes out (:func:`send_chunk`: a
message, its keyboard on the last chunk, or the edit of a sent message).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from actors.queues import outbox, sending
from actors.queues.outbox import OutboxRow
from actors.telegram.chunking import (
    MAX_MESSAGE_UTF16,
    ChunkPlan,
    html_to_text,
    plan_reply,
    split_text,
    utf16_len,
    visible_text,
)
from actors.telegram.errors import BadRequest, MalformedHtml
from runtime.db import Queries

__all__ = [
    "ChunkTransport",
    "DbOutbox",
    "MessageClient",
    "OutboxStore",
    "plain_fallback",
    "plan_chunks",
    "plan_row",
    "send_chunk",
]


class MessageClient(Protocol):
    """The part of the Bot API client the sender uses (``BotApiClient`` satisfies it)."""

    async def send_message(
        self,
        chat_id: int | str,
        text: str,
        parse_mode: str | None = None,
        *,
        reply_to_message_id: int | None = None,
        reply_markup: Mapping[str, Any] | None = None,
    ) -> int: ...

    async def edit_message_text(
        self,
        chat_id: int | str,
        message_id: int,
        text: str,
        parse_mode: str | None = None,
        *,
        reply_markup: Mapping[str, Any] | None = None,
    ) -> None: ...

    async def edit_message_reply_markup(
        self, chat_id: int | str, message_id: int, reply_markup: Mapping[str, Any] | None = None
    ) -> None: ...


@runtime_checkable
class OutboxStore(Protocol):
    """Outbox access the sender needs (see :mod:`actors.queues.outbox` for each step)."""

    async def chats_with_pending(self) -> list[int]: ...

    async def next_pending(self, chat_id: int, limit: int) -> list[OutboxRow]: ...

    async def mark_in_flight(self, row: OutboxRow, chunk: int) -> int | None: ...

    async def record_chunk_sent(
        self, row: OutboxRow, chunk: int, telegram_message_id: int, *, last: bool
    ) -> bool: ...

    async def release_in_flight(self, row: OutboxRow, chunk: int, error: str) -> bool: ...

    async def recover_in_flight(self, row_ids: Sequence[int] | None) -> list[OutboxRow]: ...

    async def mark_failed(self, row: OutboxRow, error: str) -> bool: ...

    async def mark_uncertain(self, row: OutboxRow, error: str) -> bool: ...


class ChunkTransport(Protocol):
    """The delivery of the chats not on Telegram (the local chats' sockets,
    :class:`actors.local.hub.LocalHub`): one transport per chat kind. Its chats (``chats``)
    are not paced by Telegram's limits; a chunk a stopped sender left in flight is sent again
    (their receiver drops duplicates); with no one to deliver to (``deliver`` raising
    :class:`~actors.errors.Unreachable`) the row stays open until the transport wakes the
    sender (``OutboxReady``)."""

    chats: range

    async def deliver(
        self, row: OutboxRow, index: int, text: str, mode: str | None, *, last: bool
    ) -> int: ...


@attrs.frozen
class DbOutbox:
    """:class:`OutboxStore` over the ``outbox`` table (see :mod:`actors.queues.outbox`);
    rows of the chats in ``redeliver`` are sent again after a stop (``recover_in_flight``)."""

    db: Queries
    redeliver: range = range(0)

    async def chats_with_pending(self) -> list[int]:
        return await outbox.chats_with_pending(self.db)

    async def next_pending(self, chat_id: int, limit: int) -> list[OutboxRow]:
        return await outbox.next_pending(self.db, chat_id, limit)

    async def mark_in_flight(self, row: OutboxRow, chunk: int) -> int | None:
        return await sending.mark_in_flight(self.db, row.chat_id, row.id, chunk)

    async def record_chunk_sent(
        self, row: OutboxRow, chunk: int, telegram_message_id: int, *, last: bool
    ) -> bool:
        return await sending.record_chunk_sent(
            self.db, row.chat_id, row.id, chunk, telegram_message_id, last=last
        )

    async def release_in_flight(self, row: OutboxRow, chunk: int, error: str) -> bool:
        return await sending.release_in_flight(self.db, row.chat_id, row.id, chunk, error)

    async def recover_in_flight(self, row_ids: Sequence[int] | None) -> list[OutboxRow]:
        return await outbox.recover_in_flight(self.db, row_ids, redeliver=self.redeliver)

    async def mark_failed(self, row: OutboxRow, error: str) -> bool:
        return await sending.mark_failed(self.db, row.chat_id, row.id, error)

    async def mark_uncertain(self, row: OutboxRow, error: str) -> bool:
        return await sending.mark_uncertain(self.db, row.chat_id, row.id, error)


def plan_chunks(text: str, parse_mode: str | None, limit: int = MAX_MESSAGE_UTF16) -> ChunkPlan:
    """The messages for one outbox row; deterministic, so ``chunks_sent`` indexes into it.

    HTML is split into well-formed chunks (malformed HTML falls back to plain text up front);
    other text is split as plain text and keeps its ``parse_mode``.
    """
    if parse_mode == "HTML" or parse_mode is None:
        return plan_reply(text, html_mode=parse_mode == "HTML", limit=limit)
    return ChunkPlan(tuple(split_text(text, limit)), parse_mode)


def plan_row(row: OutboxRow, limit: int = MAX_MESSAGE_UTF16) -> ChunkPlan:
    """The requests for one row: a reply's chunks (:func:`plan_chunks`); an edit is one request
    (its text's first chunk: a message is edited into one message); a keyboard-only edit is one
    request with no text."""
    if row.kind == "edit_markup":
        return ChunkPlan(("",), None)
    plan = plan_chunks(row.text, row.parse_mode, limit)
    return ChunkPlan(plan.chunks[:1], plan.parse_mode) if row.kind == "edit" else plan


async def send_chunk(
    client: MessageClient,
    row: OutboxRow,
    index: int,
    text: str,
    mode: str | None,
    *,
    last: bool,
    via: ChunkTransport | None = None,
) -> int:
    """Hand chunk ``index`` of ``row`` to the Bot API (or to ``via``, the transport of the
    chat's kind when it is not Telegram); the message id it is recorded under. A reply:
    sendMessage (the first chunk answers ``reply_to_message_id``, the last carries the
    keyboard). An edit: the edited message's id; "message is not modified" counts
    as done (the message already shows it). Errors are the client's, for the sender's policy."""
    if via is not None:
        return await via.deliver(row, index, text, mode, last=last)
    target = row.edit_message_id
    if row.kind == "message" or target is None:
        reply_to = row.reply_to_message_id if index == 0 else None
        if last and row.reply_markup:
            return await client.send_message(
                row.chat_id, text, mode, reply_to_message_id=reply_to, reply_markup=row.reply_markup
            )
        return await client.send_message(row.chat_id, text, mode, reply_to_message_id=reply_to)
    try:
        if row.kind == "edit":
            await client.edit_message_text(
                row.chat_id, target, text, mode, reply_markup=row.reply_markup
            )
        else:
            await client.edit_message_reply_markup(row.chat_id, target, row.reply_markup)
    except BadRequest as exc:
        if not exc.is_not_modified:
            raise
    return target


_MD_ESCAPE_RE = re.compile(r"\\([_*\[\]()~`>#+\-=|{}.!\\])")


def plain_fallback(chunk: str, parse_mode: str | None, limit: int = MAX_MESSAGE_UTF16) -> str:
    """Plain text for a chunk Telegram could not parse; always one message (within ``limit``)."""
    if parse_mode != "HTML":
        return _MD_ESCAPE_RE.sub(r"\1", chunk).strip() or chunk
    text = html_to_text(chunk).strip()
    if text and utf16_len(text) <= limit:
        return text
    try:  # link URLs made it too long: the visible text is within the limit by construction
        return visible_text(chunk).strip()
    except MalformedHtml:
        return split_text(text, limit)[0]
