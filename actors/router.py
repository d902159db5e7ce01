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

On start it first returns the rows a dead process left ``processing`` to ``pending``, counting
a crash for each (``inbox.recover_crashed``; never an attempt: a crash is charged to no one),
then wakes every chat with open inbox rows (crash recovery); a sweep repeats the wake-up every
``sweep_interval`` seconds, so a row whose wake was lost (mailbox full, actor crash) is picked
up without a new message.
"""

from __future__ import annotations

from typing import Protocol

import attrs
import trio

from actors.chat.callbacks import Callbacks
from actors.chat.wakes import PendingWakes, RunningTurns, Wake
from actors.queues import inbox
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
    mailbox: Mailbox[Accepted | int] = attrs.field(factory=lambda: Mailbox("router", 1024))
    _nursery: trio.Nursery | None = attrs.field(init=False, default=None)

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

    async def run(self, *, task_status: trio.TaskStatus[Router] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            with self.mailbox.inbox as box:
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

    async def _dispatch(self, item: Accepted | int) -> None:
        if isinstance(item, int):
            chat_id: int | None = item
        else:
            chat_id = item.update.chat_id
            cq = item.update.callback_query
            if cq is not None and self._nursery is not None:
                self._nursery.start_soon(self._answer_callback, cq)
        if chat_id is None or not self.wakes.claim(chat_id):
            return  # a wake is already on its way: the actor reads every open row
        try:
            await self.registry.send(chat_id, Wake())
        except ActorError as exc:  # full or stopping: the sweep will retry from the inbox
            self.wakes.release(chat_id)
            log.warning("router.wake_failed", chat_id=chat_id, error=type(exc).__name__)

    async def _answer_callback(self, cq: CallbackQuery) -> None:
        try:
            text = None
            if self.callbacks is not None and cq.message_chat_id is not None:
                text = await self.callbacks.answer_text(cq.message_chat_id, cq)
            await self.bot.answer_callback_query(cq.id, text)
        except Exception as exc:  # best effort: the update is processed regardless
            log.warning("router.callback_ack_failed", error=str(exc))

    async def _recover(self) -> None:
        chats = await inbox.open_chats(self.db)
        if chats:
            log.info("router.recovering", chats=len(chats))
        for chat_id in chats:
            self.wake(chat_id)

    async def _sweep(self) -> None:
        while True:
            await trio.sleep(self.sweep_interval)
            try:
                await self._recover()
            except DatabaseError as exc:
                log.warning("router.sweep_failed", error=str(exc))
