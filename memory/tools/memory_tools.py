"""The model's memory tools: ``recall_memory``, ``remember``, ``forget_memory``,
``link_memories``.

Every tool is scoped to ``ToolContext.chat_id``: a chat can neither see nor change another
chat's patterns (an id from another chat reads exactly like an unknown id).

* ``recall_memory(query, limit)`` ranks this chat's live patterns with
  :func:`memory.retrieval.retriever.rank_patterns` (hybrid vector + full text, typed decay);
  when the query cannot be embedded the answer is ``degraded`` (keyword matches only).
* ``remember(fact, kind="belief", date?, time?)`` stores an explicit pattern through
  :func:`memory.patterns.explicit.remember` (canonical hash, then similarity dedup with
  adjudication in the grey zone; the same path as the person's ``/remember``); the answer says
  whether it is new or reinforced an existing id. An ``event`` needs its ``date``
  (``YYYY-MM-DD``, the model resolves "next Friday" against the prompt's date) and may have a
  local ``time`` (``HH:MM``); no other kind takes either.
* ``forget_memory(id, reason)`` and ``link_memories(..., "supersedes")`` never act on the
  model's word (journal text or a forwarded message may have asked for it): they check the ids
  and ask the person through :attr:`ToolContext.confirm <memory.tools.registry.ToolContext>` —
  the buttons of ``/forget``, or a supersede's [Confirm]/[Keep] — and answer that the person
  was asked; only a tap forgets or supersedes. Without a ``confirm`` they refuse.
* ``link_memories(from_id, to_id, relation)`` records the other relations the person states
  between two of this chat's patterns (supports, contradicts, parent_of, causes) through
  :func:`memory.patterns.controls.link_patterns` (seed 002 ``memory_link``).
* ``remember`` refuses instruction-like text (:func:`memory.patterns.explicit.refusal`, the
  compaction's rule).

:func:`memory_registry` returns them as a :class:`memory.tools.registry.ToolRegistry`;
:func:`memory_tools`
returns the tools alone (to combine with the journal tools). ``remember`` needs an
:class:`memory.patterns.dedup.Adjudicator` for near-duplicates; without one they are stored as new.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime, time
from typing import Any, Literal

import attrs
import numpy as np

from memory.embeddings.thresholds import Thresholds
from memory.errors import ToolError
from memory.extraction.claims import EVENT
from memory.patterns.controls import FORGETTABLE, Relation, check_link, link_patterns
from memory.patterns.dedup import Adjudicator
from memory.patterns.explicit import (
    MAX_FACT_CHARS,
    MIN_FACT_CHARS,
    keep_apart,
    refusal,
    remember,
)
from memory.patterns.views import items_by_id
from memory.retrieval.retriever import rank_patterns
from memory.retrieval.sql import LexiconCache, VectorPlanner
from memory.tools.conversation_tools import conversation_tools
from memory.tools.registry import Tool, ToolContext, ToolRegistry, tool
from memory.tools.schema import date_spec, parse_day, spec
from runtime.clock import clock_text, local_date
from runtime.logs import get_logger

log = get_logger(__name__)

Kind = Literal[
    "behavior", "emotion", "belief", "goal", "preference", "temporal", "causal", "fact", "event"
]
TIME_PATTERN = r"^\d{2}:\d{2}$"
RECALL_CANDIDATES = 60
ASKED = "asked the person to confirm"
ASKED_NOTE = "Nothing changes unless the person taps the button; tell them you asked."
NO_CONFIRM = "this needs the person's confirmation, which cannot be asked here: tell them to use "


class _NoEmbedder:
    """Stands in when no embedding model is configured: every embed fails -> full text only."""

    model, dims = "none", 1

    async def embed(
        self, texts: Sequence[str], *, purpose: str, chat_id: int | None = None
    ) -> list[np.ndarray]:
        raise RuntimeError("no embedding model configured")


# --- inputs -----------------------------------------------------------------------------------


@attrs.frozen
class RecallMemoryInput:
    query: str = attrs.field(
        metadata=spec(min_length=1, max_length=500, description="What to recall, in words")
    )
    limit: int = attrs.field(
        default=5, metadata=spec(minimum=1, maximum=20, description="Maximum memories")
    )


#: a fact the person asks to remember without saying more ("remember that I'm vegetarian")
DEFAULT_REMEMBER_KIND: Kind = "belief"
_KIND_HELP = (
    "fact (a stable fact about their life: job, family, home), event (something on a given "
    "day: give its date), behavior (what the person does), emotion (how they feel about "
    "something), belief (what they hold true), goal, preference (including how they want to be "
    "answered), temporal (routines tied to a time of day, weekday or season), causal (what "
    "leads to what)"
)


@attrs.frozen
class RememberInput:
    fact: str = attrs.field(
        metadata=spec(
            min_length=MIN_FACT_CHARS,
            max_length=MAX_FACT_CHARS,
            description="One standalone claim about the person, pronouns resolved "
            "(e.g. 'User prefers tea over coffee')",
        )
    )
    kind: Kind = attrs.field(
        default=DEFAULT_REMEMBER_KIND,
        metadata=spec(description=f"The kind of memory (default belief): {_KIND_HELP}"),
    )
    date: str | None = attrs.field(
        default=None,
        metadata=date_spec(
            "An event's day, YYYY-MM-DD (required for kind event, only for it): resolve "
            "'next Friday' against today's date in the prompt"
        ),
    )
    time: str | None = attrs.field(
        default=None,
        metadata=spec(pattern=TIME_PATTERN, description="An event's local time, HH:MM (optional)"),
    )


@attrs.frozen
class ForgetMemoryInput:
    id: int = attrs.field(metadata=spec(minimum=1, description="The memory id (from recall)"))
    reason: str = attrs.field(
        metadata=spec(min_length=1, max_length=500, description="Why it should be forgotten")
    )


@attrs.frozen
class LinkMemoriesInput:
    from_id: int = attrs.field(metadata=spec(minimum=1, description="The memory it starts at"))
    to_id: int = attrs.field(metadata=spec(minimum=1, description="The memory it points to"))
    relation: Relation = attrs.field(
        metadata=spec(
            description="from supports / contradicts / causes / is the parent_of (a broader "
            "memory than) to; or from supersedes to (to is outdated and is retired)"
        )
    )


# --- handlers ---------------------------------------------------------------------------------


def _local_date(ctx: ToolContext, value: datetime) -> str:
    return local_date(value, ctx.tz)


async def _recall(
    ctx: ToolContext,
    inp: RecallMemoryInput,
    thresholds: Thresholds | None,
    lexicons: LexiconCache | None,
    planner: VectorPlanner | None = None,
) -> dict[str, Any]:
    embedder: Any = ctx.embedder if ctx.embedder is not None else _NoEmbedder()
    db: Any = ctx.db  # the Database (rank_patterns may open a transaction)
    ranked, degraded = await rank_patterns(
        db,
        embedder,
        ctx.chat_id,
        inp.query,
        limit=max(RECALL_CANDIDATES, inp.limit),
        now=ctx.now,
        thresholds=thresholds,
        lexicons=lexicons,
        planner=planner,
        timezone=ctx.timezone,
    )
    memories = []
    for p in ranked[: inp.limit]:
        item: dict[str, Any] = {
            "id": p.id,
            "content": p.content,
            "kind": p.kind,
            "confidence": round(float(p.confidence), 2),
            "last_seen": _local_date(ctx, p.last_seen),
        }
        if p.occurs_on is not None:
            item["date"] = p.occurs_on.isoformat()
            if p.occurs_at is not None:
                item["time"] = clock_text(p.occurs_at)
        if p.core:
            item["core"] = True
        if p.status != "active":
            item["status"] = p.status
        memories.append(item)
    out: dict[str, Any] = {"query": inp.query, "count": len(memories), "memories": memories}
    out["degraded"] = degraded
    if degraded:
        out["note"] = "keyword search only (the query could not be embedded); some may be missing"
    return out


async def _remember(
    ctx: ToolContext, inp: RememberInput, adjudicator: Adjudicator, thresholds: Thresholds | None
) -> dict[str, Any]:
    fact = " ".join(inp.fact.split())
    if len(fact) < 3:
        raise ToolError("fact must say something", "fact")
    if (refused := refusal(fact)) is not None:
        raise ToolError(refused, "fact")
    day, at = _event_day(inp)
    embedder: Any = ctx.embedder
    done = await remember(
        ctx.db,
        embedder,
        adjudicator,
        chat_id=ctx.chat_id,
        content=fact,
        kind=inp.kind,
        now=ctx.now,
        thresholds=thresholds,
        occurs_on=day,
        occurs_at=at,
    )
    out: dict[str, Any] = {
        "id": done.pattern_id,
        "status": "reinforced" if done.reinforced else "new",
    }
    if done.reinforced:
        out["existing"] = done.content
        out["times_seen"] = done.times_seen
        if done.similarity is not None:
            out["similarity"] = round(float(done.similarity), 3)
    else:
        out["content"] = fact
    if day is not None:
        out["date"] = day.isoformat()
    log.info(
        "memory.remember", chat_id=ctx.chat_id, pattern_id=done.pattern_id, status=out["status"]
    )
    return out


def _event_day(inp: RememberInput) -> tuple[date | None, time | None]:
    """An event's day and time; a :class:`ToolError` when an event lacks its date, another
    kind has one, or the time is not a time of day."""
    if inp.kind != EVENT:
        if inp.date is not None or inp.time is not None:
            raise ToolError(f"only an event has a date or time (this is a {inp.kind})", "date")
        return None, None
    if inp.date is None:
        raise ToolError("an event needs its date (YYYY-MM-DD)", "date")
    try:
        at = None if inp.time is None else time.fromisoformat(inp.time)
    except ValueError:
        raise ToolError(f"{inp.time!r} is not a time of day (HH:MM)", "time") from None
    return parse_day(inp.date), at


async def _forget(ctx: ToolContext, inp: ForgetMemoryInput) -> dict[str, Any]:
    """Checks the id and asks the person (see the module docstring); forgets nothing."""
    found = await items_by_id(ctx.db, ctx.chat_id, [inp.id])
    if not found:
        raise ToolError(f"no memory with id {inp.id}", "id")
    item = found[0]
    if item.status == "merged":
        note = await ctx.db.fetchval(
            "SELECT status_reason FROM patterns WHERE id = $1 AND chat_id = $2", inp.id, ctx.chat_id
        )
        why = f" ({note})" if note else ""
        raise ToolError(
            f"memory {inp.id} was merged into another memory{why}; forget that one instead", "id"
        )
    out: dict[str, Any] = {"id": inp.id, "content": item.content}
    if item.status not in FORGETTABLE:
        return {**out, "forgotten": True, "note": "it was already forgotten"}
    if ctx.confirm is None:
        raise ToolError(NO_CONFIRM + f"/memory forget {inp.id}", "id")
    await ctx.confirm.ask_forget([inp.id])
    log.info("memory.forget_asked", chat_id=ctx.chat_id, pattern_id=inp.id)
    return {**out, "forgotten": False, "status": ASKED, "note": ASKED_NOTE}


async def _link(ctx: ToolContext, inp: LinkMemoriesInput) -> dict[str, Any]:
    out: dict[str, Any] = {"from_id": inp.from_id, "to_id": inp.to_id, "relation": inp.relation}
    if inp.relation == "supersedes":
        problem = await check_link(ctx.db, ctx.chat_id, inp.from_id, inp.to_id, inp.relation)
        if problem:
            raise ToolError(problem, "to_id" if str(inp.to_id) in problem else "from_id")
        if ctx.confirm is None:
            raise ToolError(NO_CONFIRM + "/forget for the outdated memory", "relation")
        await ctx.confirm.ask_supersede(inp.to_id, inp.from_id)
        log.info(
            "memory.supersede_asked", chat_id=ctx.chat_id, from_id=inp.from_id, to_id=inp.to_id
        )
        return {**out, "linked": False, "status": ASKED, "note": ASKED_NOTE}
    db: Any = ctx.db  # the Database (link_patterns opens a transaction)
    problem = await link_patterns(
        db, ctx.chat_id, inp.from_id, inp.to_id, inp.relation, actor="model"
    )
    if problem:
        raise ToolError(problem, "to_id" if str(inp.to_id) in problem else "from_id")
    log.info(
        "memory.link",
        chat_id=ctx.chat_id,
        from_id=inp.from_id,
        to_id=inp.to_id,
        relation=inp.relation,
    )
    return {**out, "linked": True}


# --- the tools --------------------------------------------------------------------------------


def memory_tools(
    adjudicator: Adjudicator | None = None,
    *,
    thresholds: Thresholds | None = None,
    lexicons: LexiconCache | None = None,
) -> tuple[Tool[Any], ...]:
    """``recall_memory``, ``remember``, ``forget_memory``, ``link_memories`` and
    ``recall_conversation`` (:mod:`memory.tools.conversation_tools`), in that order.

    ``thresholds`` default to the embedding model's calibrated ones; ``recall_memory`` scores
    its lexical half by BM25 over ``lexicons`` (a cache of its own unless one is shared with
    the retriever), like the turn's retrieval.
    """
    lexicon_cache = lexicons if lexicons is not None else LexiconCache()
    planner = VectorPlanner()  # each chat's vector count, cached (as the turn's retriever does)
    judge: Adjudicator = adjudicator or keep_apart
    tools: list[Tool[Any]] = []

    @tool(tools, "recall_memory", RecallMemoryInput)
    async def recall_memory(ctx: ToolContext, inp: RecallMemoryInput) -> dict[str, Any]:
        """Search what you know about the person (memories distilled from earlier
        conversations, beyond those already in the prompt), by words and meaning. Returns
        memories with their id, kind, confidence and the date last seen."""
        return await _recall(ctx, inp, thresholds, lexicon_cache, planner)

    @tool(tools, "remember", RememberInput)
    async def remember(ctx: ToolContext, inp: RememberInput) -> dict[str, Any]:
        """Store a fact about the person in long-term memory when they ask you to remember
        it or state something clearly lasting about themselves. If a memory with the same
        meaning exists it is reinforced instead; the answer says which, with the id."""
        return await _remember(ctx, inp, judge, thresholds)

    @tool(tools, "forget_memory", ForgetMemoryInput)
    async def forget_memory(ctx: ToolContext, inp: ForgetMemoryInput) -> dict[str, Any]:
        """Offer the person to forget a memory by id (from recall_memory or the prompt) when
        they ask you to, or when it is wrong: they get a button to confirm, and nothing is
        forgotten until they tap it."""
        return await _forget(ctx, inp)

    @tool(tools, "link_memories", LinkMemoriesInput)
    async def link_memories(ctx: ToolContext, inp: LinkMemoriesInput) -> dict[str, Any]:
        """Record how two memories (ids from recall_memory or the prompt) relate, when the
        person says so: one supports, contradicts or causes the other, is a broader memory
        (parent_of) of it, or supersedes it (the person is asked to confirm; once they do, the
        older one is no longer used)."""
        return await _link(ctx, inp)

    tools += conversation_tools(thresholds=thresholds)
    return tuple(tools)


def memory_registry(
    adjudicator: Adjudicator | None = None,
    *,
    thresholds: Thresholds | None = None,
) -> ToolRegistry:
    """A registry with the memory tools (see :func:`memory_tools`)."""
    return ToolRegistry(memory_tools(adjudicator, thresholds=thresholds))
