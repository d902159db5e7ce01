"""``serve_http`` in process, real sockets on 127.0.0.1 and the real app: a peer's failure ends
its own connection only; at the cap the connection waiting longest on its peer makes room; an
answer the peer does not read, or a body it does not send, holds no slot past its deadline."""

from __future__ import annotations

import re
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from functools import partial
from typing import Any

import pytest
import structlog
import trio
from quart import Blueprint, Response, request, websocket
from trio_websocket import ConnectionClosed, open_websocket_url

from runtime.asgi import PathDispatcher, Receive, Scope, Send
from runtime.http import BODY_TIMEOUT, WEBSOCKET_MAX_MESSAGE, create_app, hypercorn_config
from runtime.http_server import describe_failure, serve_http
from runtime.logs import log_this_one

_STATUS = re.compile(rb"HTTP/1\.1 (\d{3})")


@asynccontextmanager
async def serving(app: Any, *, cap: int = 8, send_timeout: float = 10.0) -> AsyncIterator[int]:
    """``app`` behind :func:`serve_http` on a free port (yielded) for the block."""
    stop = trio.Event()
    config = hypercorn_config("127.0.0.1", 0)
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(
            partial(
                serve_http,
                app,
                config,
                max_connections=cap,
                shutdown_trigger=stop.wait,
                send_timeout=send_timeout,
            )
        )
        try:
            yield int(binds[0].rsplit(":", 1)[1])
        finally:
            stop.set()


async def opened(port: int, data: bytes = b"", **sockopts: int) -> trio.SocketStream:
    sock = trio.socket.socket()
    for name, value in sockopts.items():
        sock.setsockopt(socket.SOL_SOCKET, getattr(socket, name), value)
    await sock.connect(("127.0.0.1", port))
    stream = trio.SocketStream(sock)
    if data:
        await stream.send_all(data)
    return stream


async def read_all(stream: trio.SocketStream, limit: float = 5.0) -> bytes:
    """Everything until the server closes (or resets) the connection; TooSlowError past
    ``limit``."""
    got = b""
    with trio.fail_after(limit):
        try:
            while chunk := await stream.receive_some(1 << 20):
                got += chunk
        except trio.BrokenResourceError:
            pass
    return got


async def is_open(stream: trio.SocketStream) -> bool:
    """Nothing arrives and the server has not closed it within 0.2 s."""
    with trio.move_on_after(0.2):
        with suppress(trio.BrokenResourceError):
            await stream.receive_some(1)
        return False
    return True


async def get(port: int, path: str, limit: float = 2.0) -> int:
    """The status of ``GET path`` on a new connection (``Connection: close``)."""
    stream = await opened(
        port, f"GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode()
    )
    async with stream:
        answer = await read_all(stream, limit)
    return int(_STATUS.findall(answer)[0])


async def test_a_half_close_in_the_middle_of_a_body_ends_that_connection_only() -> None:
    """Issue 20 row 1: 100000 bytes announced, 4 sent, then FIN (the server's error answer used
    to race its own half-close and raise out of serve_http)."""
    async with serving(create_app()) as port:
        for path in ("/healthz", "/readyz", "/nowhere"):
            streams = []
            for _ in range(5):
                head = f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n"
                stream = await opened(port, head.encode() + b"abcd")
                await stream.send_eof()
                streams.append(stream)
            for stream in streams:
                async with stream:
                    await read_all(stream)
            assert await get(port, "/healthz") == 200


async def test_a_failing_handler_fails_its_own_request_only() -> None:
    async def boom(scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("a bug")

    async def half(scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"10")]}
        )
        raise RuntimeError("a bug in the middle of an answer")

    app = PathDispatcher(create_app(), {"/boom": boom, "/half": half})
    async with serving(app) as port:
        for _ in range(3):
            assert await get(port, "/boom") == 500
            stream = await opened(port, b"GET /half HTTP/1.1\r\nHost: t\r\n\r\n")
            async with stream:
                answer = await read_all(stream)  # cut short: the connection is closed
            assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"\r\n\r\n")
            assert await get(port, "/healthz") == 200


async def test_at_the_cap_the_connection_waiting_longest_on_its_peer_makes_room() -> None:
    entered, release = trio.Event(), trio.Event()
    bp = Blueprint("hold", __name__)

    @bp.get("/hold")
    async def hold() -> str:
        entered.set()
        await release.wait()
        return "done"

    with structlog.testing.capture_logs() as logs:
        async with serving(create_app(blueprints=[bp]), cap=3) as port:
            busy = await opened(port, b"GET /hold HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            await entered.wait()  # its request is complete: being answered, never evicted
            idle = await opened(port)
            await trio.sleep(0.05)
            partial = await opened(port, b"GET /healthz HTTP/1.1\r\nHo")
            await trio.sleep(0.05)
            # all three slots taken: the oldest waiting on its peer (idle) goes first
            assert await get(port, "/healthz") == 200
            assert not await is_open(idle)
            assert await is_open(partial)
            newer = await opened(port)  # full again: now the partial headers are the oldest
            await trio.sleep(0.05)
            assert await get(port, "/healthz") == 200
            assert not await is_open(partial)
            assert await is_open(newer)
            assert await is_open(busy)
            release.set()
            answer = await read_all(busy)
            assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"done")
            for stream in (busy, idle, partial, newer):
                await stream.aclose()
    evicted = [e["total"] for e in logs if e["event"] == "http.connections_evicted"]
    assert evicted == [1, 2]


