"""hypercorn's HTTP/1.1 machinery behind a cap on open connections.

hypercorn accepts every connection it is offered, and each one holds a file descriptor until
it is closed: a slow-loris client opening ~1,000 idle connections would exhaust a default
1,024-descriptor limit, after which the database pool, the Bot API client and PostgreSQL's own
socket fail too. :func:`serve_http` is ``hypercorn.trio.serve`` (lifespan, one TCPServer per
connection, graceful shutdown) with its accept loop replaced by one that takes a slot of
``max_connections`` *before* accepting: excess clients wait in the kernel's listen backlog
and cost engram nothing. hypercorn's ``keep_alive_timeout`` (``HTTP_IDLE_TIMEOUT``) closes a
connection that is idle — no request in progress, including one that has sent only part of
its headers — so slots come back. Plain HTTP only (TLS ends at the reverse proxy).

This uses hypercorn's own building blocks (``TCPServer``, ``Lifespan``, ``WorkerContext``);
``pyproject.toml`` pins the hypercorn version they were read from.
"""

from __future__ import annotations

import errno
import resource
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState
from hypercorn.utils import repr_socket_addr, wrap_app

from runtime.logs import get_logger

log = get_logger(__name__)

#: descriptors kept for everything that is not an HTTP connection (database pool, Bot API and
#: model clients, PostgreSQL's socket, log files, the interpreter's own)
RESERVED_DESCRIPTORS = 128
#: accept() errors that mean "out of resources": wait and try again (as trio.serve_listeners)
_CAPACITY_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}


def connection_cap(wanted: int) -> int:
    """``wanted``, lowered so the connections fit under the process's descriptor limit with
    :data:`RESERVED_DESCRIPTORS` to spare (at least 8)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(8, min(wanted, soft - RESERVED_DESCRIPTORS))


class _Slots:
    """Open connections, counted (for tests and logs)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._free = trio.Semaphore(limit)

    @property
    def open(self) -> int:
        return self.limit - self._free.value

    async def acquire(self) -> None:
        await self._free.acquire()

    def release(self) -> None:
        self._free.release()


async def serve_http(
    app: Any,
    config: Config,
    *,
    max_connections: int,
    shutdown_trigger: Callable[[], Awaitable[object]],
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``config.bind`` until ``shutdown_trigger`` returns, then close
    gracefully (``config.graceful_timeout``); ``task_status.started(binds)`` once listening."""
    wrapped = wrap_app(app, config.wsgi_max_body_size, "asgi")
    lifespan_state: dict[str, Any] = {}
    lifespan = Lifespan(wrapped, config, lifespan_state)
    context = WorkerContext(None)
    slots = _Slots(max_connections)
    async with trio.open_nursery() as lifespan_nursery:
        await lifespan_nursery.start(lifespan.handle_lifespan)
        await lifespan.wait_for_startup()
        async with trio.open_nursery() as server_nursery:
            sockets = config.create_sockets()
            listeners = []
            binds = []
            for sock in sockets.insecure_sockets:
                sock.listen(config.backlog)
                listeners.append(trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
                binds.append(f"http://{repr_socket_addr(sock.family, sock.getsockname())}")

            async def serve_one(stream: trio.SocketStream) -> None:
                try:
                    state = ConnectionState(lifespan_state.copy())
                    await TCPServer(wrapped, config, context, state, stream)  # type: ignore[arg-type]
                finally:
                    slots.release()
                    # closed even when cancelled before TCPServer ran (shutdown); idempotent
                    stream.socket.close()

            async def accept_loop(listener: trio.SocketListener) -> None:
                while True:
                    await slots.acquire()
                    try:
                        stream = await listener.accept()
                    except OSError as exc:
                        slots.release()
                        if exc.errno not in _CAPACITY_ERRNOS:
                            raise
                        log.error("http.accept_failed", error=str(exc), open=slots.open)
                        await trio.sleep(0.1)
                        continue
                    except BaseException:
                        slots.release()
                        raise
                    server_nursery.start_soon(serve_one, stream)

            log.info("http.listening", binds=binds, max_connections=max_connections)
            task_status.started(binds)
            try:
                async with trio.open_nursery() as accepting:
                    for listener in listeners:
                        accepting.start_soon(accept_loop, listener)
                    await shutdown_trigger()
                    accepting.cancel_scope.cancel()
            finally:
                for listener in listeners:
                    listener.socket.close()  # no checkpoint: this runs when cancelled too
                await context.terminated.set()  # idle connections close, requests finish
                server_nursery.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
        await lifespan.wait_for_shutdown()
        lifespan_nursery.cancel_scope.cancel()
