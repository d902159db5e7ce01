"""Closed-loop HTTP/1.1 load generator for ``bench/ingress.py`` (run as its own process).

``--concurrency`` keep-alive connections to ``127.0.0.1:<port>``, one request in flight on each
(no pipelining): as soon as a response is complete the connection sends the next request. Every
request is prebuilt before the clock starts (a distinct Telegram update: unique ``update_id`` and
``message_id``, chats spread round-robin over ``--chat-ids``), so the hot path is a
``transport.write`` and a header scan in ``asyncio.Protocol`` callbacks — no tasks, no HTTP
library. Latency is taken per request from just before the write to the end of the response.

A warm-up phase (not measured) runs first on the same connections. The run is bounded: a
fixed number of requests and a ``--deadline`` in seconds after which whatever is still
outstanding counts as timed out. Loopback only.

Prints one JSON object on stdout: ``ok`` (HTTP 200), ``statuses``, ``conn_errors``,
``timeouts``, ``elapsed_s``, ``rps`` (200s per second), ``p50_ms``/``p90_ms``/``p99_ms``/
``max_ms`` (over the 200s), ``cpu_s`` (this process's CPU time during the measured phase).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
from collections import Counter
from collections.abc import Coroutine
from typing import Any

LOOPBACK = "127.0.0.1"
MAX_CONN_ERRORS = 200


def update_body(kind: str, update_id: int, chat_id: int, date: int) -> bytes:
    """One Telegram update (``message``), or one of a kind engram acknowledges unstored."""
    if kind == "unknown":
        obj: dict[str, Any] = {
            "update_id": update_id,
            "poll": {"id": str(update_id), "question": "q", "options": [], "is_closed": False},
        }
    else:
        user = {"id": chat_id, "is_bot": False, "first_name": "Bench", "language_code": "en"}
        obj = {
            "update_id": update_id,
            "message": {
                "message_id": update_id,
                "from": user,
                "chat": {"id": chat_id, "type": "private", "first_name": "Bench"},
                "date": date,
                "text": f"bench message {update_id}: how was your day?",
            },
        }
    return json.dumps(obj, separators=(",", ":")).encode()


def build_requests(
    *, kind: str, n: int, id_base: int, chat_ids: list[int], path: str, secret: str, port: int
) -> list[bytes]:
    date = int(time.time())
    if kind == "healthz":
        req = (f"GET /healthz HTTP/1.1\r\nHost: {LOOPBACK}:{port}\r\n\r\n").encode()
        return [req] * n
    out = []
    for i in range(n):
        body = update_body(kind, id_base + i, chat_ids[i % len(chat_ids)], date)
        head = (
            f"POST {path} HTTP/1.1\r\n"
            f"Host: {LOOPBACK}:{port}\r\n"
            "Content-Type: application/json\r\n"
            f"X-Telegram-Bot-Api-Secret-Token: {secret}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        out.append(head.encode() + body)
    return out


class Phase:
    """One batch of requests spread over the connections; collects what came back."""

    def __init__(self, requests: list[bytes], loop: asyncio.AbstractEventLoop) -> None:
        self.requests = requests
        self.next = 0
        self.finished = 0
        self.latencies: list[float] = []  # seconds, 200s only
        self.statuses: Counter[int] = Counter()
        self.conn_errors = 0
        self.done: asyncio.Future[None] = loop.create_future()

    def take(self) -> int | None:
        if self.next >= len(self.requests):
            return None
        i = self.next
        self.next += 1
        return i

    def settle(self) -> None:
        self.finished += 1
        if self.finished >= len(self.requests) and not self.done.done():
            self.done.set_result(None)


class Conn(asyncio.Protocol):
    """One keep-alive connection with at most one request in flight."""

    def __init__(self, gen: Generator) -> None:
        self.gen = gen
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.inflight: int | None = None
        self.t0 = 0.0
        self.connected: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.closing = False

    # --- protocol callbacks ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if not self.connected.done():
            self.connected.set_result(None)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while self.inflight is not None:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[:end]).lower()
            body_start = end + 4
            length = 0
            close = b"\r\nconnection: close" in head
            pos = head.find(b"\r\ncontent-length:")
            try:
                if not head.startswith(b"http/1."):
                    raise ValueError("not an HTTP/1.x response")
                status = int(head[9:12])
                if pos >= 0:
                    stop = head.find(b"\r\n", pos + 2)
                    length = int(head[pos + 17 : stop if stop >= 0 else len(head)])
            except ValueError:  # garbage: drop the connection, the request counts as an error
                self.closing = True
                if self.transport is not None:
                    self.transport.close()
                return
            if pos >= 0:
                if len(self.buf) < body_start + length:
                    return
                consumed = body_start + length
            elif b"\r\ntransfer-encoding: chunked" in head:
                # small responses only: wait for the terminating zero-size chunk
                term = self.buf.find(b"0\r\n\r\n", body_start)
                if term < 0:
                    return
                consumed = term + 5
            else:  # delimited by close: only the status matters
                consumed = len(self.buf)
                close = True
            del self.buf[:consumed]
            latency = time.perf_counter() - self.t0
            if close:  # the server ends this connection: no next request on it
                self.closing = True
            self.gen.response(self, status, latency)
            if close:
                if self.transport is not None:
                    self.transport.close()
                return

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if not self.connected.done():
            self.connected.set_exception(exc or ConnectionError("connection lost"))
        self.gen.lost(self)

    # --- driving --------------------------------------------------------------------------

    def send(self, index: int, payload: bytes) -> None:
        assert self.transport is not None
        self.inflight = index
        self.t0 = time.perf_counter()
        self.transport.write(payload)


class Generator:
    def __init__(self, port: int, concurrency: int) -> None:
        self.port = port
        self.concurrency = concurrency
        self.conns: list[Conn] = []
        self.phase: Phase | None = None
        self.loop = asyncio.get_running_loop()
        self.tasks: set[asyncio.Task[None]] = set()
        self.closed = False

    async def connect_one(self) -> Conn:
        _, proto = await self.loop.create_connection(lambda: Conn(self), LOOPBACK, self.port)
        assert isinstance(proto, Conn)
        await proto.connected
        return proto

    async def open(self) -> None:
        self.conns = list(
            await asyncio.gather(*(self.connect_one() for _ in range(self.concurrency)))
        )

    def feed(self, conn: Conn) -> None:
        phase = self.phase
        if phase is None or conn.transport is None or conn.closing:
            return
        i = phase.take()
        if i is None:
            conn.inflight = None
            return
        conn.send(i, phase.requests[i])

    def response(self, conn: Conn, status: int, latency: float) -> None:
        phase = self.phase
        conn.inflight = None
        if phase is None:
            return
        phase.statuses[status] += 1
        if status == 200:
            phase.latencies.append(latency)
        phase.settle()
        self.feed(conn)

    def lost(self, conn: Conn) -> None:
        """A connection ended: an unanswered request is an error; open a replacement."""
        phase = self.phase
        if conn in self.conns:
            self.conns.remove(conn)
        if conn.inflight is not None:
            conn.inflight = None
            if phase is not None:
                phase.conn_errors += 1
                phase.settle()
        if self.closed:
            return
        if phase is not None and phase.conn_errors > MAX_CONN_ERRORS:
            if not phase.done.done():
                phase.done.set_exception(RuntimeError(f"over {MAX_CONN_ERRORS} connection errors"))
            return
        self._spawn(self._replace())

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = self.loop.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _replace(self) -> None:
        while not self.closed:
            try:
                conn = await self.connect_one()
            except OSError:
                phase = self.phase
                if phase is not None:
                    phase.conn_errors += 1
                    if phase.conn_errors > MAX_CONN_ERRORS and not phase.done.done():
                        phase.done.set_exception(RuntimeError("cannot reconnect"))
                        return
                await asyncio.sleep(0.05)
                continue
            self.conns.append(conn)
            self.feed(conn)
            return

    async def run(self, requests: list[bytes], deadline: float) -> tuple[Phase, float, int]:
        """Send ``requests``; returns the phase, its wall time and how many timed out."""
        phase = Phase(requests, self.loop)
        self.phase = phase
        t0 = time.perf_counter()
        for conn in list(self.conns):
            self.feed(conn)
        timeouts = 0
        try:
            await asyncio.wait_for(asyncio.shield(phase.done), deadline)
        except TimeoutError:
            timeouts = len(requests) - phase.finished
        elapsed = time.perf_counter() - t0
        self.phase = None
        return phase, elapsed, timeouts

    def close(self) -> None:
        self.closed = True
        for conn in self.conns:
            if conn.transport is not None:
                conn.closing = True
                conn.transport.close()


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of an ascending list; NaN when empty."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), -(-len(sorted_values) * q // 100)))
    return sorted_values[int(rank) - 1]


def cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    chat_ids = [int(c) for c in args.chat_ids.split(",") if c.strip()]
    common = {
        "kind": args.kind,
        "chat_ids": chat_ids,
        "path": args.path,
        "secret": args.secret,
        "port": args.port,
    }
    warm = build_requests(n=args.warmup, id_base=args.id_base, **common)
    measured = build_requests(n=args.requests, id_base=args.id_base + args.warmup, **common)
    gen = Generator(args.port, args.concurrency)
    await asyncio.wait_for(gen.open(), 10)
    try:
        if warm:
            wphase, _, wtimeouts = await gen.run(warm, args.deadline)
            if wtimeouts or wphase.statuses.get(200, 0) == 0:
                raise RuntimeError(
                    f"warm-up failed: statuses={dict(wphase.statuses)} timeouts={wtimeouts} "
                    f"conn_errors={wphase.conn_errors}"
                )
        cpu0 = cpu_seconds()
        phase, elapsed, timeouts = await gen.run(measured, args.deadline)
        cpu = cpu_seconds() - cpu0
    finally:
        gen.close()
    lat = sorted(phase.latencies)
    ok = phase.statuses.get(200, 0)
    return {
        "ok": ok,
        "sent": args.requests,
        "statuses": {str(k): v for k, v in sorted(phase.statuses.items())},
        "conn_errors": phase.conn_errors,
        "timeouts": timeouts,
        "elapsed_s": elapsed,
        "rps": ok / elapsed if elapsed > 0 else 0.0,
        "p50_ms": percentile(lat, 50) * 1e3,
        "p90_ms": percentile(lat, 90) * 1e3,
        "p99_ms": percentile(lat, 99) * 1e3,
        "max_ms": (lat[-1] * 1e3) if lat else float("nan"),
        "mean_ms": (sum(lat) / len(lat) * 1e3) if lat else float("nan"),
        "cpu_s": cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", default="/api/telegram")
    parser.add_argument("--secret", required=True)
    parser.add_argument("--kind", choices=("message", "unknown", "healthz"), default="message")
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--chat-ids", default="1001,1002,1003,1004")
    parser.add_argument("--id-base", type=int, required=True)
    parser.add_argument("--deadline", type=float, default=120.0, help="seconds per phase")
    args = parser.parse_args()
    if args.requests < 1 or args.concurrency < 1 or args.warmup < 0:
        parser.error("--requests and --concurrency must be >= 1, --warmup >= 0")
    try:
        result = asyncio.run(main_async(args))
    except (OSError, RuntimeError, TimeoutError) as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        sys.exit(1)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
