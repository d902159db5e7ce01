"""The client of ``/ws/chat`` (trio-websocket): what ``engram chat`` runs, and tests drive.

:class:`ChatClient` keeps one connection up (reconnecting with backoff while the server is away),
sends what the person types and chooses, and hands each server frame to ``show``. Nothing is
lost and nothing shown twice: an input stays pending until the server answers ``stored`` and is
sent again (same id: stored once) after a reconnect; a message or an edit is acknowledged after
``show`` took it, and one sent again (its acknowledgement was lost with the connection or the
server) is acknowledged without being shown again (its delivery key is known).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from typing import Any

import attrs
import trio
from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    HandshakeError,
    WebSocketConnection,
    open_websocket_url,
)

from actors.local import frames
from actors.local.errors import BadFrame, LocalChatError
from actors.local.frames import Ack, Choose, Delivery, Hello, Send, ServerFrame, Stored
from runtime.backoff import backoff_delay
from runtime.logs import get_logger

log = get_logger(__name__)


class Refused(LocalChatError):
    """The server refused the handshake (a wrong token: 401; a browser: 403)."""


@attrs.define(eq=False)
class ChatClient:
    """A connection to ``url`` authenticated by ``token``; frames for the person go to ``show``
    (a message or an edit once, whatever is resent)."""

    url: str
    token: str
    show: Callable[[ServerFrame], None]
    #: told when the connection goes (``False``) or comes (``True``)
    on_link: Callable[[bool], None] = lambda up: None
    reconnect_base: float = 0.1
    reconnect_cap: float = 3.0
    #: tests: do not acknowledge deliveries (as a client that dies before it could)
    hold_acks: bool = False
    pending: dict[str, Send | Choose] = attrs.field(factory=dict)
    seen: set[str] = attrs.field(factory=set)
    connected: bool = False
    connections: int = 0
    _ws: WebSocketConnection | None = None
    _settled: trio.Event = attrs.field(factory=trio.Event)
    _up: trio.Event = attrs.field(factory=trio.Event)
    _task_status: Any = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Connect and stay connected until cancelled; :class:`Refused` when the server says
        the token is wrong. ``started`` once the first connection is up."""
        failures = 0
        self._task_status = task_status
        while True:
            try:
                async with open_websocket_url(
                    self.url,
                    extra_headers=[(b"authorization", f"Bearer {self.token}".encode())],
                    connect_timeout=10,
                    disconnect_timeout=2,
                ) as ws:
                    failures = 0
                    await self._serve(ws)
            except ConnectionRejected as exc:
                if exc.status_code in (401, 403):
                    raise Refused(
                        "the server refused the local token (ENGRAM_HOME must be the server's)"
                    ) from None
            except (HandshakeError, ConnectionClosed, OSError, trio.BrokenResourceError):
                pass
            if self.connected:
                self.connected = False
                self._up = trio.Event()
                self.on_link(False)
            await trio.sleep(
                backoff_delay(failures, base=self.reconnect_base, cap=self.reconnect_cap)
            )
            failures += 1

    async def _serve(self, ws: WebSocketConnection) -> None:
        try:
            while True:
                frame = self._decode(await ws.get_message())
                if frame is None:
                    continue
                if isinstance(frame, Hello):
                    self._ws = ws
                    self.connected = True
                    self.connections += 1
                    for item in list(self.pending.values()):  # not stored yet: again, in order
                        await ws.send_message(frames.encode(item))
                    self._up.set()
                    self.on_link(True)
                    if self._task_status is not None:
                        self._task_status.started()
                        self._task_status = None
                    self.show(frame)
                elif isinstance(frame, Stored):
                    self.pending.pop(frame.id, None)
                    if not self.pending:
                        self._settled.set()
                elif isinstance(frame, Delivery):
                    if frame.delivery not in self.seen:
                        self.seen.add(frame.delivery)
                        self.show(frame)
                    if not self.hold_acks:
                        await ws.send_message(frames.encode(Ack(frame.delivery)))
                else:
                    self.show(frame)
        finally:
            self._ws = None

    def _decode(self, raw: str | bytes) -> ServerFrame | None:
        try:
            return frames.decode_server(raw)
        except BadFrame as exc:
            log.warning("local.client_bad_frame", error=exc.detail)
            return None

    async def say(self, text: str) -> str:
        """Send a message (kept until stored, sent again after a reconnect); its id."""
        return await self._submit(Send(new_id(), text))

    async def choose(self, message_id: int, data: str) -> str:
        """Answer a choice of message ``message_id`` (its ``data``); the input's id."""
        return await self._submit(Choose(new_id(), message_id, data))

    async def _submit(self, item: Send | Choose) -> str:
        self.pending[item.id] = item
        self._settled = trio.Event()
        ws = self._ws
        if ws is not None:
            with contextlib.suppress(ConnectionClosed, trio.BrokenResourceError):
                await ws.send_message(frames.encode(item))  # else: again on the next connection
        return item.id

    async def settled(self) -> None:
        """Until every input is stored."""
        if self.pending:
            await self._settled.wait()

    async def wait_connected(self) -> None:
        await self._up.wait()


def new_id() -> str:
    return uuid.uuid4().hex
