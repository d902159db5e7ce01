"""A commit's inbox rows must still exist: the chat may have been erased while its turn ran
(``engram memory erase``, :mod:`memory.erase`), and nothing of such a turn may be written.
:func:`actors.queues.outbox.commit_turn` checks it inside its one statement, :func:`require_rows`
in a transaction of several (both through ``engram_check``, migration 020)."""

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
