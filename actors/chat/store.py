"""The chat actor's view of the inbox and outbox: the :class:`ChatStore` protocol (SQL in
production, memory in the timer tests) and :class:`SqlChatStore`, its PostgreSQL
implementation over :mod:`actors.queues.inbox` and :mod:`actors.queues.outbox`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, cast

import attrs

from actors.agent.turn import TurnReply
from actors.errors import NotCollectable
from actors.queues import erased, inbox, outbox
from runtime.db import Connection, Database
from runtime.logs import get_logger

__all__ = ["ChatStore", "SqlChatStore"]

log = get_logger(__name__)


class ChatStore(Protocol):
    """The chat actor's view of the inbox and outbox."""

    async def take_open(
        self, chat_id: int, after: int, max_attempts: int, max_crashes: int
    ) -> tuple[list[inbox.InboxRow], int | None]:
        """Open rows above ``after`` and the id of the first, claimed (see
        :func:`actors.queues.inbox.take_open`)."""
        ...

    async def mark_processing(self, chat_id: int, ids: Sequence[int]) -> None: ...

    async def mark_skipped(self, chat_id: int, ids: Sequence[int], reason: str) -> None: ...

    async def mark_failed(self, chat_id: int, ids: Sequence[int], error: str) -> None:
        """Charge each row a failed attempt (an exception while it was processed)."""
        ...

    async def release(self, chat_id: int, ids: Sequence[int], reason: str) -> None:
        """Hand the rows back uncharged, to be tried again (the model is down)."""
        ...

    async def notify(self, chat_id: int, text: str) -> outbox.OutboxRow | None:
        """Queue a notice answering no update, unless it is already the chat's latest reply
        (see :func:`actors.queues.outbox.enqueue_notice`); the new row, or None."""
        ...

    async def commit(
        self, chat_id: int, reply: TurnReply, inbox_ids: Sequence[int], skipped: str | None
    ) -> outbox.OutboxRow | None:
        """Persist the reply; the new outbox row when its first send attempt is already
        started (the sender gets it as it is), else None."""
        ...


@attrs.frozen
class SqlChatStore:
    """:class:`ChatStore` on PostgreSQL: one transaction per committed turn."""

    db: Database
    #: several processes: rows are taken only while this says the chat's lease is held here,
    #: and a turn commits only while this run (``lease``, its incarnation) holds it
    owns: Callable[[int], bool] | None = None
    lease: str | None = None

    async def take_open(
        self, chat_id: int, after: int, max_attempts: int, max_crashes: int
    ) -> tuple[list[inbox.InboxRow], int | None]:
        if self.owns is not None and not self.owns(chat_id):
            log.warning("chat.not_leased", chat_id=chat_id)
            return [], None  # the lease was lost: the chat's owner takes the rows
        return await inbox.take_open(self.db, chat_id, after, max_attempts, max_crashes)

    async def mark_processing(self, chat_id: int, ids: Sequence[int]) -> None:
        await inbox.mark_processing(self.db, chat_id, ids)

    async def mark_skipped(self, chat_id: int, ids: Sequence[int], reason: str) -> None:
        await inbox.mark_skipped(self.db, chat_id, ids, reason)

    async def mark_failed(self, chat_id: int, ids: Sequence[int], error: str) -> None:
        for row_id in dict.fromkeys(ids):
            await inbox.mark_failed(self.db, chat_id, row_id, error)

    async def release(self, chat_id: int, ids: Sequence[int], reason: str) -> None:
        await inbox.release(self.db, chat_id, ids, reason)

    async def notify(self, chat_id: int, text: str) -> outbox.OutboxRow | None:
        return await outbox.enqueue_notice(self.db, chat_id, text)

    async def commit(
        self, chat_id: int, reply: TurnReply, inbox_ids: Sequence[int], skipped: str | None
    ) -> outbox.OutboxRow | None:
        """Persist hook + outbox row + inbox rows final, atomically.

        Usually one statement, no transaction: the outbox row (claimed for its first send
        when it is the chat's only open one: returned, for the sender), the inbox rows done
        and the hook's writes, collected (:class:`actors.queues.outbox.StatementCollector`). A hook
        that needs more runs in a transaction with the rest, as do skipped rows. The reply's
        keyboard goes with its outbox row."""
        markup = None if reply.keyboard is None else reply.keyboard.to_json()
        if skipped is None:
            collector = outbox.StatementCollector()
            try:
                if reply.persist is not None:
                    await reply.persist(cast(Connection, collector))
            except NotCollectable:
                pass
            else:
                row = await outbox.commit_turn(
                    self.db,
                    chat_id=chat_id,
                    text=reply.text,
                    inbox_ids=inbox_ids,
                    parse_mode=reply.parse_mode,
                    before=collector.statements,
                    claim=True,
                    reply_markup=markup,
                    lease=self.lease,
                )
                return row if row.status == "sending" else None
        async with self.db.transaction() as conn:
            await erased.require_rows(conn, chat_id, inbox_ids)  # not for an erased chat's rows
            await erased.require_lease(conn, chat_id, self.lease)  # nor a chat served elsewhere
            if reply.persist is not None:
                await reply.persist(conn)
            if skipped is None:
                await outbox.commit_turn(
                    conn,
                    chat_id=chat_id,
                    text=reply.text,
                    inbox_ids=inbox_ids,
                    parse_mode=reply.parse_mode,
                    reply_markup=markup,
                )
                return None
            await outbox.enqueue_reply(
                conn, chat_id, reply.text, reply.parse_mode, None, list(inbox_ids)
            )
            await inbox.mark_skipped(conn, chat_id, list(inbox_ids), skipped)
        return None
