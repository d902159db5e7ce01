"""ChatActor: one per chat, processes that chat's inbox rows strictly in order.

The inbox table is the chat's queue. A :class:`Wake` tells the actor something new may be
there; it loads the open rows it has not taken yet (by id) and, for each:

* text: fragment reassembly (a >= 4000-char text waits up to 1.5 s for its continuation) and
  media-group buffering (500 ms), via the pure rules in :mod:`actors.chat.fragments`; the actor is a
  :class:`~runtime.registry.TimedHandler`, so the registry wakes it at the buffer's deadline;
* a ``/command``: answered from the command table (:mod:`actors.chat.commands`; ``/stop`` was
  already acted on by the router, which cancelled the running turn), never by the model;
* voice: downloaded and transcribed, then handled as text; too large or failed -> a reply
  saying so;
* a forwarded message (text, caption or voice): someone else's words, never a command, handed to
  the model inside ``<untrusted>`` tags naming its origin (:func:`memory.untrusted.wrap_forwarded`);
* a due routine run or reminder (kind ``routine``): :mod:`actors.chat.due_runs`, after the
  texts taken before it and never in the same turn;
* edited messages: handled as text; button presses (callback queries, already answered by the
  router): the handler their token names (:mod:`actors.chat.callbacks`), nothing without
  ``callbacks``; anything else is skipped with a reason.

A turn runs the :class:`~actors.agent.turn.TurnHandler` with ``typing`` shown, then commits in one
transaction: the reply's ``persist`` hook, the outbox row, and the inbox rows marked done.

Nothing a chat sends stops the actor (see :mod:`actors.queues.inbox`): an exception while rows
are in hand (a command, a button tap, a turn; other than the database being unreachable or busy)
is charged to those rows as a failed attempt, and the actor starts over from the inbox (as a
restart would, without being one) after ``failure_retry_base`` seconds, doubling up to
``failure_retry_cap``, the chat's later rows waiting behind; a row with ``max_attempts``
failures, or in its turn at ``max_crashes`` process crashes, is skipped and the person told
(``GAVE_UP``, one short line): a poison update is quarantined, it can neither loop, nor hold up
the chat's later messages, nor reach the registry's restart budget (whose escalation ends the
process). A statement timeout or a serialization failure is nobody's fault: the rows are handed
back uncharged and retried the same way. Only the database being unreachable leaves the actor
(restarted uncharged; ``DB_OUTAGE_LIMIT`` decides for the process).

A model outage is waited out: a turn raising :class:`~actors.errors.ModelUnavailable` (the
model still down after the turn's own retries) hands its rows back uncharged, tells the person
once (``MODEL_AWAY``: not repeated while it is the chat's latest reply), and the actor retries
the chat's oldest open row on a timer (``model_retry_base`` doubling up to ``model_retry_cap``,
jittered), the chat's later messages waiting behind it, until the row is ``model_deadline``
seconds old; then it is answered ``MODEL_GAVE_UP``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import attrs
import trio

from actors.agent.turn import TurnInput, TurnReply
from actors.chat import fragments
from actors.chat.commands import command_table
from actors.chat.deps import ChatDeps
from actors.chat.due_runs import run_due
from actors.chat.erase_command import is_word
from actors.chat.other_kinds import answer_for
from actors.chat.turns import ChatTurns
from actors.chat.typing_indicator import typing_while
from actors.chat.wakes import Wake
from actors.errors import ChatErased, ModelUnavailable
from actors.queues import erased, inbox
from actors.scheduler.routine import INBOX_KIND
from actors.telegram.errors import MalformedUpdate, VoiceError
from actors.telegram.types import Message, Voice, parse_update
from memory.untrusted import wrap_forwarded
from runtime.backoff import backoff_delay
from runtime.errors import (
    DatabaseOutage,
    DatabaseUnavailable,
    QueryCanceled,
    SerializationFailure,
)
from runtime.logs import get_logger

log = get_logger(__name__)

#: the database's troubles, not the rows': never charged to them (a constraint violation is)
NOT_THE_ROWS = (DatabaseUnavailable, DatabaseOutage, QueryCanceled, SerializationFailure)
#: of those, the ones that leave the actor (the registry restarts it uncharged; the process
#: gives up past DB_OUTAGE_LIMIT): the others are retried by the actor itself
OUTAGE = (DatabaseUnavailable, DatabaseOutage)

GAVE_UP = "Sorry, I could not process one of your messages, so I skipped it."
NO_VOICE = "I can't transcribe voice messages here (no speech-to-text is configured). Please type."
HELP = command_table().help_text()
#: a turn's commit refused: the chat was erased while it ran (``engram memory erase``)
ERASED = erased.ERASED_SQLSTATE  # /start and /help without the memory commands


@attrs.define
class ChatActor(ChatTurns):
    """The per-chat actor body (a registry handler with a timer): reads the chat's inbox rows
    in order; its state and turns are :class:`~actors.chat.turns.ChatTurns`'."""

    # --- registry hooks ------------------------------------------------------------------------

    async def handle(self, msg: Wake) -> None:
        self.deps.wakes.release(self.chat_id)  # before reading: a later insert wakes us again
        if self.retry_at is None:  # else the model is down: new rows wait behind the oldest
            await self._charging(self._take_new)

    def deadline(self) -> float | None:
        dues = [fragments.deadline(self.state), self.retry_at, self.held_until]
        return min((d for d in dues if d is not None), default=None)

    async def on_deadline(self) -> None:
        held_until, now = self.held_until, trio.current_time()
        if held_until is not None and self.retry_at is None and now >= held_until:
            held, self.held, self.held_until = self.held, [], None  # the limit lets them pass
            await self._charging(lambda: self._reclaim_and_run(held))
            return
        # still held: a fragment's timer, or closing; what it flushes joins the held (their
        # rows wait in the inbox for the next start)
        if self.retry_at is not None:
            if trio.current_time() < self.retry_at:
                return  # the mailbox closes early: the rows wait in the inbox for the next start
            self.retry_at = None
            await self._charging(self._take_new)  # the oldest open row again, then the rest
            return
        flushed = fragments.expire(self.state, trio.current_time())
        if not flushed:  # called early: the mailbox is closing, flush what is buffered
            flushed = fragments.flush_all(self.state)
        await self._charging(lambda: self._run_flushed(flushed))

    async def _charging(self, work: Callable[[], Awaitable[None]]) -> None:
        """Run ``work``; an exception is charged to the rows in hand as a failed attempt (their
        own failure) and the chat's rows are taken again later (:meth:`_start_over`), never
        re-raised. Not the database being busy or slow (``NOT_THE_ROWS``): the rows are handed
        back uncharged; unreachable (``OUTAGE``): re-raised, the actor restarts."""
        try:
            await work()
        except ModelUnavailable:
            return  # postponed (see _postpone): not the rows' failure
        except OUTAGE:
            raise
        except Exception as exc:
            if isinstance(exc, ChatErased) or getattr(exc, "sqlstate", None) == ERASED:
                why = "chat.lease_lost" if erased.LEASE_LOST in str(exc) else "chat.erased"
                log.info(why, chat_id=self.chat_id, inbox_ids=list(self.in_hand))
                self._forget()  # nothing it held may come back: read the inbox afresh
                return
            ids, store = list(self.in_hand), self.deps.store
            if isinstance(exc, NOT_THE_ROWS):
                log.warning("chat.rows_delayed", inbox_ids=ids, error=type(exc).__name__)
                await store.release(self.chat_id, ids, f"{type(exc).__name__}: {exc}")
            elif ids:
                log.error("chat.rows_failed", inbox_ids=ids, exc_info=exc)
                await store.mark_failed(self.chat_id, ids, f"{type(exc).__name__}: {exc}")
            else:
                log.error("chat.failed", exc_info=exc)
            self._start_over()
        else:
            self.failures = 0

    def _start_over(self) -> None:
        """Forget what is in memory (it is all in the inbox) and take the chat's open rows
        again after the failure backoff, as a restarted actor would."""
        deps = self.deps
        delay = backoff_delay(
            self.failures, base=deps.failure_retry_base, cap=deps.failure_retry_cap
        )
        self.failures += 1
        self.retry_at = trio.current_time() + delay
        self._forget()

    async def _take_new(self) -> None:
        rows, claimed = await self.deps.store.take_open(
            self.chat_id, self.cursor, self.deps.max_attempts, self.deps.max_crashes
        )
        fresh = self.cursor == 0  # a (re)start: the oldest row first, alone (see below)
        for row in rows:
            if row.id <= self.cursor:
                continue
            self.cursor = row.id
            # alone, claimed only when its turn comes: a row that may be what killed the
            # process or failed (in hand at a crash, charged an attempt), and the oldest after
            # a start (it may kill it); every other text waits for the turn of the burst
            alone = fresh or row.crashes > 0 or row.attempts > 0
            if alone:
                await self._run_flushed(())
            turns = self.turns_run
            await self._take(row, claimed=row.id == claimed)
            if alone:
                await self._run_flushed(())
            fresh = fresh and self.turns_run == turns  # until the first turn has run
        await self._run_flushed(())  # the texts taken, together (a burst: one turn)

    # --- per row -------------------------------------------------------------------------------

    async def _take(self, row: inbox.InboxRow, *, claimed: bool = False) -> None:
        store = self.deps.store
        self.in_hand = (row.id,)
        self.received[row.id] = row.received_at
        failed = row.attempts >= self.deps.max_attempts
        if failed or row.crashes >= self.deps.max_crashes:
            log.warning(
                "chat.giving_up", inbox_id=row.id, attempts=row.attempts, crashes=row.crashes
            )
            why = "too many failed attempts" if failed else f"in its turn at {row.crashes} crashes"
            await self._run_flushed(fragments.flush_all(self.state))
            if row.kind == INBOX_KIND:  # not the person's message: nothing to tell them
                await store.mark_skipped(self.chat_id, [row.id], why)
                return
            await self._commit(TurnReply(GAVE_UP), [row.id], skipped=why)
            return
        if not claimed:
            await store.mark_processing(self.chat_id, [row.id])
        if row.kind == INBOX_KIND:  # a due run: after the texts before it, never with them
            await self._run_flushed(fragments.flush_all(self.state))
            self.in_hand = (row.id,)
            await run_due(self, row)
            return
        try:
            update = parse_update(row.payload)
        except MalformedUpdate as exc:
            await store.mark_skipped(self.chat_id, [row.id], f"malformed update: {exc}")
            return
        ext = row.update_key
        msg = update.message or update.edited_message
        if update.kind == "message" and msg is not None:
            await self._message(row.id, ext, msg)
        elif update.kind == "edited_message" and msg is not None and (msg.text or msg.caption):
            await self._flush_then_turn(
                row.id, ext, f"(edited) {msg.text or msg.caption}", msg, kind="edited"
            )
        elif update.kind == "callback_query" and update.callback_query is not None:
            await self._run_flushed(fragments.flush_all(self.state))
            self.received.pop(row.id, None)
            if self.deps.callbacks is None:
                await store.mark_skipped(self.chat_id, [row.id], "button tap: no callback handlers")
            elif await self.deps.callbacks.tap(self.chat_id, row.id, update.callback_query):
                self.deps.outbox_ready(self.chat_id, None)
        elif update.kind == "stopped_message_generation":  # acted on when it arrived (router)
            await store.mark_skipped(self.chat_id, [row.id], "stop pressed")
        else:
            await store.mark_skipped(
                self.chat_id, [row.id], f"unsupported update kind {update.kind}"
            )

    async def _message(self, inbox_id: int, ext: str, msg: Message) -> None:
        text = msg.text
        if msg.forwarded_from is not None:  # someone else's words: never a command, untrusted
            said = text if text is not None else msg.caption
            text = None if said is None else wrap_forwarded(msg.forwarded_from, said)
        elif text is not None and text.startswith("/"):
            await self._command(inbox_id, ext, text, msg)
            return
        elif text is not None and self.deps.erase is not None and is_word(text):
            await self._erase(inbox_id, msg)  # raises ChatErased when it erased the chat
        if msg.voice is not None:
            await self._voice(inbox_id, ext, msg, msg.voice)
            return
        if text is None and msg.caption is None and msg.media_group_id is None and not msg.photo:
            await self._run_flushed(fragments.flush_all(self.state))
            await self._commit(TurnReply(answer_for(msg)), [inbox_id], skipped="no text")
            return
        self.sources[inbox_id] = (ext, "media_group" if msg.media_group_id else "text")
        item = fragments.Inbound(
            chat_id=self.chat_id,
            sender_id=msg.from_user_id or 0,
            message_id=msg.message_id,
            text=text if text is not None else (msg.caption or ""),
            received_at=trio.current_time(),
            update_ids=(inbox_id,),
            media_group_id=msg.media_group_id,
            photos=(msg.photo,) if msg.photo else (),
        )
        self.ready += fragments.offer(self.state, item, trio.current_time())

    async def _command(self, inbox_id: int, ext: str, text: str, msg: Message) -> None:
        """A ``/command``: answered from the table, in the chat's order, without the model."""
        await self._run_flushed(fragments.flush_all(self.state))
        deps = self.deps
        reply = await deps.commands.run(
            self.chat_id,
            text,
            sender_id=msg.from_user_id,
            now=deps.wall_clock(),
            consume_stopped=lambda: deps.running.consume_stopped(self.chat_id),
        )
        await self._commit(reply, [inbox_id])

    async def _erase(self, inbox_id: int, msg: Message) -> None:
        """``/forget everything``'s typed word: the chat erased if it waits for it from this
        person (:mod:`actors.chat.erase_command`; the reply is queued by the erase); else the
        word is an ordinary message."""
        assert self.deps.erase is not None
        await self._run_flushed(fragments.flush_all(self.state))
        self.in_hand = (inbox_id,)
        if await self.deps.erase.typed(self.chat_id, msg.from_user_id) is not None:
            self.deps.outbox_ready(self.chat_id, None)
            raise ChatErased(f"chat {self.chat_id} erased")

    async def _voice(self, inbox_id: int, ext: str, msg: Message, voice: Voice) -> None:
        await self._run_flushed(fragments.flush_all(self.state))
        if self.deps.transcribe is None:
            await self._commit(TurnReply(NO_VOICE), [inbox_id])
            return
        try:
            async with typing_while(self.deps.bot, self.chat_id, self.deps.typing_interval):
                text = await self.deps.transcribe(self.chat_id, voice)
        except VoiceError as exc:  # too large / failed: str(exc) is meant for the person
            await self._commit(TurnReply(str(exc)), [inbox_id])
            return
        if msg.forwarded_from is not None:
            text = wrap_forwarded(msg.forwarded_from, text)
        await self._flush_then_turn(inbox_id, ext, text, msg, kind="voice")

    async def _flush_then_turn(
        self,
        inbox_id: int,
        ext: str,
        text: str,
        msg: Message | None,
        *,
        kind: str,
        sender: int | None = None,
    ) -> None:
        await self._run_flushed(fragments.flush_all(self.state))
        message_ids = (msg.message_id,) if msg is not None else ()
        sender_id = sender if sender is not None else (msg.from_user_id if msg else None)
        await self._run_turn(
            TurnInput(self.chat_id, text, (inbox_id,), message_ids, (ext,), sender_id, kind=kind)
        )


def chat_factory(deps: ChatDeps) -> Callable[[int], ChatActor]:
    """The registry factory: a fresh actor body per chat (and per restart)."""

    def build(chat_id: int) -> ChatActor:
        return ChatActor(chat_id, deps)

    return build


__all__ = ["ChatActor", "chat_factory"]
