"""Inline buttons that act: tokens, the table of callback handlers, and the tap.

A button's ``callback_data`` is a short opaque token (12 characters of ``secrets``; no secret
and no action in it, always within Telegram's 64 bytes) mapped in ``callback_tokens`` to an
*action*: a JSON object whose ``"name"`` picks the handler, the rest is the handler's own
(``{"name": "forget", "pattern_id": 12}``). A token belongs to one chat, acts at most once and
dies :data:`TOKEN_TTL` (24 h) after it was issued; the tokens of one keyboard die together
when a tap edits their message.

Building (a command answering with buttons)::

    kb = await callbacks.keyboard(db, chat_id, [
        [("Forget", {"name": "forget", "pattern_id": 12})],
        [("Forget all", {"name": "forget_all", "ids": [12, 13]}), ("Keep", {"name": "keep"})],
    ])
    return TurnReply("Forget these?", keyboard=kb)

Handling (registered once, at composition)::

    async def forget(tap: CallbackContext) -> None:
        await deprecate(tap.db, tap.chat_id, tap.action["pattern_id"])  # same transaction
        await tap.edit("Forgotten: ...")                                  # buttons go

    table.register("forget", forget, answer="Forgetting...")

The tap: the router answers the callback query at once (``answerCallbackQuery``: the spinner
stops) with the registered ``answer`` text, or "This button has expired." when the token is
unknown in that chat, used or too old (:meth:`Callbacks.answer_text`, a read). The chat actor
then, in the chat's order, redeems the token and runs the handler in ONE transaction with the
inbox row's end and the outbox rows the handler queued (:meth:`Callbacks.tap`): a crash or an
error rolls it all back and the token is still unused for the retry, and a second tap (a double
tap, a sibling button of an edited keyboard) finds the token used and changes nothing.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

import attrs
import trio

from actors.queues import inbox, outbox
from actors.queues.outbox import ParseMode
from actors.telegram.keyboards import Button, InlineKeyboard
from actors.telegram.types import CallbackQuery
from runtime.db import Database, Queries
from runtime.errors import DatabaseError
from runtime.logs import get_logger

log = get_logger(__name__)

TOKEN_TTL = timedelta(hours=24)
#: tokens this old are deleted when the chat's next keyboard is issued (dead long before)
PURGE_AFTER = timedelta(days=7)
EXPIRED = "This button has expired."
#: Telegram shows at most 200 characters of an answer
MAX_ANSWER = 200

Action = Mapping[str, Any]
#: a keyboard to build: rows of (label, action) or ready buttons (e.g. a url)
Rows = Sequence[Sequence[tuple[str, Action] | Button]]


@attrs.frozen
class Redeemed:
    """The token was live and is now used: its ``action``, and the ``keyboard`` it belongs to."""

    action: Action
    keyboard: str


@attrs.frozen
class Expired:
    """Issued in this chat more than :data:`TOKEN_TTL` ago, never used."""


@attrs.frozen
class Used:
    """Already acted on (a double tap), or its keyboard was replaced by an edit."""


@attrs.frozen
class NotFound:
    """No such token in this chat: another chat's, made up, or purged."""


Outcome = Redeemed | Expired | Used | NotFound


def new_token() -> str:
    """A fresh token: 12 URL-safe characters (72 random bits)."""
    return secrets.token_urlsafe(9)


def _action_json(action: Action) -> str:
    if not isinstance(action.get("name"), str) or not action["name"]:
        raise ValueError(f"an action needs a handler name: {action!r}")
    return json.dumps(dict(action), separators=(",", ":"))


_ISSUE = """
WITH purge AS (
    DELETE FROM callback_tokens WHERE chat_id = $1 AND created_at < now() - $5::interval
)
INSERT INTO callback_tokens (chat_id, token, keyboard, action)
SELECT $1, t, $2, a::jsonb FROM unnest($3::text[], $4::text[]) AS u(t, a)
"""


async def _issue_many(
    db: Queries, chat_id: int, actions: Sequence[Action], group: str
) -> list[str]:
    tokens = [new_token() for _ in actions]
    encoded = [_action_json(a) for a in actions]
    await db.execute(_ISSUE, chat_id, group, tokens, encoded, PURGE_AFTER)
    return tokens


async def issue(db: Queries, chat_id: int, action: Action, *, keyboard: str | None = None) -> str:
    """A token for ``action`` in ``chat_id`` (put it in a button's ``callback_data``).
    ``keyboard``: the group it dies with when a tap edits the message (default: its own)."""
    group = keyboard or new_token()
    return (await _issue_many(db, chat_id, [action], group))[0]


