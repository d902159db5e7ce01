"""Who owns a journal entry: one chat (``entries.chat_id``, migration 012).

Entries imported before migration 012 have no chat, and no chat sees them until
:func:`assign_unowned` gives them one (``engram serve`` does so at start, choosing the chat:
:mod:`actors.journal_owner`). Their vectors follow them.
"""

from __future__ import annotations

from runtime.db import Database

_ASSIGN = """
WITH moved AS (
    UPDATE entries e SET chat_id = $1
    WHERE e.chat_id IS NULL
      AND NOT EXISTS (SELECT 1 FROM entries o WHERE o.chat_id = $1 AND o.uuid = e.uuid)
    RETURNING e.id
),
vectors AS (
    UPDATE entry_embeddings v SET chat_id = $1 FROM moved WHERE v.entry_id = moved.id
)
SELECT count(*) FROM moved
"""


async def count_unowned(db: Database) -> int:
    """Entries that belong to no chat (imported before migration 012)."""
    return int(
        await db.fetchval(
            "/* all chats: journal entries that no chat owns yet */ "
            "SELECT count(*) FROM entries WHERE chat_id IS NULL"
        )
    )


async def assign_unowned(db: Database, chat_id: int) -> int:
    """Give every entry without a chat to ``chat_id`` (with its vectors); how many moved.

    An entry whose uuid the chat already has (imported again with ``--chat`` meanwhile) stays
    without a chat: the chat's own copy is the newer one."""
    return int(await db.fetchval(_ASSIGN, chat_id))
