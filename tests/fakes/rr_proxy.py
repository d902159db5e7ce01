"""A round-robin HTTP reverse proxy in front of several ``engram serve`` processes, as an
operator's load balancer runs it: each request (any method, any path) goes to the next backend
in turn; a backend that refuses the connection, or drops it before answering, is skipped for that
request and the next one is tried (a load balancer's retry on connection refused).

    async with run_rr_proxy([port_a, port_b, port_c]) as proxy:
        r = await client.post(f"{proxy.base_url}/api/telegram", ...)   # backend a
        proxy.served                          # [1, 0, 0]: responses relayed, per backend
        proxy.skipped                         # connections refused or dropped, per backend

One request per client connection (the proxy answers ``Connection: close``); the backend's
status and body are relayed as they came. With every backend down the client gets 502.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress

import trio

MAX_HEAD = 64 * 1024
HOP_BY_HOP = {
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"transfer-encoding",
    b"te",
    b"content-length",
}


class BackendFailed(Exception):
    """The backend refused the connection or closed it before a complete response."""


class RoundRobinProxy:
    """The proxy's state: its backends (ports on 127.0.0.1) and what each one served."""

    def __init__(self, ports: Sequence[int], *, timeout: float = 60.0) -> None:
        self.ports = list(ports)
        self.timeout = timeout
        self.served = [0] * len(self.ports)
        self.skipped = [0] * len(self.ports)
        self.port = 0
        self._next = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def order(self) -> list[int]:
        """Backend indexes to try for the next request: the next in turn first."""
        start = self._next % len(self.ports)
        self._next += 1
        return [(start + i) % len(self.ports) for i in range(len(self.ports))]

    async def handle(self, client: trio.SocketStream) -> None:
        async with client:
            try:
                head, body = await read_message(client, request=True)
            except (BackendFailed, trio.BrokenResourceError, trio.ClosedResourceError):
                return
            request = rewrite_head(head, body) + body
            for index in self.order():
                try:
                    with trio.fail_after(self.timeout):
                        status_head, answer = await self.forward(self.ports[index], request)
                except (OSError, BackendFailed, trio.BrokenResourceError, trio.TooSlowError):
                    self.skipped[index] += 1
                    continue
                self.served[index] += 1
                await send_quietly(client, rewrite_head(status_head, answer) + answer)
                return
            await send_quietly(
                client,
                b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            )

    async def forward(self, port: int, request: bytes) -> tuple[bytes, bytes]:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(request)
            return await read_message(stream, request=False)


async def send_quietly(stream: trio.SocketStream, data: bytes) -> None:
    with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        await stream.send_all(data)


async def read_message(stream: trio.SocketStream, *, request: bool) -> tuple[bytes, bytes]:
    """One HTTP/1.1 message: its head (through the blank line) and its body (Content-Length,
    chunked, or — a response without either — up to the end of the connection)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = await stream.receive_some(65536)
        if not chunk or len(buf) > MAX_HEAD:
            raise BackendFailed("closed before the head")
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    head += b"\r\n\r\n"
    headers = parse_headers(head)
    if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
        while not rest.endswith(b"0\r\n\r\n"):
            chunk = await stream.receive_some(65536)
            if not chunk:
                raise BackendFailed("closed inside a chunked body")
            rest += chunk
        return head, dechunk(rest)
    if b"content-length" in headers:
        length = int(headers[b"content-length"])
    elif request or head.split(b" ", 2)[1] in (b"204", b"304"):
        length = 0
    else:
        while chunk := await stream.receive_some(65536):
            rest += chunk
        return head, rest
    while len(rest) < length:
        chunk = await stream.receive_some(65536)
        if not chunk:
            raise BackendFailed("closed inside the body")
        rest += chunk
    return head, rest[:length]


def parse_headers(head: bytes) -> dict[bytes, bytes]:
    out = {}
    for line in head.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        if sep:
            out[name.strip().lower()] = value.strip()
    return out


def dechunk(data: bytes) -> bytes:
    out = b""
    while True:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return out
        out, data = out + data[:size], data[size + 2 :]


def rewrite_head(head: bytes, body: bytes) -> bytes:
    """``head`` without hop-by-hop headers, with ``Connection: close`` and the Content-Length
    of ``body`` (relayed whole, never chunked)."""
    lines = head.rstrip(b"\r\n").split(b"\r\n")
    kept = [lines[0]]
    for line in lines[1:]:
        if line.partition(b":")[0].strip().lower() not in HOP_BY_HOP:
            kept.append(line)
    length = b"Content-Length: %d" % len(body)
    return b"\r\n".join([*kept, length, b"Connection: close"]) + b"\r\n\r\n"


@asynccontextmanager
async def run_rr_proxy(
    ports: Sequence[int], *, answer_within: float = 60.0
) -> AsyncIterator[RoundRobinProxy]:
    """Serve a :class:`RoundRobinProxy` over ``ports`` on 127.0.0.1 (a free port) for the
    block."""
    proxy = RoundRobinProxy(ports, timeout=answer_within)
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1", backlog=1024)
        proxy.port = listeners[0].socket.getsockname()[1]
        nursery.start_soon(trio.serve_listeners, proxy.handle, listeners)
        try:
            yield proxy
        finally:
            nursery.cancel_scope.cancel()
