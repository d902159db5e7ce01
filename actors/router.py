"""Router: from "an update is in the inbox" to the chat's actor.

Ingress (webhook or poller) stores an update in the inbox, then calls :meth:`Router.accepted`
(never blocks). The router, in its own task:

* answers callback queries at once (``answerCallbackQuery``: Telegram shows a spinner until
  then), in the background so a slow Bot API never holds up dispatch, with the text
  :meth:`~actors.chat.callbacks.Callbacks.answer_text` gives (the handler's short answer, or
  "This button has expired."); the tap itself is acted on by the chat actor, in order;
* cancels the chat's running turn on ``/stop`` (the command itself is then answered in order
  by the chat actor), and its generation when the person presses Stop on its draft (a
  ``stopped_message_generation`` update naming the draft being shown; an older draft's Stop
  stops nothing);
* wakes the chat's actor through the registry, coalesced: at most one undelivered wake per
  chat (the actor reads every open row when it takes it).

With ``leases`` (several processes may share the database: :mod:`actors.queues.leases`), a
chat's actor is woken only in the process holding the chat's lease: the router takes the lease
(free, expired, or its own), or, when another live process holds it, wakes that owner through
``LISTEN/NOTIFY`` (:data:`~actors.queues.lease_store.WAKE_CHANNEL`, payload ``chat_id``, with
`` stop`` or `` stop <draft_id>`` when the update was a Stop for the owner's running turn; ``*``
from a process that released its chats: sweep now). What
a dead process left in hand is recovered per chat when its lease is taken over. On start, and
every ``sweep_interval`` seconds, every chat with open inbox or outbox rows that no other live
process holds is taken and woken, so a lost wake or notification, a dead owner or a released
chat only delays a message.

Without ``leases`` (one process alone, tests): on start the rows a dead process left
``processing`` go back to ``pending``, a crash counted (``inbox.recover_crashed``; never an
attempt), then every chat with open inbox rows is woken, and the sweep repeats the wake-up.
"""

from __future__ import annotations

from typing import Protocol

import attrs
import trio

from actors.chat.callbacks import Callbacks
from actors.chat.wakes import PendingWakes, RunningTurns, Wake
from actors.queues import inbox, lease_store
from actors.queues.leases import ChatLeases
from actors.telegram.types import CallbackQuery, Update
from runtime.actor import Mailbox, serve
from runtime.db import Database
from runtime.errors import ActorError, DatabaseError, MailboxFull
from runtime.logs import get_logger

log = get_logger(__name__)


def is_stop_command(update: Update) -> bool:
    """``/stop`` or ``/stop@botname`` as a message's first word."""
    msg = update.message
    if msg is None or not msg.text or not msg.text.strip():
        return False
    first = msg.text.split(maxsplit=1)[0].lower()
    return first == "/stop" or first.startswith("/stop@")


@attrs.frozen
class Accepted:
    inbox_id: int
    update: Update


@attrs.frozen
class Remote:
    """A wake from the process that received the chat's update (this one holds the lease)."""

    chat_id: int


def wake_payload(update: Update, chat_id: int) -> str:
    """The notification waking ``chat_id``'s owner, naming a Stop the owner must act on."""
    stop = update.stopped_generation
    if stop is not None:
        return f"{chat_id} stop {stop.draft_id}"
    return f"{chat_id} stop" if is_stop_command(update) else str(chat_id)


class CallbackAnswerer(Protocol):
    async def answer_callback_query(
        self, callback_query_id: str, text: str | None = None
    ) -> None: ...


class ChatRegistry(Protocol):
    async def send(self, key: int, msg: Wake) -> None: ...


