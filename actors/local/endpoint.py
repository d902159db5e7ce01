"""``/ws/chat``: the WebSocket of ``engram chat`` on the HTTP app (a quart-trio blueprint).

The handshake must carry ``Authorization: Bearer <the local token>`` (:mod:`actors.local.token`)
and no ``Origin`` (a web page cannot open the socket: browsers send one); otherwise 401/403 and
no socket. Then the client's frames (:mod:`actors.local.frames`): a message or a choice enters
the inbox exactly like a Telegram update (the same row, the router told), stored once per
client id and answered ``stored``; an ``ack`` ends the wait of the delivery it names; a frame
the protocol does not know is answered ``error`` with its code, and the connection stays. When
the database cannot store an input the connection is closed (1011): the client keeps what was
not ``stored`` and sends it again when it reconnects.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import trio
from quart import Blueprint, websocket

from actors.local import frames
from actors.local.errors import BadFrame, TokenProblem
from actors.local.frames import Ack, Error, Hello, Stored
from actors.local.hub import LocalHub, Session
from actors.local.ids import LOCAL_CHAT_ID
from actors.local.ingress import store_input
from actors.local.token import load_or_create, matches
from actors.telegram.types import Update
from runtime.db import Queries
from runtime.errors import DatabaseError
from runtime.logs import get_logger

log = get_logger(__name__)

CHAT_PATH = "/ws/chat"


def bearer(headers: Any) -> str:
    value = str(headers.get("authorization", ""))
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def chat_blueprint(
    db: Queries,
    hub: LocalHub,
    home: Path,
    notify: Callable[[int, Update], None],
) -> Blueprint:
    """The ``/ws/chat`` route. ``notify``: the router's ``accepted`` (as ingest calls it)."""
    bp = Blueprint("local_chat", __name__)

    @bp.websocket(CHAT_PATH)
    async def chat_socket() -> Any:
        try:
            expected = load_or_create(home)
        except (TokenProblem, OSError) as exc:
            log.error("local.token_unusable", error=str(exc))
            return "the local token cannot be used: see the server's log\n", 503
        if websocket.headers.get("origin") is not None:
            log.warning("local.refused", why="origin")
            return "no browser access\n", 403
        if not matches(expected, bearer(websocket.headers)):
            log.warning("local.refused", why="token")
            return "unauthorized\n", 401
        await websocket.accept()
        chat_id = LOCAL_CHAT_ID
        ws = cast(Any, websocket)._get_current_object()  # used by the sender's task too
        async with trio.open_nursery() as nursery:
            session = Session(chat_id, ws.send, nursery.cancel_scope, nursery)
            log.info("local.connected", chat_id=chat_id)
            try:
                await session.send(Hello(chat_id))
                hub.attach(session)
                while True:
                    raw = await ws.receive()
                    if not await _handle(db, session, raw, notify):
                        await ws.close(1011, "storage unavailable")
                        break
            except trio.Cancelled:
                raise
            finally:
                hub.detach(session)
                log.info("local.disconnected", chat_id=chat_id)
            nursery.cancel_scope.cancel()
        return None

    return bp


async def _handle(
    db: Queries, session: Session, raw: str | bytes, notify: Callable[[int, Update], None]
) -> bool:
    """One client frame; False when the connection should end (the inbox is unavailable)."""
    try:
        frame = frames.decode_client(raw)
    except BadFrame as exc:
        await session.send(Error(exc.code, exc.detail))
        return True
    if isinstance(frame, Ack):
        session.acked(frame.delivery)
        return True
    try:
        stored = await store_input(db, session.chat_id, frame)
    except DatabaseError as exc:
        log.warning("local.store_failed", chat_id=session.chat_id, error=type(exc).__name__)
        await session.send(Error("unavailable", "could not store it; it is sent again", frame.id))
        return False
    if stored is not None:
        row_id, update = stored
        log.info(
            "ingest.accepted",
            chat_id=session.chat_id,
            kind=update.kind,
            inbox_id=row_id,
            source="local",
        )
        try:
            notify(row_id, update)
        except Exception as exc:  # the row is durable; the router's sweep picks it up
            log.error("local.notify_failed", error=repr(exc)[:300])
    await session.send(Stored(frame.id))
    return True
