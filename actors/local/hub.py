"""The connected terminals of the local chats, and the sender's transport to them.

:class:`LocalHub` holds one :class:`Session` per local chat (a new connection replaces the
old one). It is the sender's :class:`~actors.sender.store.ChunkTransport` for the local chats:
:meth:`LocalHub.deliver` sends a chunk of an outbox row as a ``message`` (or ``edit``) frame and
returns once the client acknowledged it; with no client, or none answering within
:data:`ACK_TIMEOUT`, it raises :class:`~actors.errors.Unreachable` and the row waits in the
outbox. A client connecting wakes the sender for its chat (``poke``), so what waited is sent
then: a row acknowledged is ``sent``; one whose acknowledgement was lost (the connection or
the process died) is sent again, and the client, which knows its delivery key, shows it once.

:class:`Edges` puts the hub in front of the Bot API for the chat actor (``typing``) and the
router (a button's short answer): local chats get frames, Telegram's chats the Bot API.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Protocol

import attrs
import trio

from actors.errors import Unreachable
from actors.local import frames
from actors.local.frames import Delivery, Draft, Notice, ServerFrame, Typing, choices_of
from actors.local.ids import LOCAL_CHATS, bot_message_id, delivery_key, is_local_chat
from actors.queues.outbox import OutboxRow
from actors.sender.store import plain_fallback
from runtime.logs import get_logger

log = get_logger(__name__)

#: seconds a client has to acknowledge a message before its connection is dropped
ACK_TIMEOUT = 10.0
#: seconds a frame may take to be written to a client that does not read
SEND_TIMEOUT = 10.0
#: seconds between two drafts sent to a client (the latest text wins)
DRAFT_INTERVAL = 0.2
#: the prefix of the callback query ids of local chats (``local:<chat>:<client id>``)
CALLBACK_PREFIX = "local:"


@attrs.define(eq=False)
class Session:
    """One connected client: frames out (serialised), acknowledgements in, drafts throttled."""

    chat_id: int
    send_text: Callable[[str], Awaitable[None]]
    #: ends the connection (its handler's cancel scope)
    scope: trio.CancelScope
    nursery: trio.Nursery
    closed: bool = False
    _lock: trio.Lock = attrs.field(factory=trio.Lock)
    _waiting: dict[str, trio.Event] = attrs.field(factory=dict)
    _acked: set[str] = attrs.field(factory=set)
    _draft: Draft | None = None
    _drafting: bool = False

    async def send(self, frame: ServerFrame) -> None:
        """Write one frame; :class:`Unreachable` (and the session closed) when it cannot."""
        if self.closed:
            raise Unreachable("the client is gone")
        async with self._lock:
            try:
                with trio.fail_after(SEND_TIMEOUT):
                    await self.send_text(frames.encode(frame))
                return
            except (trio.TooSlowError, trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            except Exception as exc:  # the framework's closed-socket errors
                log.info("local.send_failed", chat_id=self.chat_id, error=type(exc).__name__)
        self.close()
        raise Unreachable("the client is gone")

    async def request(self, frame: Delivery) -> None:
        """Send a frame to acknowledge and wait for its acknowledgement."""
        event = self._waiting.setdefault(frame.delivery, trio.Event())
        self._acked.discard(frame.delivery)
        try:
            await self.send(frame)
            with trio.move_on_after(ACK_TIMEOUT):
                await event.wait()
            if frame.delivery in self._acked:
                return
            if not self.closed:
                log.warning("local.ack_timeout", chat_id=self.chat_id, delivery=frame.delivery)
                self.close()
            raise Unreachable("not acknowledged")
        finally:
            self._waiting.pop(frame.delivery, None)
            self._acked.discard(frame.delivery)

    def acked(self, delivery: str) -> None:
        event = self._waiting.get(delivery)
        if event is not None:
            self._acked.add(delivery)
            event.set()

    def draft(self, frame: Draft) -> None:
        """Show ``frame`` soon: at most one draft per :data:`DRAFT_INTERVAL`, the latest."""
        self._draft = frame
        if not self._drafting and not self.closed:
            self._drafting = True
            self.nursery.start_soon(self._send_drafts)

    async def _send_drafts(self) -> None:
        try:
            while self._draft is not None and not self.closed:
                frame, self._draft = self._draft, None
                await self.send(frame)
                await trio.sleep(DRAFT_INTERVAL)
        except Unreachable:
            pass
        finally:
            self._drafting = False

    def close(self) -> None:
        """End the connection; whoever waits for an acknowledgement stops waiting."""
        self.closed = True
        for event in self._waiting.values():
            event.set()
        self.scope.cancel()


@attrs.define(eq=False)
class LocalHub:
    """The local chats' sessions; the sender's transport to them (``chats``, ``reachable``,
    ``deliver``)."""

    #: wakes the sender for a chat (its open outbox rows are looked at again)
    poke: Callable[[int], None] = lambda chat_id: None
    chats: range = LOCAL_CHATS
    sessions: dict[int, Session] = attrs.field(factory=dict)

    def attach(self, session: Session) -> None:
        """``session`` is the chat's client now (an earlier one is closed), and the sender
        looks at the chat's open rows."""
        old = self.sessions.get(session.chat_id)
        self.sessions[session.chat_id] = session
        if old is not None:
            log.info("local.replaced", chat_id=session.chat_id)
            old.close()
        self.poke(session.chat_id)

    def detach(self, session: Session) -> None:
        session.close()
        if self.sessions.get(session.chat_id) is session:
            del self.sessions[session.chat_id]

    def reachable(self, chat_id: int) -> bool:
        session = self.sessions.get(chat_id)
        return session is not None and not session.closed

    async def deliver(
        self, row: OutboxRow, index: int, text: str, mode: str | None, *, last: bool
    ) -> int:
        """Chunk ``index`` of ``row`` to the chat's client, acknowledged; its message id."""
        session = self.sessions.get(row.chat_id)
        if session is None:
            raise Unreachable("no client")
        key = delivery_key(row.id, index)
        shown = plain_fallback(text, mode) if text else None
        if row.kind == "message" or row.edit_message_id is None:
            message_id = bot_message_id(row.id, index)
            choices = choices_of(row.reply_markup) if last else ()
            reply_to = row.reply_to_message_id if index == 0 else None
            frame = Delivery("message", key, message_id, shown or "", choices, reply_to)
        else:
            message_id = row.edit_message_id
            text_now = None if row.kind == "edit_markup" else shown
            frame = Delivery("edit", key, message_id, text_now, choices_of(row.reply_markup))
        await session.request(frame)
        return message_id

    def draft(self, chat_id: int, text: str, status: str | None = None) -> None:
        """The reply being written (ephemeral: dropped when no client is connected)."""
        session = self.sessions.get(chat_id)
        if session is not None:
            session.draft(Draft(text, status))

    async def typing(self, chat_id: int) -> None:
        session = self.sessions.get(chat_id)
        if session is not None:
            with contextlib.suppress(Unreachable):
                await session.send(Typing())

    async def notice(self, chat_id: int, text: str) -> None:
        session = self.sessions.get(chat_id)
        if session is not None:
            with contextlib.suppress(Unreachable):
                await session.send(Notice(text))


class TelegramEdges(Protocol):
    async def send_chat_action(self, chat_id: int | str, action: str = "typing") -> None: ...

    async def answer_callback_query(
        self, callback_query_id: str, text: str | None = None
    ) -> None: ...


@attrs.frozen
class Edges:
    """``sendChatAction`` and ``answerCallbackQuery`` for every chat: local chats' go to their
    client as frames, the others to the Bot API (``telegram``; None: there is no Telegram)."""

    hub: LocalHub
    telegram: TelegramEdges | None

    async def send_chat_action(self, chat_id: int | str, action: str = "typing") -> None:
        if isinstance(chat_id, int) and is_local_chat(chat_id):
            await self.hub.typing(chat_id)
        elif self.telegram is not None:
            await self.telegram.send_chat_action(chat_id, action)

    async def answer_callback_query(self, callback_query_id: str, text: str | None = None) -> None:
        if callback_query_id.startswith(CALLBACK_PREFIX):
            chat = callback_query_id.split(":", 2)[1]
            if text and chat.isdigit():
                await self.hub.notice(int(chat), text)
        elif self.telegram is not None:
            await self.telegram.answer_callback_query(callback_query_id, text)
