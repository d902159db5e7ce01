"""The person confirms what the model asked to destroy (issue 20, row 6).

The model's ``forget_memory`` and ``link_memories(..., "supersedes")`` never act: they ask, through
the turn's :class:`ModelAsks` (:class:`actors.agent.turn.TurnConfirmations`), which sends with
the turn's commit, before its reply:

* a forget: the ``/memory forget`` message and buttons
  (:func:`actors.chat.forget_command.render`: ``[Forget]`` ``[Keep]``, or ``[Forget n]`` …
  ``[Forget all]`` for several), handled by the ``/forget`` flow's own taps;
* a supersede: both memories named, ``[Confirm]`` (the newer one supersedes the older one,
  by the person, audited) or ``[Keep]``.

``/memory restore <id>`` undoes a supersede within 24 hours
(:func:`memory.patterns.restore.restore_superseded`); a forgotten memory is gone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import attrs

from actors.agent.turn import TurnReply
from actors.chat.callbacks import Action, CallbackContext, CallbackTable, Rows, keyboard
from actors.chat.command_base import CommandCall
from actors.chat.forget_command import render
from actors.chat.memory_commands import MemoryServices, Sub, one_line, parse_ids, usage
from actors.queues import outbox
from memory.patterns.controls import link_patterns
from memory.patterns.restore import restore_superseded
from memory.patterns.views import Item, items_by_id
from runtime.db import Connection, Queries

FORGET_HEAD = "I was asked to forget this. Only you can decide:"
SUPERSEDE_HEAD = "I was asked to replace an old memory with a newer one. Only you can decide:"


@attrs.define
class ModelAsks:
    """One turn's asks in one chat (duplicates asked once), sent by :meth:`send`."""

    chat_id: int
    forget: list[int] = attrs.field(factory=list)
    supersede: list[tuple[int, int]] = attrs.field(factory=list)

    async def ask_forget(self, ids: Sequence[int]) -> None:
        self.forget += [i for i in ids if i not in self.forget]

    async def ask_supersede(self, old: int, new: int) -> None:
        if (old, new) not in self.supersede:
            self.supersede.append((old, new))

    async def send(self, conn: Connection, inbox_ids: Sequence[int]) -> None:
        """Queue the confirmation messages (buttons issued in ``conn``: the turn's commit)."""
        if self.forget:
            text, buttons = await render(conn, self.chat_id, {"ids": list(self.forget)})
            await _enqueue(conn, self.chat_id, f"{FORGET_HEAD}\n{text}", buttons, inbox_ids)
        for old, new in self.supersede:
            items = await items_by_id(conn, self.chat_id, [old, new])
            if len(items) < 2:
                continue  # gone meanwhile
            action = {"old": old, "new": new}
            rows: list[list[tuple[str, Action]]] = [
                [
                    ("Confirm", {"name": "supersede_confirm", **action}),
                    ("Keep", {"name": "supersede_keep", **action}),
                ]
            ]
            await _enqueue(conn, self.chat_id, supersede_text(items[0], items[1]), rows, inbox_ids)


def model_asks(chat_id: int) -> ModelAsks:
    """A turn's asks (the agent's ``confirmations`` factory)."""
    return ModelAsks(chat_id)


async def _enqueue(
    conn: Queries,
    chat_id: int,
    text: str,
    rows: Rows,
    inbox_ids: Sequence[int],
) -> None:
    if not rows:
        return  # nothing left to confirm (already forgotten meanwhile)
    kb = await keyboard(conn, chat_id, rows)
    await outbox.enqueue_reply(
        conn, chat_id, text, None, None, inbox_ids, reply_markup=kb.to_json()
    )


def supersede_text(old: Item, new: Item) -> str:
    return "\n".join(
        [
            SUPERSEDE_HEAD,
            f"Old: {one_line(old.content, 200)} (#{old.id})",
            f"New: {one_line(new.content, 200)} (#{new.id})",
            "Confirm: the old one is no longer used (/memory restore undoes it within a day).",
        ]
    )


# --- /memory restore -------------------------------------------------------------------------


async def memory_restore(s: MemoryServices, call: CommandCall, rest: str) -> TurnReply:
    """``/memory restore <id>``: a memory replaced less than a day ago is active again."""
    ids = parse_ids(rest, 1)
    if ids is None:
        return usage("restore")
    async with s.db.transaction() as conn:
        done = await restore_superseded(conn, call.chat_id, ids[0], now=call.now)
    if done.problem:
        return TurnReply(done.problem)
    return TurnReply(f"✓ Restored: {one_line(done.content, 200)} (#{done.pattern_id})")


def subcommands() -> dict[str, Sub]:
    """The ``/memory`` sub-commands of this module (for :func:`memory_commands`)."""
    return {"restore": memory_restore}


# --- the taps ---------------------------------------------------------------------------------


async def tap_supersede(ctx: CallbackContext) -> None:
    old, new = int(ctx.action["old"]), int(ctx.action["new"])
    # the tap's transaction (a Connection): the supersede is a savepoint in it
    problem = await link_patterns(
        cast(Connection, ctx.db), ctx.chat_id, new, old, "supersedes", actor="person"
    )
    if problem:
        await ctx.edit(f"Nothing changed: {problem}.")
        return
    items = await items_by_id(ctx.db, ctx.chat_id, [old, new])
    by_id = {i.id: i for i in items}
    await ctx.edit(
        f"✓ Replaced: {one_line(by_id[old].content, 200)} (#{old})\n"
        f"by: {one_line(by_id[new].content, 200)} (#{new})\n"
        f"(/memory restore {old} undoes it within a day.)"
    )


async def tap_supersede_keep(ctx: CallbackContext) -> None:
    items = await items_by_id(ctx.db, ctx.chat_id, [int(ctx.action["old"]), int(ctx.action["new"])])
    await ctx.edit("Kept both:\n" + "\n".join(f"#{i.id} {one_line(i.content, 200)}" for i in items))


def register_taps(table: CallbackTable) -> None:
    """The handlers of the supersede buttons (a forget's are the ``/forget`` flow's)."""
    table.register("supersede_confirm", tap_supersede, answer="Replacing…")
    table.register("supersede_keep", tap_supersede_keep, answer="Kept both.")
