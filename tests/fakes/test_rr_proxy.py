"""The round-robin proxy of the multi-process test and bench, against tiny real backends."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import trio
from engram_outside import free_port

from fakes.rr_proxy import read_message, run_rr_proxy


@asynccontextmanager
async def backend(name: str, *, status: int = 200, drop: bool = False) -> AsyncIterator[int]:
    """An HTTP server on a free port answering ``<name> <method> <path> <body>`` with
    ``status`` (``drop``: it reads the request and closes the connection without a word)."""

    async def serve(stream: trio.SocketStream) -> None:
        async with stream:
            head, body = await read_message(stream, request=True)
            if drop:
                return
            method, path, _ = head.split(b" ", 2)
            answer = b"%s %s %s %s" % (name.encode(), method, path, body)
            await stream.send_all(
                b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n\r\n%s" % (status, len(answer), answer)
            )

    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        nursery.start_soon(trio.serve_listeners, serve, listeners)
        yield listeners[0].socket.getsockname()[1]
        nursery.cancel_scope.cancel()


async def test_requests_go_to_each_backend_in_turn_with_status_and_body_relayed() -> None:
    async with (
        backend("a") as a,
        backend("b", status=201) as b,
        backend("c", status=404) as c,
        run_rr_proxy([a, b, c]) as proxy,
        httpx.AsyncClient() as client,
    ):
        answers = []
        for i in range(6):
            r = await client.post(f"{proxy.base_url}/api/telegram", content=b"update %d" % i)
            answers.append((r.status_code, r.text))
        r = await client.get(f"{proxy.base_url}/healthz")
    assert answers == [
        (200, "a POST /api/telegram update 0"),
        (201, "b POST /api/telegram update 1"),
        (404, "c POST /api/telegram update 2"),
        (200, "a POST /api/telegram update 3"),
        (201, "b POST /api/telegram update 4"),
        (404, "c POST /api/telegram update 5"),
    ]
    assert (r.status_code, r.text) == (200, "a GET /healthz ")
    assert proxy.served == [3, 2, 2] and proxy.skipped == [0, 0, 0]


async def test_a_refusing_or_dropping_backend_is_skipped_for_the_next() -> None:
    refused = free_port()  # nothing listens there
    async with (
        backend("a") as a,
        backend("dropper", drop=True) as dropper,
        run_rr_proxy([a, refused, dropper]) as proxy,
        httpx.AsyncClient() as client,
    ):
        texts = [
            (await client.post(f"{proxy.base_url}/x", content=b"%d" % i)).text for i in range(3)
        ]
    assert texts == ["a POST /x 0", "a POST /x 1", "a POST /x 2"]
    assert proxy.served == [3, 0, 0]
    assert proxy.skipped == [0, 1, 2]  # request 1 tries refused, dropper, a; request 2 dropper, a


async def test_every_backend_down_is_a_502() -> None:
    async with run_rr_proxy([free_port(), free_port()]) as proxy, httpx.AsyncClient() as client:
        r = await client.post(f"{proxy.base_url}/api/telegram", content=b"{}")
    assert r.status_code == 502
    assert proxy.served == [0, 0] and proxy.skipped == [1, 1]


async def test_a_large_body_is_relayed_whole() -> None:
    body = bytes(range(256)) * 2000  # 512 KB: many reads on each side
    async with backend("a") as a, run_rr_proxy([a]) as proxy, httpx.AsyncClient() as client:
        r = await client.put(f"{proxy.base_url}/big", content=body)
    assert r.content == b"a PUT /big " + body
