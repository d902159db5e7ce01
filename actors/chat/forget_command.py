"""What the person confirms with a button: ``/forget <topic>``, ``/memory forget <id>`` and
``/memory merge <id1> <id2>`` (seed 004 Test 8-forget, seed 000 "User-facing memory controls").

``/forget SingPass`` lists the chat's live memories about the topic
(:func:`memory.patterns.views.topic_matches`: the retrieval's matches and the full-text ones of
its positive words, :mod:`memory.patterns.topic`) with a ``[Forget n]`` button each,
``[Forget all]`` and ``[Keep]``, and — when retained messages or episode summaries mention the
topic — a button deleting those too (every conversation row that mentions it, the episodes, and
the text of the queues' copies: :mod:`memory.patterns.forgetting`), so that neither the window
nor "Earlier in this conversation" brings the topic back. ``/memory forget 12`` is the same
flow for one memory, and :func:`forget_question` is its question for any caller (the model's
``forget_memory``). A tap (:mod:`actors.chat.callbacks`: answered at once, then run in the
chat's order in one transaction with the token's use) forgets with the reason
:data:`memory.patterns.controls.FORGOTTEN_BY_PERSON`: an audit row (no text) stays, the
pattern and everything derived from it go; the message is edited to say how many were
forgotten (never their text) and what is left, with fresh buttons for the rest, and the copies
of its earlier texts are scrubbed. The topic lives in ``forget_flows`` (a button carries the
flow's id, never text) until its messages are deleted or its buttons die. An expired, used
(double tap) or foreign button changes nothing.

``/memory merge 12 14`` shows both and asks; ``[Merge]`` runs the merge job's merge of that pair
(:func:`memory.patterns.controls.merge_two`), ``[Keep both]`` changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from actors.agent.turn import TurnReply
from actors.chat.callbacks import TOKEN_TTL, Action, CallbackContext, CallbackTable, keyboard
from actors.chat.command_base import CommandCall
from actors.chat.memory_commands import MemoryServices, Sub, not_found, one_line, parse_ids, usage
from actors.telegram.keyboards import InlineKeyboard
from memory.patterns.controls import (
    FORGETTABLE,
    FORGOTTEN_BY_PERSON,
    check_mergeable,
    forget_pattern,
    forget_patterns,
    merge_two,
)
from memory.patterns.forgetting import (
    Mentions,
    count_messages_mentioning,
    delete_messages_mentioning,
    scrub_flow_copies,
)
from memory.patterns.views import Item, items_by_id, topic_matches
from runtime.concurrency import both
from runtime.db import Connection, Queries
from runtime.words import count

FORGET_USAGE = "Usage: /forget <topic> — e.g. /forget SingPass"
MAX_TOPIC_CHARS = 200
LABEL_CHARS = 28
#: a memory about to be forgotten is shown this short (the full text is never quoted back)
LINE_CHARS = 80
TOPIC_CHARS = 60
LIVE = ("active", "disputed")


def short(text: str, limit: int = LABEL_CHARS) -> str:
    return one_line(text, limit)


# --- the flow's topic: kept apart from the buttons (their actions carry its id, no text) -----

_NEW_FLOW = """
WITH purge AS (DELETE FROM forget_flows WHERE chat_id = $1 AND created_at < now() - $3::interval)
INSERT INTO forget_flows (chat_id, topic) VALUES ($1, $2) RETURNING id
"""


async def new_flow(db: Queries, chat_id: int, topic: str) -> int:
    """Keep ``topic`` for one ``/forget`` flow (the chat's flows whose buttons are dead go)."""
    return int(await db.fetchval(_NEW_FLOW, chat_id, topic, TOKEN_TTL))


async def flow_topic(db: Queries, chat_id: int, flow: Action) -> str | None:
    fid = flow.get("flow")
    if fid is None:
        return None
    topic = await db.fetchval(
        "SELECT topic FROM forget_flows WHERE chat_id = $1 AND id = $2", chat_id, int(fid)
    )
    return None if topic is None else str(topic)


def _flow(
    ids: Sequence[int],
    flow_id: int | None,
    mentions: Mentions | None,
    gone: Sequence[int] = (),
) -> dict[str, Any]:
    m = mentions or Mentions(0, 0)
    return {
        "ids": list(ids),
        "gone": list(gone),
        "flow": flow_id,
        "messages": m.messages,
        "episodes": m.episodes,
    }


def _gone(flow: Action) -> list[int]:
    return [int(i) for i in flow.get("gone", [])]


def mentions_text(m: Mentions) -> str:
    """``3 messages and 1 summary``."""
    parts = [count(m.messages, "message")] if m.messages else []
    parts += [count(m.episodes, "summary")] if m.episodes else []
    return " and ".join(parts) or "nothing"


def forgotten_text(ids: Sequence[int]) -> str:
    """``✓ Forgotten: 2 memories (#12, #13).`` — by count, never their text."""
    n = len(ids)
    refs = ", ".join(f"#{i}" for i in ids)
    return f"✓ Forgotten: {n} memor{'y' if n == 1 else 'ies'} ({refs})."


async def render(
    db: Queries,
    chat_id: int,
    flow: Action,
    *,
    kept: bool = False,
    note: str = "",
    items: Sequence[Item] | None = None,
) -> tuple[str, list[list[tuple[str, Action]]]]:
    """The flow's message and buttons now: what was forgotten (by count), what is still
    remembered (with a button each while not ``kept``), the offer to delete the messages that
    mention the topic. ``items``: the flow's patterns as just read (else they are read)."""
    gone = _gone(flow)
    ids = [int(i) for i in flow["ids"] if int(i) not in gone]
    topic = await flow_topic(db, chat_id, flow)
    mentions = Mentions(int(flow.get("messages", 0)), int(flow.get("episodes", 0)))
    if items is None:
        items = await items_by_id(db, chat_id, ids)
    live = [i for i in items if i.status in LIVE and i.id in ids]
    if topic:
        lines = [f"Memories about “{one_line(topic, TOPIC_CHARS)}”:"]
    else:
        lines = ["Memory:" if len(flow["ids"]) <= 1 else "Memories:"]
    if gone:
        lines.append(forgotten_text(gone))
    if live:
        if gone:
            lines.append("Still remembered:" if not kept else "Kept:")
        elif kept:
            lines.append("Kept:")
        lines += [
            f"{n}. {one_line(i.content, LINE_CHARS)} (#{i.id})" for n, i in enumerate(live, 1)
        ]
    if mentions.total and topic:
        lines.append(f"({mentions_text(mentions)} in our conversation still mention it.)")
    if note:
        lines.append(note)
    rows: list[list[tuple[str, Action]]] = []
    if not kept:
        base = _flow(flow["ids"], flow.get("flow"), mentions, gone)
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
            s.db,
            s.embedder,
            call.chat_id,
            topic,
            now=call.now,
            timezone=s.timezone,
            thresholds=s.thresholds,
            lexicons=s.lexicons,
            planner=s.planner,
        ),
        lambda: count_messages_mentioning(s.db, call.chat_id, topic),
    )
    if not matches and not mentions.total:
        return TurnReply(f"I have nothing about “{one_line(topic, TOPIC_CHARS)}” in memory.")
    flow = _flow([i.id for i in matches], await new_flow(s.db, call.chat_id, topic), mentions)
    return await _ask(s.db, call.chat_id, flow, matches)