async def keyboard(db: Queries, chat_id: int, rows: Rows) -> InlineKeyboard:
    """An inline keyboard whose (label, action) buttons carry fresh tokens of ``chat_id``, one
    statement for all; :class:`~actors.telegram.keyboards.Button` s (a url) are kept as they are."""
    actions = [b[1] for row in rows for b in row if not isinstance(b, Button)]
    tokens = iter(await _issue_many(db, chat_id, actions, new_token()) if actions else [])
    return InlineKeyboard(
        [[b if isinstance(b, Button) else Button(b[0], next(tokens)) for b in row] for row in rows]
    )


_REDEEM = """
WITH hit AS (
    UPDATE callback_tokens SET used_at = now(), message_id = $3, used_by = $5
    WHERE chat_id = $1 AND token = $2 AND used_at IS NULL AND created_at > now() - $4::interval
    RETURNING action, keyboard
)
SELECT 'live' AS state, action, keyboard FROM hit
UNION ALL
SELECT CASE WHEN used_at IS NULL THEN 'expired' ELSE 'used' END, NULL, keyboard
FROM callback_tokens WHERE chat_id = $1 AND token = $2 AND NOT EXISTS (SELECT 1 FROM hit)
"""


def _outcome(rec: Any) -> Outcome:
    if rec is None:
        return NotFound()
    if rec["state"] == "live":
        action = rec["action"]
        return Redeemed(json.loads(action) if isinstance(action, str) else action, rec["keyboard"])
    return Expired() if rec["state"] == "expired" else Used()


async def redeem(
    db: Queries,
    chat_id: int,
    token: str,
    *,
    message_id: int | None = None,
    query_id: str | None = None,
) -> Outcome:
    """Use ``token`` of ``chat_id`` atomically (one UPDATE ... WHERE used_at IS NULL): the first
    redeem gets :class:`Redeemed`, every later one :class:`Used`; a token of another chat is
    :class:`NotFound`. ``message_id`` and ``query_id``: the message it was tapped on and the
    callback query that tapped it, kept with it."""
    rec = await db.fetchrow(_REDEEM, chat_id, token, message_id, TOKEN_TTL, query_id)
    return _outcome(rec)


async def peek(db: Queries, chat_id: int, token: str, *, query_id: str | None = None) -> Outcome:
    """What :func:`redeem` would answer now, changing nothing (a live token is a
    :class:`Redeemed` that has not happened) — except that a token already used by the callback
    query ``query_id`` is live for it (the answer to a tap may come after the tap acted)."""
    rec = await db.fetchrow(
        "SELECT CASE WHEN used_by = $4 THEN 'live' WHEN used_at IS NOT NULL THEN 'used' "
        "WHEN created_at > now() - $3::interval THEN 'live' ELSE 'expired' END AS state, "
        "action, keyboard FROM callback_tokens WHERE chat_id = $1 AND token = $2",
        chat_id,
        token,
        TOKEN_TTL,
        query_id,
    )
    return _outcome(rec)


async def expire_keyboard(db: Queries, chat_id: int, keyboard: str) -> int:
    """Every unused token of ``keyboard`` is used up (its message no longer shows it)."""
    recs = await db.fetch(
        "UPDATE callback_tokens SET used_at = now() "
        "WHERE chat_id = $1 AND keyboard = $2 AND used_at IS NULL RETURNING token",
        chat_id,
        keyboard,
    )
    return len(recs)


# --- handlers ----------------------------------------------------------------------------------


@attrs.define(eq=False)
class CallbackContext:
    """What a handler gets for one tap. ``db`` is the tap's transaction: what the handler
    writes commits together with the token's use, the inbox row's end and the outbox rows it
    queued (:meth:`reply`, :meth:`edit`), or not at all."""

    db: Queries
    chat_id: int
    #: the message the tapped button is on (the one :meth:`edit` changes)
    message_id: int
    #: who tapped (in a group, not necessarily who asked)
    user_id: int
    action: Action
    inbox_id: int
    #: the tapped token's keyboard: its other buttons die when the message is edited
    keyboard_id: str
    #: outbox rows queued so far
    queued: int = 0

    async def reply(
        self,
        text: str,
        *,
        parse_mode: ParseMode | None = None,
        keyboard: InlineKeyboard | None = None,
    ) -> None:
        """Send a new message (after everything the chat was sent before)."""
        await self._queue(text, parse_mode, keyboard, "message")

    async def edit(
        self,
        text: str,
        *,
        parse_mode: ParseMode | None = None,
        keyboard: InlineKeyboard | None = None,
    ) -> None:
        """Change the tapped message's text (at most one message long) and its buttons to
        ``keyboard`` (None: no buttons); the old buttons stop working at once."""
        await self._queue(text, parse_mode, keyboard, "edit")

    async def edit_keyboard(self, keyboard: InlineKeyboard | None = None) -> None:
        """Change only the tapped message's buttons (None: remove them); the old ones stop
        working at once."""
        await self._queue("", None, keyboard, "edit_markup")

    async def new_keyboard(self, rows: Rows) -> InlineKeyboard:
        """Fresh buttons (see :func:`keyboard`), issued in this transaction."""
        return await keyboard(self.db, self.chat_id, rows)

    async def _queue(
        self, text: str, mode: ParseMode | None, kb: InlineKeyboard | None, kind: outbox.OutboxKind
    ) -> None:
        target = None if kind == "message" else self.message_id
        await outbox.enqueue_reply(
            self.db,
            self.chat_id,
            text,
            mode,
            None,
            (self.inbox_id,),
            reply_markup=None if kb is None else kb.to_json(),
            kind=kind,
            edit_message_id=target,
        )
        if target is not None:
            await expire_keyboard(self.db, self.chat_id, self.keyboard_id)
        self.queued += 1


