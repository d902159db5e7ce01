"""hypercorn's HTTP/1.1 machinery, hardened: no peer can stop the process or hold its slots.

hypercorn accepts every connection it is offered, and each one holds a file descriptor until
it is closed: a slow-loris client opening ~1,000 idle connections would exhaust a default
1,024-descriptor limit, after which the database pool, the Bot API client and PostgreSQL's own
socket fail too. :func:`serve_http` is ``hypercorn.trio.serve`` (lifespan, one TCPServer per
connection, graceful shutdown) with its accept loop replaced by one that takes a slot of
``max_connections`` *before* accepting. When every slot is taken and a client is waiting to be
accepted, the connection that has waited longest on its peer (no request yet, or a request
whose body has not all arrived) is closed to make room, so many slow clients cannot starve
``/healthz`` or the webhook; connections whose request is being answered are never closed.

Each connection (:class:`_Connection`, hypercorn's ``TCPServer``) is bounded in time:

- no request in progress (idle, or only part of the headers): hypercorn's
  ``keep_alive_timeout`` (``HTTP_IDLE_TIMEOUT``) closes it;
- a body is read by its handler under the handler's own deadline and size cap (the webhook's,
  or quart's ``BODY_TIMEOUT``/``MAX_CONTENT_LENGTH``); a handler that answers without reading
  the body ends the connection with its answer;
- a response the peer does not read within ``send_timeout`` closes the connection.

A failure inside one connection (a protocol error, a reset, a bug) ends that connection and is
logged as one line (``http.connection_failed``); nothing else. Plain HTTP only (TLS ends at the
reverse proxy).

This uses hypercorn's own building blocks (``TCPServer``, ``Lifespan``, ``WorkerContext``);
``pyproject.toml`` pins the hypercorn version they were read from.
"""

from __future__ import annotations

import errno
import resource
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import h11
import trio
from hypercorn.config import Config
from hypercorn.events import Closed, Event, RawData, Updated
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import AppWrapper, ConnectionState
from hypercorn.utils import repr_socket_addr, wrap_app

from runtime.asgi import close_when_body_unread
from runtime.errors import leaf_exceptions
from runtime.logs import get_logger, log_this_one

log = get_logger(__name__)

#: descriptors kept for everything that is not an HTTP connection (database pool, Bot API and
#: model clients, PostgreSQL's socket, log files, the interpreter's own)
RESERVED_DESCRIPTORS = 128
#: seconds a response may wait for the peer to read it before the connection is closed
SEND_TIMEOUT = 10.0
#: seconds the accept loop waits for a slot to come back before it evicts a waiting connection
EVICT_AFTER = 0.05
#: accept() errors that mean "out of resources": wait and try again (as trio.serve_listeners)
_CAPACITY_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}
#: h11 states of a peer that still owes us its request (or the rest of its body)
_PEER_OWES = {h11.IDLE, h11.SEND_BODY}


