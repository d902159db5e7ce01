"""After a turn: link the patterns it was given to the journal entries it cited.

The pure part (which entries count as cited) lives in :mod:`memory.patterns.entry_links`; this
module turns the turn's messages into :class:`~memory.patterns.entry_links.ToolExchange` records and
records the links best effort: a failure is logged and never affects the reply.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

from memory.llm.protocol import Message, ToolResultBlock, ToolUseBlock
from memory.patterns.entry_links import ToolExchange, link_turn
from runtime.db import Queries
from runtime.logs import get_logger

log = get_logger(__name__)

LINK_TIMEOUT = 5.0


def tool_exchanges(messages: Sequence[Message]) -> list[ToolExchange]:
    """Every tool call of the conversation paired with its result, in call order."""
    results: dict[str, ToolResultBlock] = {}
    for message in messages:
        for block in message.blocks:
            if isinstance(block, ToolResultBlock):
                results[block.tool_use_id] = block
    out: list[ToolExchange] = []
    for message in messages:
        for block in message.blocks:
            if isinstance(block, ToolUseBlock) and block.id in results:
                result = results[block.id]
                out.append(ToolExchange(block.name, block.input, result.content, result.is_error))
    return out


async def link_cited_entries(
    db: Queries,
    chat_id: int,
    pattern_ids: Sequence[int],
    messages: Sequence[Message],
    answer: str,
) -> int:
    """Record ``tool_loop`` links for the turn; the number of links (0 on any failure)."""
    if not pattern_ids:
        return 0
    calls = tool_exchanges(messages)
    if not calls:
        return 0
    with trio.move_on_after(LINK_TIMEOUT):
        try:
            return await link_turn(db, chat_id, pattern_ids, calls, answer)
        except Exception as exc:  # best effort: the reply must not depend on it
            log.warning("agent.entry_links_failed", chat_id=chat_id, error=repr(exc))
            return 0
    log.warning("agent.entry_links_timeout", chat_id=chat_id)
    return 0