async def _ask(
    db: Queries, chat_id: int, flow: Action, items: Sequence[Item] | None = None
) -> TurnReply:
    text, rows = await render(db, chat_id, flow, items=items)
    kb = await keyboard(db, chat_id, rows) if rows else None
    return TurnReply(text, keyboard=kb)


async def forget_question(
    db: Queries, chat_id: int, pattern_ids: Sequence[int]
) -> tuple[str, InlineKeyboard | None]:
    """The confirmation to forget the chat's patterns ``pattern_ids`` (``/memory forget``'s,
    and the model's ``forget_memory``'s): the text and its buttons; nothing is forgotten
    before the person taps."""
    reply = await _ask(db, chat_id, _flow(list(pattern_ids), None, None))
    return reply.text, reply.keyboard


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
    return await _ask(s.db, call.chat_id, _flow([item.id], None, None), found)


async def memory_merge(s: MemoryServices, call: CommandCall, rest: str) -> TurnReply:
    """``/memory merge <id1> <id2>``: asks first."""
    ids = parse_ids(rest, 2)
    if ids is None:
        return usage("merge")
    problem = await check_mergeable(s.db, call.chat_id, ids[0], ids[1])
    if problem:
        return TurnReply(f"Cannot merge: {problem}.")
    a, b = await items_by_id(s.db, call.chat_id, ids)
    text = "\n".join(
        [
            "Merge these two memories into one?",
            f"#{a.id} {one_line(a.content, 200)}",
            f"#{b.id} {one_line(b.content, 200)}",
            "The stronger one stays, with the evidence, links and wording of both.",
        ]
    )
    action = {"a": a.id, "b": b.id}
    kb = await keyboard(
        s.db,
        call.chat_id,
        [
            [
                ("Merge", {"name": "merge_confirm", **action}),
                ("Keep both", {"name": "merge_keep", **action}),
            ]
        ],
    )
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


async def _forgot(ctx: CallbackContext, ids: Sequence[int]) -> Action:
    """The flow with ``ids`` forgotten; the copies of the flow's message scrubbed."""
    await scrub_flow_copies(ctx.db, ctx.chat_id, ctx.message_id)
    return {**ctx.action, "gone": list(dict.fromkeys([*_gone(ctx.action), *ids]))}


async def tap_forget_one(ctx: CallbackContext) -> None:
    pick = int(ctx.action["pick"])
    done: list[int] = []
    if pick in ctx.action["ids"] and pick not in _gone(ctx.action):
        f = await forget_pattern(
            ctx.db, ctx.chat_id, pick, reason=FORGOTTEN_BY_PERSON, actor="person"
        )
        done = [pick] if f is not None and f.outcome != "merged" else []
    await _show(ctx, await _forgot(ctx, done))


async def tap_forget_all(ctx: CallbackContext) -> None:
    todo = [int(i) for i in ctx.action["ids"] if int(i) not in _gone(ctx.action)]
    done = await forget_patterns(
        ctx.db, ctx.chat_id, todo, reason=FORGOTTEN_BY_PERSON, actor="person"
    )
    await _show(ctx, await _forgot(ctx, [f.pattern_id for f in done if f.outcome != "merged"]))


async def tap_keep(ctx: CallbackContext) -> None:
    await _show(ctx, kept=True)


async def tap_forget_messages(ctx: CallbackContext) -> None:
    topic = await flow_topic(ctx.db, ctx.chat_id, ctx.action)
    deleted = Mentions(0, 0)
    if topic:
        deleted = await delete_messages_mentioning(ctx.db, ctx.chat_id, topic)
        await ctx.db.execute(
            "DELETE FROM forget_flows WHERE chat_id = $1 AND id = $2",
            ctx.chat_id,
            int(ctx.action["flow"]),
        )
    flow = await _forgot(ctx, [])
    note = f"✓ Deleted {mentions_text(deleted)} that mentioned it."
    await _show(ctx, {**flow, "flow": None, "messages": 0, "episodes": 0}, note=note)


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