def connection_cap(wanted: int) -> int:
    """``wanted``, lowered so the connections fit under the process's descriptor limit with
    :data:`RESERVED_DESCRIPTORS` to spare (at least 8)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(8, min(wanted, soft - RESERVED_DESCRIPTORS))


def describe_failure(group: BaseException) -> list[str]:
    """``Type at dir/file.py:line`` (its innermost frame) for each leaf of ``group``: enough to
    find a bug, and no message text (which may quote what the peer sent)."""
    described = []
    for exc in leaf_exceptions(group):
        where = "?"
        tb = exc.__traceback__
        while tb is not None:
            path = tb.tb_frame.f_code.co_filename.replace("\\", "/")
            where = f"{'/'.join(path.rsplit('/', 2)[-2:])}:{tb.tb_lineno}"
            tb = tb.tb_next
        described.append(f"{type(exc).__name__} at {where}")
    return described


class _Connection(TCPServer):
    """hypercorn's ``TCPServer`` (one connection), with four faults fixed and a way out.

    - hypercorn half-closes (``send_eof``) without its send lock, and ``send_eof`` checkpoints
      inside the stream's send-conflict detector: an error response written at that moment (a
      peer half-closing in the middle of its body) raised ``BusyResourceError`` out of the
      connection. Here the close takes the lock.
    - the close runs in whichever task asks for it, the application's included: quart cancels
      its own tasks once it has answered, which cancelled the close, and the connection stayed
      open for as long as the peer kept trickling a body. Here the close is shielded.
    - a response is written under a shield with no deadline: a peer that pipelines requests and
      never reads the answers held the connection forever. Here ``send_timeout`` bounds it.
    - once nothing more can be read (the peer closed or reset), the idle timer still held the
      connection, and its slot, for up to ``keep_alive_timeout``. Here it is stopped.

    :meth:`evict` closes the socket from outside; :attr:`peer_owes` and :attr:`waiting_since`
    say whether and since when the connection waits on its peer.
    """

    def __init__(self, *args: Any, send_timeout: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._send_timeout = send_timeout
        self._idle = True
        self.waiting_since = trio.current_time()
        self.evicted = False

    @property
    def peer_owes(self) -> bool:
        """The peer owes a request, or the rest of one: closing costs no work in progress."""
        wrapper = getattr(self, "protocol", None)
        if wrapper is None:
            return True  # not started: nothing read yet
        protocol = wrapper.protocol
        if isinstance(protocol, H11Protocol) and isinstance(protocol.connection, h11.Connection):
            return protocol.connection.their_state in _PEER_OWES
        return self._idle  # HTTP/2 or a websocket: only between requests

    def evict(self) -> None:
        """Close the socket: every task of the connection wakes up to a closed stream."""
        self.evicted = True
        self.stream.socket.close()

    async def protocol_send(self, event: Event) -> None:
        if isinstance(event, RawData):
            async with self.send_lock:
                # shielded as hypercorn does (the app's cancellation must not cut a response in
                # half) but bounded: a peer that does not read does not keep the connection
                with trio.CancelScope(
                    shield=True, deadline=trio.current_time() + self._send_timeout
                ):
                    try:
                        await self.stream.send_all(event.data)
                        return
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        pass
                self.stream.socket.close()  # broken, or a write cut in half: unusable
            await self.protocol.handle(Closed())
            return
        if isinstance(event, Updated):
            self._idle = event.idle
            self.waiting_since = trio.current_time()
        await super().protocol_send(event)

    async def _read_data(self) -> None:
        await super()._read_data()
        # nothing more can be read (the peer closed, reset, or was evicted): hypercorn's idle
        # timer, left running, would hold the connection (and its slot) until it fired
        await self.idle_task.stop()

    async def _close(self) -> None:
        with trio.CancelScope(shield=True):  # (no caller holds the send lock: see protocol_send)
            async with self.send_lock:
                await super()._close()


class _Slots:
    """The open connections, at most ``limit`` of them."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._free = trio.Semaphore(limit)
        self.connections: set[_Connection] = set()
        self.evictions = 0

    @property
    def open(self) -> int:
        return self.limit - self._free.value

    async def acquire(self, client_waiting: Callable[[], Awaitable[object]]) -> None:
        """A free slot. While there is none and ``client_waiting()`` says a client waits to be
        accepted, the connection that has waited longest on its peer is evicted."""
        while True:
            with trio.move_on_after(EVICT_AFTER):
                await self._free.acquire()
                return
            await client_waiting()
            try:
                self._free.acquire_nowait()  # one came back meanwhile
                return
            except trio.WouldBlock:
                self.evict_one()

    def release(self) -> None:
        self._free.release()

    def evict_one(self) -> None:
        """Evict the connection that has waited longest on its peer, if one does."""
        waiting = [c for c in self.connections if not c.evicted and c.peer_owes]
        if waiting:
            min(waiting, key=lambda c: c.waiting_since).evict()
            self.evictions += 1
            if log_this_one(self.evictions):
                log.warning("http.connections_evicted", total=self.evictions, limit=self.limit)


async def serve_http(
    app: Any,
    config: Config,
    *,
    max_connections: int,
    shutdown_trigger: Callable[[], Awaitable[object]],
    send_timeout: float = SEND_TIMEOUT,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``config.bind`` until ``shutdown_trigger`` returns, then close
    gracefully (``config.graceful_timeout``); ``task_status.started(binds)`` once listening."""
    asgi: Any = close_when_body_unread(app)  # hypercorn's own ASGI types: ours are plainer
    wrapped: AppWrapper = wrap_app(asgi, config.wsgi_max_body_size, "asgi")
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
                state = ConnectionState(lifespan_state.copy())
                connection = _Connection(
                    wrapped,
                    config,
                    context,
                    state,
                    stream,  # type: ignore[arg-type]
                    send_timeout=send_timeout,
                )
                slots.connections.add(connection)
                try:
                    await connection.run()
                except* Exception as group:  # one connection's failure ends that connection only
                    log.warning("http.connection_failed", errors=describe_failure(group))
                finally:
                    slots.connections.discard(connection)
                    slots.release()
                    # closed even when cancelled before run() did (shutdown); idempotent
                    stream.socket.close()

            async def accept_loop(listener: trio.SocketListener) -> None:
                while True:
                    await slots.acquire(partial(trio.lowlevel.wait_readable, listener.socket))
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
