"""Bare ASGI plumbing: a path dispatcher in front of the quart-trio app, and small helpers.

Hot endpoints (the Telegram webhook) are plain ASGI callables: they skip the framework's
request/response objects, routing, context variables and signals, which cost more CPU per
request than the endpoint's own work. :class:`PathDispatcher` hands requests for their exact
paths to them and everything else (other paths, websockets, the lifespan protocol) to the app.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
AsgiApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class PathDispatcher:
    """ASGI app: HTTP requests whose path is in ``routes`` go to that handler (any method: the
    handler answers 405 itself), all else to ``fallback``."""

    def __init__(
        self, fallback: Callable[..., Awaitable[None]], routes: Mapping[str, AsgiApp]
    ) -> None:
        self.fallback = fallback
        self.routes = dict(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            handler = self.routes.get(scope["path"])
            if handler is not None:
                await handler(scope, receive, send)
                return
        await self.fallback(scope, receive, send)


def remote_address(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "<unknown>"


async def send_response(
    send: Send,
    status: int,
    body: bytes,
    *,
    content_type: bytes = b"application/json",
    headers: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    """A complete response with a ``Content-Length`` (two ASGI messages)."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode("ascii")),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def close_when_body_unread(app: AsgiApp) -> AsgiApp:
    """An HTTP response started before its request's body was all received says
    ``connection: close``: the server will not read the rest, so the connection ends with the
    response, and a keep-alive client must not send its next request on it (it would meet a
    closed socket: "server disconnected without sending a response")."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await app(scope, receive, send)
            return
        headers = dict(scope.get("headers", ()))
        length = headers.get(b"content-length", b"0").strip()
        done = [b"transfer-encoding" not in headers and length in (b"", b"0")]

        async def receiving() -> Message:
            message = await receive()
            if message.get("type") != "http.request" or not message.get("more_body", False):
                done[0] = True
            return message

        async def sending(message: Message) -> None:
            if message.get("type") == "http.response.start" and not done[0]:
                headers = [h for h in message.get("headers", ()) if h[0].lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await app(scope, receiving, sending)

    return wrapped