async def test_an_answer_the_peer_does_not_read_is_cut_after_the_send_timeout() -> None:
    bp = Blueprint("big", __name__)

    @bp.get("/big")
    async def big() -> Response:
        return Response(b"x" * (32 << 20), content_type="application/octet-stream")

    async with serving(create_app(blueprints=[bp]), cap=1, send_timeout=0.5) as port:
        reader = await opened(port, b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n", SO_RCVBUF=4096)
        await trio.sleep(0.2)
        # the only slot is held by an answer being written: it comes back at the send timeout
        assert await get(port, "/healthz", limit=3.0) == 200
        async with reader:
            got = await read_all(reader)
        assert 0 < len(got) < 32 << 20


async def test_a_body_the_app_waits_for_has_a_deadline_then_the_connection_closes() -> None:
    bp = Blueprint("echo", __name__)

    @bp.post("/echo")
    async def echo() -> Response:
        return Response(await request.get_data())

    app = create_app(blueprints=[bp])
    assert app.config["BODY_TIMEOUT"] == BODY_TIMEOUT <= 10
    app.config["BODY_TIMEOUT"] = 0.5
    async with serving(app) as port:
        stream = await opened(
            port, b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n"
        )
        start = trio.current_time()
        async with stream, trio.open_nursery() as nursery:

            async def trickle() -> None:
                try:
                    for _ in range(50):
                        await stream.send_all(b"a")
                        await trio.sleep(0.1)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass

            nursery.start_soon(trickle)
            answer = await read_all(stream)
            nursery.cancel_scope.cancel()
        assert _STATUS.findall(answer) == [b"408"]
        assert trio.current_time() - start < 2.0


def _raise(exc: Exception) -> None:
    raise exc


def test_a_failure_is_described_by_type_and_place_without_its_text() -> None:
    leaves = []
    for exc in (ValueError("secret-ish peer text"), KeyError("more")):
        try:
            _raise(exc)
        except Exception as caught:
            leaves.append(caught)
    described = describe_failure(
        ExceptionGroup("g", [ExceptionGroup("inner", leaves[:1]), leaves[1]])
    )
    line = _raise.__code__.co_firstlineno + 1
    assert described == [
        f"ValueError at runtime/test_http_server.py:{line}",
        f"KeyError at runtime/test_http_server.py:{line}",
    ]
    assert "peer text" not in repr(described)


@pytest.mark.parametrize(
    "count, logged", [(1, True), (2, True), (3, False), (64, True), (0, False)]
)
def test_a_repeated_event_is_logged_at_powers_of_two(count: int, logged: bool) -> None:
    assert log_this_one(count) is logged


# --- WebSockets through the hardened server ---------------------------------------------------
# WebSockets through the hardened server (``serve_http``, real sockets, the real app): the
# upgrade works; an open socket is never evicted to make room (it owes no request), idle
# connections are; a closed socket gives its slot back at once (hypercorn's ping task, which
# outlived the close by up to one interval, is off); the message cap of ``hypercorn_config``
# closes the socket that passes it, and only that.


def echo_app() -> object:
    bp = Blueprint("echo", __name__)

    @bp.websocket("/ws")
    async def echo() -> None:
        while True:
            await websocket.send(await websocket.receive())

    return create_app(blueprints=[bp])


async def test_an_open_websocket_is_not_evicted_at_the_cap() -> None:
    async with (
        serving(echo_app(), cap=2) as port,
        open_websocket_url(f"ws://127.0.0.1:{port}/ws") as ws,
    ):
        await ws.send_message("one")
        assert await ws.get_message() == "one"
        idle = await opened(port)
        await trio.sleep(0.1)  # both slots taken: the socket, and a peer owing a request
        assert await get(port, "/healthz") == 200
        assert not await is_open(idle)
        await ws.send_message("two")  # the socket stayed
        assert await ws.get_message() == "two"
        await idle.aclose()


async def test_a_closed_websocket_gives_its_slot_back() -> None:
    async with serving(echo_app(), cap=2) as port:
        for n in range(4):  # twice the cap, one after the other
            async with open_websocket_url(f"ws://127.0.0.1:{port}/ws") as ws:
                await ws.send_message(str(n))
                assert await ws.get_message() == str(n)
        assert await get(port, "/healthz") == 200


async def test_a_message_past_the_cap_closes_the_socket_only() -> None:
    async with serving(echo_app()) as port:
        async with open_websocket_url(f"ws://127.0.0.1:{port}/ws") as ws:
            await ws.send_message("x" * WEBSOCKET_MAX_MESSAGE)
            assert len(await ws.get_message()) == WEBSOCKET_MAX_MESSAGE
            await ws.send_message("x" * (WEBSOCKET_MAX_MESSAGE + 1))
            with pytest.raises(ConnectionClosed) as closed:
                await ws.get_message()
        assert closed.value.reason is not None and closed.value.reason.code == 1009
        assert await get(port, "/healthz") == 200
