"""A TCP proxy in front of the tests' PostgreSQL, to play a database outage for real.

    async with run_pg_proxy(pg_server, database_url) as proxy:
        url = proxy.url            # postgresql://...@127.0.0.1:PORT/<the same database>
        proxy.cut()                # every open connection is reset; new ones are refused
        proxy.restore()            # connections are accepted (and relayed) again

A cut resets every relayed connection (both sides: the client sees its connection lost, the
server sees the client go away) and, until :meth:`PgProxy.restore`, an accepted connection is
closed at once, before any byte — what a client of a stopped server sees. Nothing in between
is faked: the client talks the real protocol to the real server.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import trio


class PgProxy:
    def __init__(self, socket_path: Path, database: str) -> None:
        self.socket_path = socket_path
        self.database = database
        self.port = 0
        self.down = False
        self.accepted = 0
        self.refused = 0
        self._live: set[trio.SocketStream] = set()

    @property
    def url(self) -> str:
        return f"postgresql://postgres:@127.0.0.1:{self.port}/{self.database}"

    def cut(self) -> None:
        """Reset every relayed connection and refuse new ones."""
        self.down = True
        for stream in list(self._live):
            _reset(stream)
        self._live.clear()

    def restore(self) -> None:
        self.down = False

    async def _relay(self, client: trio.SocketStream) -> None:
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server = trio.SocketStream(sock)
        try:
            if self.down:
                self.refused += 1
                _reset(client)
                return
            self.accepted += 1
            try:
                await sock.connect(str(self.socket_path))
            except OSError:
                _reset(client)
                return
            self._live |= {client, server}
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_pump, client, server, nursery.cancel_scope)
                nursery.start_soon(_pump, server, client, nursery.cancel_scope)
        finally:  # every path, cancellation included: no socket is left to the collector
            self._live -= {client, server}
            for stream in (client, server):
                with suppress(OSError):
                    stream.socket.close()


async def _pump(src: trio.SocketStream, dst: trio.SocketStream, scope: trio.CancelScope) -> None:
    try:
        while data := await src.receive_some(65536):
            await dst.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass
    scope.cancel()


def _reset(stream: trio.SocketStream) -> None:
    """Close with RST (SO_LINGER 0) where the socket allows it."""
    with suppress(OSError):
        if stream.socket.family != socket.AF_UNIX:
            stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        stream.socket.close()


def socket_path_of(pg_server: Any) -> Path:
    """The Unix socket of a pgserver server."""
    path: Path = pg_server.get_postmaster_info().socket_path
    return path


@asynccontextmanager
async def run_pg_proxy(pg_server: Any, database_url: str) -> AsyncIterator[PgProxy]:
    """A proxy to ``database_url``'s database on ``pg_server``, for the block."""
    database = urlsplit(database_url).path.lstrip("/")
    proxy = PgProxy(socket_path_of(pg_server), database)
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        proxy.port = listeners[0].socket.getsockname()[1]
        nursery.start_soon(trio.serve_listeners, proxy._relay, listeners)
        try:
            yield proxy
        finally:
            proxy.cut()
            nursery.cancel_scope.cancel()
