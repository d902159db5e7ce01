"""What the person confirms with a button: ``/forget <topic>``, ``/memory forget <id>`` and
``/memory merge <id1> <id2>`` (seed 004 Test 8-forget, seed 000 "User-facing memory controls").

``/forget SingPass`` lists the chat's live memories about the topic
(:func:`memory.patterns.views.topic_matches`: the retrieval's matches and the full-text ones) with
a ``[Forget n]`` button each, ``[Forget all]`` and ``[Keep]``, and — when retained messages or
episode summaries mention the topic — a button deleting those too, so that neither the window
nor "Earlier in this conversation" brings the topic back. ``/memory forget 12`` is the same
flow for one memory. A tap (:mod:`actors.chat.callbacks`: answered at once, then run in the
chat's order in one transaction with the token's use) deprecates with the reason
:data:`memory.patterns.controls.FORGOTTEN_BY_PERSON` (audited, by the person) and edits the
message to show what was forgotten and what is left, with fresh buttons for the rest; an
expired, used (double tap) or foreign button changes nothing.

``/memory merge 12 14`` shows both and asks; ``[Merge]`` runs the merge job's merge of that pair
(:func:`memory.patterns.controls.merge_two`), ``[Keep both]`` changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from actors.agent.turn import TurnReply
from actors.chat.callbacks import Action, CallbackContext, CallbackTable, keyboard
from actors.chat.command_base import CommandCall
from actors.chat.memory_commands import MemoryServices, Sub, not_found, one_line, parse_ids, usage
from memory.patterns.controls import (
    FORGETTABLE,
    FORGOTTEN_BY_PERSON,
    Mentions,
    check_mergeable,
    count_messages_mentioning,
    delete_messages_mentioning,
    forget_pattern,
    forget_patterns,
    merge_two,
)
from memory.patterns.views import Item, items_by_id, topic_matches
from runtime.concurrency import both
from runtime.db import Connection, Queries
from runtime.words import count

FORGET_USAGE = "Usage: /forget <topic> — e.g. /forget SingPass"
MAX_TOPIC_CHARS = 200
LABEL_CHARS = 28
LIVE = ("active", "disputed")


def short(text: str, limit: int = LABEL_CHARS) -> str:
    return one_line(text, limit)


def _flow(ids: Sequence[int], topic: str | None, mentions: Mentions | None) -> dict[str, Any]:
    m = mentions or Mentions(0, 0)
    return {"ids": list(ids), "topic": topic, "messages": m.messages, "episodes": m.episodes}


def mentions_text(m: Mentions) -> str:
    """``3 messages and 1 summary``."""
    parts = [count(m.messages, "message")] if m.messages else []
    parts += [count(m.episodes, "summary")] if m.episodes else []
    return " and ".join(parts) or "nothing"


async def render(
    db: Queries,
    chat_id: int,
    flow: Action,
    *,
    kept: bool = False,
    note: str = "",
    items: Sequence[Item] | None = None,
) -> tuple[str, list[list[tuple[str, Action]]]]:
    """The flow's message and buttons now: what was forgotten, what is still remembered (with a
    button each while not ``kept``), the offer to delete the messages that mention the topic.
    ``items``: the flow's patterns as just read (else they are read)."""
    ids, topic = list(flow["ids"]), flow.get("topic")
    mentions = Mentions(int(flow.get("messages", 0)), int(flow.get("episodes", 0)))
    if items is None:
        items = await items_by_id(db, chat_id, ids)
    live = [i for i in items if i.status in LIVE]
    gone = [i for i in items if i.status == "deprecated"]
    lines = [f"Memories about “{topic}”:" if topic else "Memory:"]
    lines += [f"✓ Forgotten: {one_line(i.content, 200)} (#{i.id})" for i in gone]
    if live:
        if gone:
            lines.append("Still remembered:" if not kept else "Kept:")
        elif kept:
            lines.append("Kept:")
        lines += [f"{n}. {one_line(i.content, 200)} (#{i.id})" for n, i in enumerate(live, 1)]
    if mentions.total:
        lines.append(f"({mentions_text(mentions)} in our conversation still mention it.)")
    if note:
        lines.append(note)
    rows: list[list[tuple[str, Action]]] = []
    if not kept:
        base = _flow(ids, topic, mentions)
        for n, i in enumerate(live, 1):
            label = f"Forget {n}: {short(i.content)}" if len(live) > 1 else "Forget"
            rows.append([(label, {"name": "forget_one", "pick": i.id, **base})])
        if live:
            end: list[tuple[str, Action]] = [("Keep", {"name": "forget_keep", **base})]
            if len(live) > 1:
                end.insert(0, ("Forget all", {"name": "forget_all", **base}))
            rows.append(end)
        if mentions.total and topic:
            label = f"Also delete the {mentions_text(mentions)} that mention it"
            rows.append([(label, {"name": "forget_messages", **base})])
    return "\n".join(lines), rows


# --- the commands -----------------------------------------------------------------------------


async def forget_topic(s: MemoryServices, call: CommandCall) -> TurnReply:
    """``/forget <topic>``."""
    topic = one_line(call.args, 10_000)
    if not topic or len(topic) > MAX_TOPIC_CHARS:
        return TurnReply(FORGET_USAGE)
    matches, mentions = await both(
        lambda: topic_matches(
            s.db, s.embedder, call.chat_id, topic, now=call.now, timezone=s.timezone,
            thresholds=s.thresholds, lexicons=s.lexicons, planner=s.planner,
        ),
        lambda: count_messages_mentioning(s.db, call.chat_id, topic),
    )  # fmt: skip
    if not matches and not mentions.total:
        return TurnReply(f"I have nothing about “{topic}” in memory.")
    flow = _flow([i.id for i in matches], topic, mentions)
    return await _ask(s, call.chat_id, flow, matches)


