"""``/forget everything``: the whole chat erased, after a button and a typed word (issue 24
item 5).

1. ``/forget everything`` says what would go (messages, memories, journal entries, routines)
   with ``[Erase everything…]`` and ``[Cancel]``;
2. the tap (by whoever asked: in a group, nobody else) stores the request (``erase_requests``)
   and asks for the word :data:`WORD`, typed within :data:`ASK_TTL`;
3. the word, as a message of its own from the same person (the chat actor hands it to
   :meth:`EraseConfirm.typed`), erases every row of the chat in one transaction
   (:func:`memory.erase.chat.erase_chat`, the reply queued in it), then its vault folder; the
   chat actor forgets what it holds in memory (:class:`actors.errors.ChatErased`). The reply
   is the one row left of the chat.

Anything else typed meanwhile is an ordinary message; the request dies after :data:`ASK_TTL`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path

import attrs

from actors.agent.turn import TurnReply
from actors.chat.callbacks import CallbackContext, CallbackTable, keyboard
from actors.chat.command_base import CommandCall
from actors.queues import outbox
from memory.erase.chat import Erased, count_chat_rows, erase_chat
from memory.vault.settings import chat_folder, vault_root
from runtime.db import Connection, Database
from runtime.words import count

ARGUMENT = "everything"
WORD = "ERASE"
ASK_TTL = timedelta(minutes=5)
NOTHING = "I hold nothing of this chat: there is nothing to erase."
CANCELLED = "Nothing was erased."
NOT_YOURS = "Nothing was erased: only who asked (/forget everything) can confirm."
ASK = (
    f"To erase everything, send the word {WORD} as a message within 5 minutes. "
    "Anything else keeps everything."
)


def vault_folder(vault_dir: Path | None, home: Path) -> Callable[[int], Path | None]:
    """Where a chat's vault folder is (VAULT_DIR, else ``ENGRAM_HOME/vault``), VAULT on or off:
    a vault written before VAULT=off is erased too."""
    root = vault_root(vault_dir, home)
    return lambda chat_id: chat_folder(root, chat_id)


def is_everything(args: str) -> bool:
    return args.strip().lower() == ARGUMENT


def is_word(text: str) -> bool:
    """The confirmation word as a message of its own (any case, trailing ``.``/``!`` allowed)."""
    return text.strip().rstrip(".!").strip().upper() == WORD


def what(rows: Mapping[str, int]) -> str:
    """``12 messages, 3 memories, 1 journal entry and 2 routines`` (what matters to a person)."""
    parts = [
        count(rows.get("chat_messages", 0), "message"),
        count(rows.get("patterns", 0), "memory", "memories"),
        count(rows.get("entries", 0), "journal entry", "journal entries"),
        count(rows.get("cron_jobs", 0), "routine or reminder", "routines and reminders"),
    ]
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def done_text(rows: Mapping[str, int], *, paired: bool) -> str:
    text = (
        f"✓ Erased everything of this chat: {what(rows)}, with the summaries, usage records "
        "and the markdown vault. I remember nothing of you now."
    )
    if paired:
        text += " This chat's pairing is erased too: talking to me again may need a new code."
    return text


async def forget_everything(db: Database, call: CommandCall) -> TurnReply:
    """``/forget everything``: what would go, and the buttons."""
    rows = await count_chat_rows(db, call.chat_id)
    rows.pop("inbox", None)  # this very command
    if not rows:
        return TurnReply(NOTHING)
    text = (
        f"Erase everything of this chat? {what(rows)}, the summaries, the usage records and "
        "the markdown vault are deleted for good; this cannot be undone."
    )
    action = {"by": call.sender_id}
    kb = await keyboard(
        db,
        call.chat_id,
        [
            [
                ("Erase everything…", {"name": "erase_ask", **action}),
                ("Cancel", {"name": "erase_cancel"}),
            ]
        ],
    )
    return TurnReply(text, keyboard=kb)


async def tap_ask(ctx: CallbackContext) -> None:
    by = ctx.action.get("by")
    if by is not None and int(by) != ctx.user_id:
        await ctx.edit(NOT_YOURS)
        return
    await ctx.db.execute(
        "INSERT INTO erase_requests (chat_id, user_id, message_id) VALUES ($1, $2, $3) "
        "ON CONFLICT (chat_id) DO UPDATE SET user_id = EXCLUDED.user_id, "
        "message_id = EXCLUDED.message_id, asked_at = now()",
        ctx.chat_id,
        ctx.user_id,
        ctx.message_id,
    )
    kb = await ctx.new_keyboard([[("Cancel", {"name": "erase_cancel"})]])
    await ctx.edit(ASK, keyboard=kb)


async def tap_cancel(ctx: CallbackContext) -> None:
    await ctx.db.execute("DELETE FROM erase_requests WHERE chat_id = $1", ctx.chat_id)
    await ctx.edit(CANCELLED)


def register_taps(table: CallbackTable) -> None:
    table.register("erase_ask", tap_ask, answer="Type the word to confirm.")
    table.register("erase_cancel", tap_cancel, answer="Nothing was erased.")


@attrs.frozen
class EraseConfirm:
    """The typed word's side: erase the chat when it has a live request from this person."""

    db: Database
    #: the chat's vault folder (None: no vault)
    folder: Callable[[int], Path | None] = lambda chat_id: None

    async def typed(self, chat_id: int, user_id: int | None) -> Erased | None:
        """Erase ``chat_id`` (see the module docstring) if it waits for the word from
        ``user_id``; None (nothing changed) when it does not."""

        async def pending(conn: Connection) -> bool:
            row = await conn.fetchrow(
                "SELECT user_id FROM erase_requests WHERE chat_id = $1 "
                "AND asked_at > now() - $2::interval FOR UPDATE",
                chat_id,
                ASK_TTL,
            )
            return row is not None and (row["user_id"] is None or row["user_id"] == user_id)

        async def reply(conn: Connection, rows: dict[str, int]) -> None:
            text = done_text(rows, paired=rows.get("allowed_chats", 0) > 0)
            await outbox.enqueue_reply(conn, chat_id, text)

        return await erase_chat(
            self.db, chat_id, folder=self.folder(chat_id), check=pending, then=reply
        )
