"""Router: from "an update is in the inbox" to the chat's actor.

Ingress (webhook or poller) stores an update in the inbox, then calls :meth:`Router.accepted`
(never blocks). The router, in its own task:

* answers callback queries at once (``answerCallbackQuery``: Telegram shows a spinner until
  then), in the background so a slow Bot API never holds up dispatch;
* cancels the chat's running turn on ``/stop`` (the command itself is then answered in order
  by the chat actor);
* wakes the chat's actor through the registry, coalesced: at most one undelivered wake per
  chat (the actor reads every open row when it takes it);
* acknowledgements first: while updates keep arriving (none accepted for ``quiet`` seconds),
  wakes are held back, for at most ``max_hold`` seconds. The chat actors' work (turns,
  replies) then does not compete for the process with a burst of webhook requests (e.g.
  Telegram delivering a backlog): the updates are durable already, so replies may lag a
  burst, and a one-off message waits only ``quiet``.

On start it wakes every chat with open inbox rows (crash recovery), and a sweep repeats that
every ``sweep_interval`` seconds, so a row whose wake was lost (mailbox full, actor crash) is
picked up without a new message.
"""

from __future__ import annotations

import math
from typing import Protocol

import attrs
import trio

from actors import inbox
from actors.chat import PendingWakes, RunningTurns, Wake
from actors.telegram_types import Update
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
    quiet: float = 0.05
    max_hold: float = 5.0
    # callback queries to answer (wakes do not queue: see ``wake``)
    mailbox: Mailbox[Accepted] = attrs.field(factory=lambda: Mailbox("router", 1024))
    _nursery: trio.Nursery | None = attrs.field(init=False, default=None)
    _last_accepted: float = attrs.field(init=False, default=-math.inf)
    _held: dict[int, None] = attrs.field(init=False, factory=dict)  # chats, in arrival order
    _held_since: float = attrs.field(init=False, default=0.0)
    _held_ready: trio.Event = attrs.field(init=False, factory=trio.Event)
    _closed: bool = attrs.field(init=False, default=False)

    def accepted(self, inbox_id: int, update: Update) -> None:
        """Called by ingress after the inbox insert; never blocks, never raises."""
        self._last_accepted = trio.current_time()
        chat_id = update.chat_id
        if chat_id is not None and is_stop_command(update) and self.running.cancel(chat_id):
            log.info("router.turn_cancelled", chat_id=chat_id)
        if update.callback_query is not None and not self._closed:
            try:
                self.mailbox.address.send_nowait(Accepted(inbox_id, update))
            except (MailboxFull, ActorError):
                log.warning("router.mailbox_full", inbox_id=inbox_id, chat_id=chat_id)
        if chat_id is not None:
            self.wake(chat_id)

    def wake(self, chat_id: int) -> None:
        """Schedule a wake of one chat's actor (held while ingress is busy, see above)."""
        if self._closed or not self.wakes.claim(chat_id):
            return  # stopping, or a wake is already on its way: the actor reads every open row
        if not self._held:
            self._held_since = trio.current_time()
            self._held_ready.set()
        self._held[chat_id] = None

    async def run(self, *, task_status: trio.TaskStatus[Router] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            with self.mailbox.inbox as box:
                await self._recover()
                nursery.start_soon(self._sweep)
                nursery.start_soon(self._release_held)
                task_status.started(self)
                await serve(box, self._dispatch)
            # stopping: wakes still held go out now, so the chat actors drain those rows too
            await self._deliver_held()
            nursery.cancel_scope.cancel()

    async def aclose(self) -> None:
        """Stop taking new updates (they stay in the inbox for the next start)."""
        self._closed = True
        self.mailbox.address.close()

    async def _dispatch(self, item: Accepted) -> None:
        cq = item.update.callback_query
        if cq is not None and self._nursery is not None:
            self._nursery.start_soon(self._answer_callback, cq.id)

    async def _release_held(self) -> None:
        """Deliver held wakes once ingress is quiet, or they were held ``max_hold`` seconds."""
        while True:
            await self._held_ready.wait()
            while True:
                now = trio.current_time()
                quiet_for = now - self._last_accepted
                held_for = now - self._held_since
                if quiet_for >= self.quiet or held_for >= self.max_hold:
                    break
                await trio.sleep(min(self.quiet - quiet_for, self.max_hold - held_for))
            await self._deliver_held()

    async def _deliver_held(self) -> None:
        chats = list(self._held)
        self._held.clear()
        self._held_ready = trio.Event()
        for chat_id in chats:
            try:
                await self.registry.send(chat_id, Wake())
            except ActorError as exc:  # full or stopping: the sweep will retry from the inbox
                self.wakes.release(chat_id)
                log.warning("router.wake_failed", chat_id=chat_id, error=type(exc).__name__)

    async def _answer_callback(self, callback_id: str) -> None:
        try:
            await self.bot.answer_callback_query(callback_id)
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