@attrs.define(eq=False)
class Router:
    db: Database
    registry: ChatRegistry
    bot: CallbackAnswerer
    running: RunningTurns
    wakes: PendingWakes = attrs.field(factory=PendingWakes)
    sweep_interval: float = 30.0
    #: the answer texts of taps (None: every tap is answered without text)
    callbacks: Callbacks | None = None
    mailbox: Mailbox[Accepted | Remote | int] = attrs.field(factory=lambda: Mailbox("router", 1024))
    #: several processes: wake a chat here only while holding its lease
    leases: ChatLeases | None = None
    #: the lease queries (the sweep's candidates, waking another owner); with ``leases``
    lease_sql: lease_store.SqlLeases | None = None
    _nursery: trio.Nursery | None = attrs.field(init=False, default=None)
    _sweep_now: trio.Event = attrs.field(init=False, factory=trio.Event)

    def accepted(self, inbox_id: int, update: Update) -> None:
        """Called by ingress after the inbox insert; never blocks, never raises."""
        chat_id = update.chat_id
        if chat_id is not None and is_stop_command(update) and self.running.cancel(chat_id):
            log.info("router.turn_cancelled", chat_id=chat_id)
        stop = update.stopped_generation
        if stop is not None and self.running.cancel(stop.chat_id, stop.draft_id):
            log.info("router.generation_stopped", chat_id=stop.chat_id, draft_id=stop.draft_id)
        try:
            self.mailbox.address.send_nowait(Accepted(inbox_id, update))
        except (MailboxFull, ActorError):
            log.warning("router.mailbox_full", inbox_id=inbox_id, chat_id=chat_id)

    def wake(self, chat_id: int) -> None:
        """Wake one chat's actor (used by recovery and by tests)."""
        try:
            self.mailbox.address.send_nowait(chat_id)
        except (MailboxFull, ActorError):
            log.warning("router.mailbox_full", chat_id=chat_id)

    def remote(self, payload: str) -> None:
        """A notification from another process (never blocks, never raises): act on a Stop
        for a turn running here, then wake the chat."""
        words = payload.split()
        if words == [lease_store.SWEEP_NOW]:  # another process let go of its chats
            self._sweep_now.set()
            return
        try:
            chat_id = int(words[0])
            draft_id = int(words[2]) if len(words) > 2 else None
        except (IndexError, ValueError):
            log.warning("router.bad_notification", payload=payload[:100])
            return
        if len(words) > 1 and self.running.cancel(chat_id, draft_id):
            log.info("router.turn_cancelled", chat_id=chat_id, remote=True)
        try:
            self.mailbox.address.send_nowait(Remote(chat_id))
        except (MailboxFull, ActorError):
            log.warning("router.mailbox_full", chat_id=chat_id)

    async def run(self, *, task_status: trio.TaskStatus[Router] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            with self.mailbox.inbox as box:
                if self.leases is None:  # alone: whatever is processing was left by a crash
                    crashed = await inbox.recover_crashed(self.db)
                    if crashed:
                        log.warning("router.crashed_rows", inbox_ids=crashed)
                await self._recover()
                nursery.start_soon(self._sweep)
                task_status.started(self)
                await serve(box, self._dispatch)
            nursery.cancel_scope.cancel()

    async def aclose(self) -> None:
        """Stop taking new updates (they stay in the inbox for the next start)."""
        self.mailbox.address.close()

    async def _dispatch(self, item: Accepted | Remote | int) -> None:
        if isinstance(item, int):
            chat_id: int | None = item
        elif isinstance(item, Remote):
            chat_id = item.chat_id
        else:
            chat_id = item.update.chat_id
            cq = item.update.callback_query
            if cq is not None and self._nursery is not None:
                self._nursery.start_soon(self._answer_callback, cq)
        if chat_id is None or not await self._ours(chat_id, item):
            return
        if not self.wakes.claim(chat_id):
            return  # a wake is already on its way: the actor reads every open row
        try:
            await self.registry.send(chat_id, Wake())
        except ActorError as exc:  # full or stopping: the sweep will retry from the inbox
            self.wakes.release(chat_id)
            log.warning("router.wake_failed", chat_id=chat_id, error=type(exc).__name__)

    async def _ours(self, chat_id: int, item: Accepted | Remote | int) -> bool:
        """This process serves ``chat_id`` (its lease is held here, or taken now); else its
        owner is woken (not for a notification: the owner moved on, the sweep catches up)."""
        if self.leases is None:
            return True
        try:
            if await self.leases.hold(chat_id):
                return True
            if self.lease_sql is not None and not isinstance(item, Remote):
                payload = (
                    wake_payload(item.update, chat_id)
                    if isinstance(item, Accepted)
                    else str(chat_id)
                )
                await self.lease_sql.wake_owner(payload)
        except DatabaseError as exc:  # the sweep tries again
            log.warning("router.lease_failed", chat_id=chat_id, error=str(exc))
        return False

    async def _answer_callback(self, cq: CallbackQuery) -> None:
        try:
            text = None
            if self.callbacks is not None and cq.message_chat_id is not None:
                text = await self.callbacks.answer_text(cq.message_chat_id, cq)
            await self.bot.answer_callback_query(cq.id, text)
        except Exception as exc:  # best effort: the update is processed regardless
            log.warning("router.callback_ack_failed", error=str(exc))

    async def _recover(self) -> None:
        if self.lease_sql is not None:
            sql = self.lease_sql
            chats = await lease_store.open_work(sql.db, sql.owner)
        else:
            chats = await inbox.open_chats(self.db)
        if chats:
            log.info("router.recovering", chats=len(chats))
        for chat_id in chats:
            self.wake(chat_id)

    async def _sweep(self) -> None:
        while True:
            with trio.move_on_after(self.sweep_interval):
                await self._sweep_now.wait()
            self._sweep_now = trio.Event()
            try:
                await self._recover()
            except DatabaseError as exc:
                log.warning("router.sweep_failed", error=str(exc))
