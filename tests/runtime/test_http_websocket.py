"""WebSockets through the hardened server (``serve_http``, real sockets, the real app): the
upgrade works; an open socket is never evicted to make room (it owes no request), idle
connections are; a closed socket gives its slot back at once (hypercorn's ping task, which
outlived the close by up to one interval, is off); the message cap of ``hypercorn_config``
closes the socket that passes it, and only that."""

from __future__ import annotations

import pytest
import trio
from quart import Blueprint, websocket
from trio_websocket import ConnectionClosed, open_websocket_url

from runtime.http import WEBSOCKET_MAX_MESSAGE, create_app
from tests.runtime.test_http_server import get, is_open, opened, serving


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
