"""The memory commands of the chat (seed 000 "User-facing memory controls", seed 004 Phase 5):
``/memory`` and its sub-commands and ``/remember`` — their parsing and their wording (``/summary``
and ``/stats`` are :mod:`actors.chat.summary_stats`). What they read and do lives in
:mod:`memory.patterns` (``views``, ``why``, ``controls``, ``explicit``), the same functions the
model's tools call; no model is called here. Every id is the chat's own: another chat's reads "not
found".

``/memory forget``, ``/memory merge`` and ``/forget <topic>`` ask before they act, with inline
buttons (:mod:`actors.chat.forget_command`). Dates are shown in ``TIMEZONE``
(:mod:`runtime.clock`). The table listing them is :mod:`actors.chat.commands`.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence

import attrs

from actors.agent.turn import TurnReply
from actors.chat.command_base import CommandCall
from memory.embeddings.providers import Embedder
from memory.embeddings.thresholds import Thresholds
from memory.extraction.claims import KINDS
from memory.patterns.audit import AuditRow, history
from memory.patterns.controls import pin_pattern
from memory.patterns.explicit import (
    MAX_FACT_CHARS,
    MIN_FACT_CHARS,
    clean_fact,
    guess_kind,
    keep_apart,
    refusal,
    remember,
)
from memory.patterns.views import Item, list_patterns, profile_view, search_patterns
from memory.patterns.why import PatternDetail, explain
from memory.retrieval.sql import LexiconCache, VectorPlanner
from runtime.clock import clock_text, local_date, local_datetime
from runtime.db import Database
from runtime.words import count

USAGE = {
    "list": "/memory list [kind] — kind: " + ", ".join(KINDS),
    "search": "/memory search <words>",
    "why": "/memory why <id>",
    "forget": "/memory forget <id>",
    "pin": "/memory pin <id>",
    "unpin": "/memory unpin <id>",
    "merge": "/memory merge <id1> <id2>",
    "restore": "/memory restore <id> — undo a replacement (within 24 h)",
}
REMEMBER_USAGE = f"Usage: /remember <fact> ({MIN_FACT_CHARS}-{MAX_FACT_CHARS} characters)"
GROUP_HEADERS = {
    "core": "📌 Pinned (core):",
    "fact": "👤 Facts:",
    "preference": "⚙️ Preferences:",
    "goal": "🎯 Active goals:",
    "event": "📅 Coming up:",
    "other": "🗂 Also remembered:",
}
STATUS_WORDS = {
    "active": "active",
    "disputed": "disputed",
    "superseded": "superseded",
    "deprecated": "forgotten",
    "merged": "merged",
}
ACTOR_WORDS = {
    "person": "you",
    "model": "the model",
    "compaction": "compaction",
    "merge_job": "the merge job",
    "maintenance": "maintenance",
}


@attrs.frozen
class MemoryServices:
    """What the memory commands need: the database, the embedding model (search, dedup), the
    retrieval's settings and the person's time zone."""

    db: Database
    embedder: Embedder
    timezone: str = "UTC"
    thresholds: Thresholds | None = None
    lexicons: LexiconCache | None = None
    #: caches each chat's vector count for the retrieval's plan (as the turn's retriever does)
    planner: VectorPlanner = attrs.field(factory=VectorPlanner)


def usage(sub: str) -> TurnReply:
    return TurnReply(f"Usage: {USAGE[sub]}")


#: an id as typed: 1-18 ASCII digits (any 18-digit number fits a BIGINT); ``str.isdigit`` would
#: accept ``²`` or ``٣``, which ``int()`` then refuses or reads
MAX_ID_DIGITS = 18
_ID = re.compile(rf"#?([0-9]{{1,{MAX_ID_DIGITS}}})")


def parse_ids(args: str, count: int) -> list[int] | None:
    """Exactly ``count`` positive ids (``#12`` or ``12``, ASCII digits only), else None."""
    words = args.replace(",", " ").split()
    if len(words) != count:
        return None
    found = [_ID.fullmatch(w) for w in words]
    ids = [int(m.group(1)) for m in found if m is not None]
    if len(ids) != count or not all(ids):
        return None
    return ids


def not_found(pattern_id: int) -> TurnReply:
    return TurnReply(f"Memory #{pattern_id} not found.")


def one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def item_line(item: Item, tz: str, *, score: str = "") -> str:
    """``• content (#12)``; an event's led by its local date (and time)."""
    text = one_line(item.content)
    if item.occurs_on is not None:
        day = local_date(item.occurs_on, tz)
        when = day if item.occurs_at is None else f"{day} {clock_text(item.occurs_at)}"
        text = f"{when}: {text}"
    tags = "" if item.status == "active" else f" [{STATUS_WORDS.get(item.status, item.status)}]"
    return f"  • {text} (#{item.id}){tags}{score}"


# --- /memory, /remember ------------------------------------------------------------------------


async def memory(s: MemoryServices, call: CommandCall, subs: Mapping[str, Sub]) -> TurnReply:
    """``/memory``: the profile; ``/memory <sub> ...``: the sub-command (``subs``)."""
    sub, _, rest = call.args.partition(" ")
    sub, rest = sub.lower(), rest.strip()
    if not sub:
        return await profile(s, call)
    if sub not in subs:
        return TurnReply("Usage: /memory [" + " | ".join(u for u in USAGE if u in subs) + "]")
    return await subs[sub](s, call, rest)


async def remember_command(s: MemoryServices, call: CommandCall) -> TurnReply:
    """``/remember <fact>``: stored at once, through the ``remember`` tool's path, without a
    model (near duplicates in the grey zone are kept apart)."""
    fact = clean_fact(call.args)
    if not MIN_FACT_CHARS <= len(fact) <= MAX_FACT_CHARS:
        return TurnReply(REMEMBER_USAGE)
    if (refused := refusal(fact)) is not None:
        return TurnReply(refused)
    done = await remember(
        s.db,
        s.embedder,
        keep_apart,
        chat_id=call.chat_id,
        content=fact,
        kind=guess_kind(fact),
        now=call.now,
        thresholds=s.thresholds,
    )
    if done.reinforced:
        return TurnReply(f"✓ Already known — reinforced: {done.content}")
    return TurnReply(f"✓ Remembered: {fact}")


async def profile(s: MemoryServices, call: CommandCall) -> TurnReply:
    view = await profile_view(s.db, call.chat_id, now=call.now, timezone=s.timezone)
    lines = ["📋 Your profile"]
    for group, header in GROUP_HEADERS.items():
        items = view.groups.get(group, ())
        if items:
            lines += ["", header, *(item_line(i, s.timezone) for i in items)]
    if len(lines) == 1:
        lines += ["", "I don't know anything about you for sure yet."]
    counts = ", ".join(f"{n} {STATUS_WORDS[st]}" for st, n in view.by_status.items()) or "none"
    lines += ["", f"🧠 Memories: {counts}"]
    lines.append(
        f"💬 Conversation: {count(view.messages, 'message')} kept ({view.verbatim} not yet "
        f"summarised), {count(view.episodes, 'summary')} of "
        f"{count(view.summarized, 'earlier message')}"
    )
    lines += ["", "More: /memory list · /memory why <id> · /help"]
    return TurnReply("\n".join(lines))


async def list_command(s: MemoryServices, call: CommandCall, rest: str) -> TurnReply:
    kind = rest.lower() or None
    if kind is not None and kind not in KINDS:
        return usage("list")
    items = await list_patterns(s.db, call.chat_id, now=call.now, timezone=s.timezone, kind=kind)
    if not items:
        return TurnReply(f"No active {kind or ''} memories.".replace("  ", " "))
    noun = f"active {kind} memory" if kind else "active memory"
    title = f"Top {count(len(items), noun)} by current weight:"
    lines = [title, *(item_line(i, s.timezone, score=f" — {i.score:.2f}") for i in items)]
    return TurnReply("\n".join(lines))


async def search_command(s: MemoryServices, call: CommandCall, rest: str) -> TurnReply:
    query = one_line(rest, 500)
    if not query:
        return usage("search")
    items, degraded = await search_patterns(
        s.db,
        s.embedder,
        call.chat_id,
        query,
        now=call.now,
        timezone=s.timezone,
        thresholds=s.thresholds,
        lexicons=s.lexicons,
        planner=s.planner,
    )
    if not items:
        return TurnReply(f"Nothing in memory matches “{query}”.")
    lines = [f"Top {len(items)} for “{query}” (score; similarity):"]
    for i in items:
        sim = "—" if i.similarity is None else f"{i.similarity:.2f}"
        lines.append(item_line(i, s.timezone, score=f" — {i.score or 0:.3f}; {sim}"))
    if degraded:
        lines.append("(keyword search only: the words could not be embedded just now)")
    return TurnReply("\n".join(lines))


async def why_command(s: MemoryServices, call: CommandCall, rest: str) -> TurnReply:
    ids = parse_ids(rest, 1)
    if ids is None:
        return usage("why")
    detail = await explain(s.db, call.chat_id, ids[0])
    if detail is None:
        rows = await history(s.db, call.chat_id, ids[0])
        return TurnReply(gone_text(ids[0], rows, s.timezone)) if rows else not_found(ids[0])
    return TurnReply(why_text(detail, s.timezone))


def gone_text(pattern_id: int, rows: Sequence[AuditRow], tz: str) -> str:
    """A forgotten pattern's story: its text is gone, its audit rows stay."""
    return "\n".join(
        [
            f"#{pattern_id} was forgotten: its text and evidence are gone.",
            "",
            "History:",
            *_history_lines(rows, tz),
        ]
    )


def why_text(d: PatternDetail, tz: str) -> str:
    """The full story of one pattern (``/memory why``, ``engram patterns show``)."""
    day = ""
    if d.occurs_on is not None:
        at = "" if d.occurs_at is None else f" {clock_text(d.occurs_at)}"
        day = f" on {local_date(d.occurs_on, tz)}{at}"
    lines = [f"#{d.id} [{d.kind}{day}] {d.content} ({STATUS_WORDS.get(d.status, d.status)})"]
    lines.append(
        f"strength {d.strength:.2f} · confidence {d.confidence:.2f} · seen {d.times_seen}× · "
        f"first {local_date(d.first_seen, tz)} · last {local_date(d.last_seen, tz)} · "
        f"from {d.source}" + (f" · contradicted {d.contradictions}×" if d.contradictions else "")
    )
    if d.core and d.pinned_at is not None:
        lines.append(f"Core tenet since {local_date(d.pinned_at, tz)} (always in the profile)")
    if d.status != "active" and d.status_reason:
        lines.append(f"Why {STATUS_WORDS.get(d.status, d.status)}: {one_line(d.status_reason)}")
    lines += ["", f"Evidence ({d.observation_count}, newest first):"]
    for o in d.observations:
        roles = "/".join(dict.fromkeys(o.roles)) or "—"
        lines.append(
            f"  • {local_date(o.observed_at, tz)} {roles}, {o.signal}: "
            f"“{one_line(o.evidence, 240)}”"
        )
    if d.observation_count > len(d.observations):
        lines.append(f"  … and {d.observation_count - len(d.observations)} older")
    if d.entries:
        lines += ["", "Journal entries:"]
        for e in d.entries:
            when = "deleted" if e.entry_date is None else local_date(e.entry_date, tz)
            lines.append(f"  • {e.entry_uuid} ({when}; linked {e.times_linked}× by {e.source})")
    if d.relations:
        lines += ["", "Relations:"]
        for r in d.relations:
            other = f"#{r.other_id} {one_line(r.other_content, 120)}"
            state = "" if r.other_status == "active" else f" [{STATUS_WORDS.get(r.other_status)}]"
            text = f"{r.relation} {other}" if r.direction == "out" else f"{other} {r.relation} it"
            lines.append(f"  • {text}{state}")
    if d.aliases:
        lines += ["", "Also worded as:", *(f"  • {one_line(a, 160)}" for a in d.aliases)]
    if d.audit:
        lines += ["", "History:", *_history_lines(d.audit, tz)]
    return "\n".join(lines)


def _history_lines(rows: Sequence[AuditRow], tz: str) -> list[str]:
    lines = []
    for a in rows:
        by = ACTOR_WORDS.get(a.actor, a.actor)
        change = (
            a.action
            if a.old_status == a.new_status
            else (
                f"{a.action}: {STATUS_WORDS.get(a.old_status)} → {STATUS_WORDS.get(a.new_status)}"
            )
        )
        lines.append(f"  • {local_datetime(a.at, tz)} {change} by {by} — {one_line(a.reason)}")
    return lines


async def pin_command(s: MemoryServices, call: CommandCall, rest: str, *, pin: bool) -> TurnReply:
    ids = parse_ids(rest, 1)
    if ids is None:
        return usage("pin" if pin else "unpin")
    done = await pin_pattern(s.db, call.chat_id, ids[0], pin, actor="person")
    if done is None:
        return not_found(ids[0])
    text = one_line(done.content, 200)
    if pin and done.status not in ("active", "disputed"):
        word = STATUS_WORDS.get(done.status, done.status)
        return TurnReply(f"Memory #{ids[0]} is {word}; only a live memory can be pinned.")
    if not done.changed:
        return TurnReply(f"#{ids[0]} was already {'pinned' if pin else 'not pinned'}: {text}")
    if pin:
        return TurnReply(f"📌 Pinned #{ids[0]}: {text} — always in your profile, never fading.")
    return TurnReply(f"Unpinned #{ids[0]}: {text}")


async def pin_sub(s: MemoryServices, call: CommandCall, rest: str) -> TurnReply:
    return await pin_command(s, call, rest, pin=True)


async def unpin_sub(s: MemoryServices, call: CommandCall, rest: str) -> TurnReply:
    return await pin_command(s, call, rest, pin=False)


Sub = Callable[[MemoryServices, CommandCall, str], Awaitable[TurnReply]]
SUBCOMMANDS: dict[str, Sub] = {
    "list": list_command,
    "search": search_command,
    "why": why_command,
    "pin": pin_sub,
    "unpin": unpin_sub,
}
