"""An outbox row read by its id alone, as a test that holds only the id knows it (the code
reads a row with its chat: :func:`actors.queues.outbox.get`)."""

from __future__ import annotations

from actors.queues import outbox
from runtime.db import Queries


async def outbox_row(db: Queries, row_id: int) -> outbox.OutboxRow | None:
    """The row ``row_id`` of whichever chat holds it; None when there is none."""
    chat_id = await db.fetchval("SELECT chat_id FROM outbox WHERE id = $1", row_id)
    return None if chat_id is None else await outbox.get(db, chat_id, row_id)
