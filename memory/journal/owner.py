"""Who owns a journal entry: one chat (``entries.chat_id``, migration 012).

Entries imported before migration 012 have no chat, and no chat sees them until
:func:`assign_unowned` gives them one (``engram serve`` does so at start, choosing the chat:
:mod:`actors.journal_owner`). Their vectors follow them.
"""

from __future__ import annotations

from runtime.db import Database

# Unowned entries have chat_id 0 (NO_CHAT, migration 023); their vectors follow by the foreign
# key's ON UPDATE CASCADE. On one server only: Citus does not move a row to another chat.
_ASSIGN = """
WITH moved AS (
    UPDATE entries e SET chat_id = $1
    WHERE e.chat_id = 0
      AND NOT EXISTS (SELECT 1 FROM entries o WHERE o.chat_id = $1 AND o.uuid = e.uuid)
    RETURNING e.id
)
SELECT count(*) FROM moved
"""


async def count_unowned(db: Database) -> int:
    """Entries that belong to no chat (imported before migration 012)."""
    return int(
        await db.fetchval(
            "/* all chats: journal entries that no chat owns yet */ "
            "SELECT count(*) FROM entries WHERE chat_id = 0"
        )
    )


async def assign_unowned(db: Database, chat_id: int) -> int:
    """Give every entry without a chat to ``chat_id`` (with its vectors); how many moved.

    An entry whose uuid the chat already has (imported again with ``--chat`` meanwhile) stays
    without a chat: the chat's own copy is the newer one."""
    return int(await db.fetchval(_ASSIGN, chat_id))
