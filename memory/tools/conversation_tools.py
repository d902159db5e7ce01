"""``recall_conversation``: what was said in this chat before the window, in its own words.

The turn's window shows the recent messages and "Earlier in this conversation" the summaries
of older spans; this tool finds the exact words (seed 004 Tests 7c and 12: "what exactly did
you say this morning?", "what's my AWS dev account number?"). It searches this chat's retained
messages by full text and its episodes by full text and meaning
(:func:`memory.retrieval.recall.recall`; never another chat's rows) and answers dated snippets:
each message with its local date and time, role and an excerpt around the words that matched
(the best match whole, up to 4,000 characters; when compacted, the episode it lies in); each
episode with its local date range, size and summary.

``date_from``/``date_to`` (local dates, inclusive) narrow both; with no content word in the
query they alone select (the newest of the span). Nothing from the turn's own moment on is
searched: the question being asked is not its answer.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import attrs

from memory.conversation.episodes import Episode
from memory.embeddings.thresholds import Thresholds, thresholds_for
from memory.errors import ToolError
from memory.retrieval.query_text import content_words
from memory.retrieval.recall import MessageHit, QueryVector, Span, has_terms, recall
from memory.tools.registry import Tool, ToolContext, tool
from memory.tools.results import excerpt
from memory.tools.schema import date_range, optional_date, spec
from runtime.clock import local_datetime
from runtime.logs import get_logger

log = get_logger(__name__)

SNIPPET_CHARS = 300
#: the best match is shown whole up to this (seed 004 Test 7c: "give me the full message")
BEST_CHARS = 4000
EMBED_PURPOSE = "embedding"


@attrs.frozen
class RecallConversationInput:
    query: str = attrs.field(
        metadata=spec(
            max_length=500,
            description="What was said, in words (e.g. 'AWS account number'); may be empty "
            "when dates are given",
        )
    )
    date_from: str | None = optional_date("Earliest local date (YYYY-MM-DD)")
    date_to: str | None = optional_date("Latest local date, inclusive (YYYY-MM-DD)")
    limit: int = attrs.field(
        default=8, metadata=spec(minimum=1, maximum=20, description="Maximum messages")
    )


def snippet(text: str, words: list[str], chars: int = SNIPPET_CHARS) -> str:
    """``text`` in at most ``chars`` characters, centred on the first of ``words`` it contains
    (its start when none), "…" where cut."""
    flat = " ".join(text.split())
    if len(flat) <= chars:
        return flat
    found = [m.start() for w in words if (m := re.search(re.escape(w), flat, re.I))]
    if not found:
        return excerpt(flat, chars)
    start = max(0, min(found) - chars // 3)
    piece = excerpt(flat[start:], chars - (1 if start else 0))
    return f"…{piece}" if start else piece


def local_span(ctx: ToolContext, start: date | None, end: date | None) -> Span:
    """Local dates (inclusive) as the instants they span in the context's time zone, ending
    before the turn's own moment (the message asking is not an answer)."""

    def midnight(day: date) -> datetime:
        return datetime.combine(day, time.min, tzinfo=ctx.tz).astimezone(UTC)

    until = ctx.now if end is None else min(ctx.now, midnight(end + timedelta(days=1)))
    return Span(midnight(start) if start is not None else None, until)


def _when(ctx: ToolContext, at: datetime) -> str:
    return local_datetime(at, ctx.tz)


def _dates(ctx: ToolContext, episode: Episode) -> dict[str, str]:
    return {
        "from": _when(ctx, episode.started_at),
        "to": _when(ctx, episode.ended_at),
    }


def _message(ctx: ToolContext, hit: MessageHit, words: list[str], chars: int) -> dict[str, Any]:
    item: dict[str, Any] = {
        "at": _when(ctx, hit.created_at),
        "role": hit.role,
        "text": snippet(hit.content, words, chars),
    }
    if hit.compacted:
        item["compacted"] = True
        if hit.episode_id is not None:
            item["episode"] = hit.episode_id
    return item


async def _recall(
    ctx: ToolContext, inp: RecallConversationInput, thresholds: Thresholds | None
) -> dict[str, Any]:
    start, end = date_range(inp.date_from, inp.date_to)
    query = " ".join(inp.query.split())
    if not has_terms(query) and start is None and end is None:
        raise ToolError("say what to look for, or give dates", "query")
    problem: list[str] = []

    async def vector() -> QueryVector | None:
        if not has_terms(query):
            return None
        if ctx.embedder is None:
            problem.append("no embedding model")
            return None
        try:
            [v] = await ctx.embedder.embed([query], purpose=EMBED_PURPOSE, chat_id=ctx.chat_id)
        except Exception as exc:
            log.warning(
                "recall_conversation.embed_failed", chat_id=ctx.chat_id, error=type(exc).__name__
            )
            problem.append(f"embedding failed ({type(exc).__name__})")
            return None
        floor = (thresholds or thresholds_for(ctx.embedder.model)).min_similarity
        return QueryVector(v, ctx.embedder.model, ctx.embedder.dims, floor)

    hits, episodes = await recall(
        ctx.db,
        ctx.chat_id,
        query,
        local_span(ctx, start, end),
        messages=inp.limit,
        episodes=min(5, inp.limit),
        vector=vector,
    )
    words = content_words(query)
    out: dict[str, Any] = {
        "query": query,
        "timezone": ctx.timezone,
        "messages": [
            _message(ctx, h, words, BEST_CHARS if i == 0 else SNIPPET_CHARS)
            for i, h in enumerate(hits)
        ],
        "episodes": [
            {"id": e.id, **_dates(ctx, e), "messages": e.message_count, "summary": e.summary}
            for e in episodes
        ],
    }
    if inp.date_from or inp.date_to:
        out["date_from"], out["date_to"] = inp.date_from, inp.date_to
    if problem:
        out["degraded"] = True
        out["note"] = f"episodes searched by words only ({problem[0]})"
    if not hits and not episodes:
        out["note"] = "nothing found in this conversation"
    return out


def conversation_tools(*, thresholds: Thresholds | None = None) -> tuple[Tool[Any], ...]:
    """``recall_conversation`` (episode vectors filtered by ``thresholds``' retrieval floor;
    default: the query model's calibrated one)."""
    tools: list[Tool[Any]] = []

    @tool(tools, "recall_conversation", RecallConversationInput)
    async def recall_conversation(ctx: ToolContext, inp: RecallConversationInput) -> dict[str, Any]:
        """Search this conversation's past: the exact messages said earlier (also those no
        longer in the history shown) and the summaries of older stretches, by words and
        meaning, optionally between two dates. Returns dated snippets (local date and time,
        who said it) and summaries with their date ranges. Use it when asked what was said
        before, or for a detail (a number, a name, a date) from an earlier conversation."""
        return await _recall(ctx, inp, thresholds)

    return tuple(tools)
