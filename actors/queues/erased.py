"""The fences of a turn's commit: nothing of the turn is written unless

* its inbox rows still exist: the chat may have been erased while its turn ran (``engram
  memory erase``, :mod:`memory.erase`);
* this process still holds the chat's lease (several processes: :mod:`actors.queues.leases`),
  checked with the lease row locked (``FOR SHARE``) until the commit, so a takeover, which
  updates that row, waits for the commit or makes it fail — never a second reply from a
  process that lost the chat.

:func:`actors.queues.outbox.commit_turn` checks both inside its one statement,
:func:`require_rows` and :func:`require_lease` in a transaction of several (all through
``engram_check``, migration 020: SQLSTATE :data:`ERASED_SQLSTATE`; the chat actor forgets what
it held and reads the inbox afresh)."""

from __future__ import annotations

from collections.abc import Sequence

from runtime.db import Queries

#: the SQLSTATE of a commit refused because its inbox rows are gone
ERASED_SQLSTATE = "EG001"
#: the SQL condition (``$n``: the inbox ids) and the error's message
CONDITION = (
    "(SELECT count(*) FROM inbox WHERE chat_id = ${c} AND id = ANY(${n}::bigint[])) "
    "= cardinality(${n}::bigint[])"
)
MESSAGE = "the chat was erased during the turn: its inbox rows are gone"


def fence(n: int, *, chat: int) -> str:
    """The SQL check that the inbox rows ``$n`` of the chat ``$chat`` exist (an error, not
    false, when they do not)."""
    return f"engram_check({CONDITION.format(n=n, c=chat)}, '{MESSAGE}')"


async def require_rows(conn: Queries, chat_id: int, inbox_ids: Sequence[int]) -> None:
    """Fail (:data:`ERASED_SQLSTATE`) unless every row of ``inbox_ids`` exists (in the chat)."""
    await conn.execute(
        f"SELECT engram_check({CONDITION.format(n=1, c=3)}, $2)",
        list(dict.fromkeys(inbox_ids)),
        MESSAGE,
        chat_id,
    )


#: the error's message when the chat's lease moved to another process during the turn
LEASE_LOST = "the lease of the chat was lost during the turn: another process serves it now"


def lease_fence(incarnation: int, *, chat: int) -> str:
    """The SQL check that this run (``$incarnation``, text; NULL: no leases) holds the chat
    ``$chat``'s lease, the lease row locked until the commit (an error when it does not)."""
    held = (
        f"EXISTS (SELECT 1 FROM chat_leases WHERE chat_id = ${chat} "
        f"AND incarnation = ${incarnation}::text FOR SHARE)"
    )
    return (
        f"(CASE WHEN ${incarnation}::text IS NULL THEN true "
        f"ELSE engram_check({held}, '{LEASE_LOST}') END)"
    )


async def require_lease(conn: Queries, chat_id: int, incarnation: str | None) -> None:
    """Fail (:data:`ERASED_SQLSTATE`) unless this run holds the chat's lease (no-op without)."""
    if incarnation is not None:
        await conn.execute(f"SELECT {lease_fence(2, chat=1)}", chat_id, incarnation)