async def _ask(
    s: MemoryServices, chat_id: int, flow: Action, items: Sequence[Item] | None = None
) -> TurnReply:
    text, rows = await render(s.db, chat_id, flow, items=items)
    kb = await keyboard(s.db, chat_id, rows) if rows else None
    return TurnReply(text, keyboard=kb)


async def memory_forget(s: MemoryServices, call: CommandCall, rest: str) -> TurnReply:
    """``/memory forget <id>``: asks first."""
    ids = parse_ids(rest, 1)
    if ids is None:
        return usage("forget")
    found = await items_by_id(s.db, call.chat_id, ids)
    if not found:
        return not_found(ids[0])
    item = found[0]
    if item.status not in FORGETTABLE:
        word = "merged into another memory" if item.status == "merged" else "already forgotten"
        return TurnReply(f"Memory #{item.id} was {word}: {one_line(item.content, 200)}")
    return await _ask(s, call.chat_id, _flow([item.id], None, None), found)


async def memory_merge(s: MemoryServices, call: CommandCall, rest: str) -> TurnReply:
    """``/memory merge <id1> <id2>``: asks first."""
    ids = parse_ids(rest, 2)
    if ids is None:
        return usage("merge")
    problem = await check_mergeable(s.db, call.chat_id, ids[0], ids[1])
    if problem:
        return TurnReply(f"Cannot merge: {problem}.")
    a, b = await items_by_id(s.db, call.chat_id, ids)
    text = "\n".join([
        "Merge these two memories into one?",
        f"#{a.id} {one_line(a.content, 200)}", f"#{b.id} {one_line(b.content, 200)}",
        "The stronger one stays, with the evidence, links and wording of both.",
    ])  # fmt: skip
    action = {"a": a.id, "b": b.id}
    kb = await keyboard(s.db, call.chat_id, [[
        ("Merge", {"name": "merge_confirm", **action}),
        ("Keep both", {"name": "merge_keep", **action}),
    ]])  # fmt: skip
    return TurnReply(text, keyboard=kb)


def confirmations() -> dict[str, Sub]:
    """The ``/memory`` sub-commands of this module (for :func:`memory_commands`)."""
    return {"forget": memory_forget, "merge": memory_merge}


# --- the taps ---------------------------------------------------------------------------------


async def _show(
    ctx: CallbackContext, flow: Action | None = None, *, kept: bool = False, note: str = ""
) -> None:
    text, rows = await render(ctx.db, ctx.chat_id, flow or ctx.action, kept=kept, note=note)
    kb = await ctx.new_keyboard(rows) if rows else None
    await ctx.edit(text, keyboard=kb)


async def tap_forget_one(ctx: CallbackContext) -> None:
    pick = int(ctx.action["pick"])
    if pick in ctx.action["ids"]:
        await forget_pattern(ctx.db, ctx.chat_id, pick, reason=FORGOTTEN_BY_PERSON,
                             actor="person")  # fmt: skip
    await _show(ctx)


async def tap_forget_all(ctx: CallbackContext) -> None:
    await forget_patterns(ctx.db, ctx.chat_id, [int(i) for i in ctx.action["ids"]],
                          reason=FORGOTTEN_BY_PERSON, actor="person")  # fmt: skip
    await _show(ctx)


async def tap_keep(ctx: CallbackContext) -> None:
    await _show(ctx, kept=True)


async def tap_forget_messages(ctx: CallbackContext) -> None:
    topic = str(ctx.action.get("topic") or "")
    deleted = await delete_messages_mentioning(ctx.db, ctx.chat_id, topic)
    note = f"✓ Deleted {mentions_text(deleted)} that mentioned it."
    await _show(ctx, {**ctx.action, "messages": 0, "episodes": 0}, note=note)


async def tap_merge(ctx: CallbackContext) -> None:
    a, b = int(ctx.action["a"]), int(ctx.action["b"])
    # the tap's transaction (a Connection): the merge is a savepoint in it
    done = await merge_two(cast(Connection, ctx.db), ctx.chat_id, a, b)
    if done.problem:
        await ctx.edit(f"Nothing was merged: {done.problem}.")
        return
    [survivor] = await items_by_id(ctx.db, ctx.chat_id, [done.survivor or 0])
    await ctx.edit(f"✓ Merged #{done.loser} into #{survivor.id}: {one_line(survivor.content, 200)}")


async def tap_merge_keep(ctx: CallbackContext) -> None:
    items = await items_by_id(ctx.db, ctx.chat_id, [int(ctx.action["a"]), int(ctx.action["b"])])
    await ctx.edit("Kept both:\n" + "\n".join(_line(i) for i in items))


def _line(i: Item) -> str:
    return f"#{i.id} {one_line(i.content, 200)}"


def register_taps(table: CallbackTable) -> None:
    """The handlers of this module's buttons."""
    table.register("forget_one", tap_forget_one, answer="Forgetting…")
    table.register("forget_all", tap_forget_all, answer="Forgetting all of them…")
    table.register("forget_keep", tap_keep, answer="Kept.")
    table.register("forget_messages", tap_forget_messages, answer="Deleting those messages…")
    table.register("merge_confirm", tap_merge, answer="Merging…")
    table.register("merge_keep", tap_merge_keep, answer="Kept both.")
