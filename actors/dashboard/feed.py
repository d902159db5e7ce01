"""The dashboard's live feed: a WebSocket (``/dashboard/feed?chat=ID``) that sends new
messages, new patterns and new model costs of one chat (or, for the operator without ``chat``,
costs of every chat) as JSON lines, polling the database every ``feed_interval`` seconds.

The socket needs the session cookie like every page, and a same-origin ``Origin``: a page on
another site cannot open it with the person's cookie. What the client sends is read and
dropped: unread, ten frames filled quart's queue, the client's close was never seen, and the
feed polled the database for a gone client until the process stopped.
"""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import urlsplit

import trio
from quart import Blueprint, websocket

from actors.dashboard import auth
from actors.dashboard.context import DashboardDeps
from runtime.db import Queries
from runtime.logs import get_logger

log = get_logger(__name__)

PREVIEW_CHARS = 200

_START = """
/* all chats: the dashboard's operator view when no chat is chosen */
SELECT (SELECT coalesce(max(id), 0) FROM chat_messages
        WHERE $1::bigint IS NULL OR chat_id = $1) AS m,
       (SELECT coalesce(max(id), 0) FROM patterns WHERE $1::bigint IS NULL OR chat_id = $1) AS p,
       (SELECT coalesce(max(id), 0) FROM api_usage WHERE $1::bigint IS NULL OR chat_id = $1) AS u
"""
_MESSAGES = """
SELECT id, role, content, created_at FROM chat_messages
WHERE chat_id = $1 AND id > $2 AND role IN ('user', 'assistant') ORDER BY id LIMIT 50
"""
_PATTERNS = """
SELECT id, kind, content, status FROM patterns WHERE chat_id = $1 AND id > $2 ORDER BY id LIMIT 50
"""
_COSTS = """
/* all chats: the dashboard's operator view when no chat is chosen */
SELECT id, nullif(chat_id, 0) AS chat_id, purpose, model, cost_usd, input_tokens, output_tokens
FROM api_usage
WHERE id > $2 AND ($1::bigint IS NULL OR chat_id = $1) ORDER BY id LIMIT 50
"""


def _preview(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


async def new_events(db: Queries, chat_id: int | None, marks: list[int]) -> list[dict[str, Any]]:
    """The events after ``marks`` (last message, pattern and usage ids seen; advanced)."""
    events: list[dict[str, Any]] = []
    if chat_id is not None:
        for r in await db.fetch(_MESSAGES, chat_id, marks[0]):
            marks[0] = int(r["id"])
            events.append(
                {
                    "type": "message",
                    "role": str(r["role"]),
                    "text": _preview(str(r["content"])),
                    "at": r["created_at"].isoformat(),
                }
            )
        for r in await db.fetch(_PATTERNS, chat_id, marks[1]):
            marks[1] = int(r["id"])
            events.append(
                {
                    "type": "pattern",
                    "id": int(r["id"]),
                    "kind": str(r["kind"]),
                    "text": _preview(str(r["content"])),
                }
            )
    for r in await db.fetch(_COSTS, chat_id, marks[2]):
        marks[2] = int(r["id"])
        events.append(
            {
                "type": "cost",
                "chat_id": r["chat_id"],
                "purpose": str(r["purpose"]),
                "model": str(r["model"]),
                "usd": round(float(r["cost_usd"]), 6),
                "tokens": int(r["input_tokens"]) + int(r["output_tokens"]),
            }
        )
    return events


def _same_origin(origin: str | None, host: str | None) -> bool:
    if not origin:
        return True  # not a browser (a browser always sends Origin on a WebSocket)
    return bool(host) and urlsplit(origin).netloc == host


def add_feed(bp: Blueprint, deps: DashboardDeps) -> None:
    """Add ``/feed`` to the dashboard's blueprint."""

    @bp.websocket("/feed")
    async def feed() -> Any:
        cookie = websocket.cookies.get(auth.COOKIE)
        sid = auth.unsign_session(deps.token, cookie) if cookie and deps.token else None
        login = None if sid is None else await auth.find_session(deps.db, sid, deps.clock())
        if login is None or not _same_origin(
            websocket.headers.get("Origin"), websocket.headers.get("Host")
        ):
            return "Forbidden", 403
        chat = websocket.args.get("chat", type=int)
        if chat is None:
            chat = login.chat_id
        elif not (login.may_see(chat) and -(2**63) <= chat < 2**63):  # past BIGINT: no chat
            return "Not Found", 404
        # where the feed starts is read before the handshake completes: whatever is written
        # once the socket is open is new
        row = await deps.db.fetchrow(_START, chat)
        marks = [int(row[k]) for k in ("m", "p", "u")] if row else [0, 0, 0]
        await websocket.accept()
        ws = cast(Any, websocket)._get_current_object()  # read by the drain's task too
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_drain, ws)
            while await auth.find_session(deps.db, sid or "", deps.clock()) is not None:
                for event in await new_events(deps.db, chat, marks):
                    await ws.send_json(event)
                await trio.sleep(deps.feed_interval)
            nursery.cancel_scope.cancel()
        await ws.close(1008, "logged out")
        return None


async def _drain(ws: Any) -> None:
    """Read and drop the client's frames (the feed only sends): quart sees its close."""
    while True:
        await ws.receive()