Handler = Callable[[CallbackContext], Awaitable[None]]


@attrs.frozen
class _Entry:
    handler: Handler
    answer: str | None


@attrs.define
class CallbackTable:
    """Action name -> handler, filled once at composition (the commands register theirs)."""

    entries: dict[str, _Entry] = attrs.field(factory=dict)

    def register(self, name: str, handler: Handler, *, answer: str | None = None) -> None:
        """``handler`` runs for a tap on a button whose action is named ``name``; ``answer``:
        the short text Telegram shows at once on the tap (at most 200 characters)."""
        if not name or name in self.entries:
            raise ValueError(f"callback action {name!r} is empty or registered twice")
        if answer is not None and not 0 < len(answer) <= MAX_ANSWER:
            raise ValueError(f"callback answer must be 1-{MAX_ANSWER} characters")
        self.entries[name] = _Entry(handler, answer)

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def handler(self, name: object) -> Handler | None:
        entry = self.entries.get(name) if isinstance(name, str) else None
        return None if entry is None else entry.handler

    def answer(self, name: str) -> str | None:
        return self.entries[name].answer


@attrs.frozen
class Callbacks:
    """The table at work: the router's immediate answer and the chat actor's tap."""

    db: Database
    table: CallbackTable = attrs.field(factory=CallbackTable)
    #: how long the router's answer may wait for the token's state before answering without it
    answer_timeout: float = 2.0

    async def answer_text(self, chat_id: int, query: CallbackQuery) -> str | None:
        """The text to answer a tap with at once: the handler's registered ``answer`` for a live
        token (or one this very tap already used: the chat actor may be first), :data:`EXPIRED`
        for a dead, foreign or unknown one; None (answer without text) when the database does
        not say in time. Never raises."""
        if not query.data:
            return None
        with trio.move_on_after(self.answer_timeout):
            try:
                state = await peek(self.db, chat_id, query.data, query_id=query.id)
            except DatabaseError as exc:
                log.warning("callbacks.peek_failed", chat_id=chat_id, error=str(exc))
                return None
            if isinstance(state, Redeemed) and state.action.get("name") in self.table:
                return self.table.answer(state.action["name"])
            return EXPIRED
        return None

    async def tap(self, chat_id: int, inbox_id: int, query: CallbackQuery) -> bool:
        """Redeem the tapped token and run its handler, with the inbox row's end, in one
        transaction; True when outbox rows were queued (the sender has work). A dead token
        changes nothing (the row is skipped, saying why)."""
        async with self.db.transaction() as conn:
            outcome: Outcome = NotFound()
            if query.data and query.message_id is not None:
                outcome = await redeem(
                    conn, chat_id, query.data, message_id=query.message_id, query_id=query.id
                )
            name = outcome.action.get("name") if isinstance(outcome, Redeemed) else None
            handler = self.table.handler(name)
            if not isinstance(outcome, Redeemed) or handler is None or query.message_id is None:
                why = f"no handler {name!r}" if name is not None else type(outcome).__name__
                log.info("callbacks.dead_tap", chat_id=chat_id, inbox_id=inbox_id, why=why)
                await inbox.mark_skipped(conn, chat_id, [inbox_id], f"button tap: {why}")
                return False
            ctx = CallbackContext(
                conn,
                chat_id,
                query.message_id,
                query.from_user_id,
                outcome.action,
                inbox_id,
                outcome.keyboard,
            )
            await handler(ctx)
            await inbox.mark_done(conn, chat_id, [inbox_id])
            log.info(
                "callbacks.tap", chat_id=chat_id, inbox_id=inbox_id, action=name, queued=ctx.queued
            )
            return ctx.queued > 0
