"""Telegram's side of ``bench/turn.py``, in a process of its own: the webhook sender and the stub
Bot API. In production both are other machines; sharing the engram process's one Python thread,
their work (and the wait for that thread to read a request) was counted in the turn.

Run by ``bench/turn.py`` with JSON lines on stdin/stdout (times are ``time.perf_counter()``,
the system-wide monotonic clock on Linux, so both processes read the same clock):

* this process: ``{"port": P}`` (the stub Bot API listens on 127.0.0.1:P);
* bench: ``{"webhook_port", "chats", "warmup", "turns", "spacing", "seed", "interval"}``;
* per turn: this process ``{"turn": i, "chat": c}``; bench ``{}`` (its recorder is ready);
  this process POSTs the update and waits for the stub to read that chat's ``sendMessage``:
  ``{"done": i, "status", "t0", "t_ack", "t_sent", "reply", "paced"}``; bench ``{}``;
* at the end: ``{"end": true, "counts": {...}}`` (stub calls by method, strays included).
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _turn_data import user_message

HOST = "127.0.0.1"
SECRET = "bench-turn-secret_token"
TURN_TIMEOUT = 30.0


class OutsideEnded(RuntimeError):
    """The outside process closed its stdout (it ended)."""


class Outside:
    """This process seen from the bench (the parent): JSON lines over the child's
    stdin/stdout."""

    def __init__(self, process: trio.Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process, self.inp, self.out = process, process.stdout, process.stdin
        self.buf = bytearray()

    async def send(self, **message: Any) -> None:
        await self.out.send_all(json.dumps(message).encode() + b"\n")

    async def receive(self) -> dict[str, Any]:
        with trio.fail_after(TURN_TIMEOUT + 10):
            while (end := self.buf.find(b"\n")) < 0:
                data = await self.inp.receive_some(65536)
                if not data:
                    raise OutsideEnded(f"the outside process ended ({self.process.poll()})")
                self.buf += data
        line = bytes(self.buf[:end])
        del self.buf[: end + 1]
        value: dict[str, Any] = json.loads(line)
        return value


now = time.perf_counter


async def read_http(stream: trio.SocketStream, buf: bytearray) -> tuple[bytes, bytes] | None:
    """One HTTP/1.1 message (head, body) with a Content-Length; None at EOF."""
    while True:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            head = bytes(buf[:end])
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(buf) >= end + 4 + length:
                body = bytes(buf[end + 4 : end + 4 + length])
                del buf[: end + 4 + length]
                return head, body
        data = await stream.receive_some(65536)
        if not data:
            return None
        buf += data


class StubBotApi:
    """A minimal keep-alive Bot API (getMe, sendChatAction, sendMessage, ...); notes when
    each chat's ``sendMessage`` request was read."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = defaultdict(int)
        self.message_id = 0
        self.expect: int | None = None  # the chat whose reply is awaited
        self.sent: tuple[float, str] | None = None
        self.arrived = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[int]) -> None:
        listeners = await trio.open_tcp_listeners(0, host=HOST)
        task_status.started(listeners[0].socket.getsockname()[1])
        await trio.serve_listeners(self._serve, listeners)

    async def _serve(self, stream: trio.SocketStream) -> None:
        buf = bytearray()
        try:
            while (message := await read_http(stream, buf)) is not None:
                start = now()
                head, body = message
                target = head.split(b" ", 2)[1].decode("latin-1")
                method = target.rstrip("/").rsplit("/", 1)[-1]
                self.counts[method] += 1
                result: Any = True
                if method == "getMe":
                    result = {
                        "id": 123456789,
                        "is_bot": True,
                        "first_name": "Bench",
                        "username": "bench_bot",
                    }
                elif method == "sendMessage":
                    params = json.loads(body)
                    self._delivered(int(params["chat_id"]), start, str(params["text"]))
                    self.message_id += 1
                    result = {
                        "message_id": self.message_id,
                        "date": int(time.time()),
                        "chat": {"id": params["chat_id"], "type": "private"},
                        "text": params["text"],
                    }
                payload = json.dumps({"ok": True, "result": result}).encode()
                await stream.send_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload)
                )
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    def _delivered(self, chat_id: int, at: float, text: str) -> None:
        if chat_id != self.expect or self.sent is not None:
            self.counts["(unmatched sendMessage)"] += 1
            return
        self.sent = (at, text)
        self.arrived.set()

    def await_reply(self, chat_id: int) -> None:
        self.expect, self.sent, self.arrived = chat_id, None, trio.Event()


class WebhookClient:
    """POSTs updates to the webhook on one keep-alive connection (reconnects when closed)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.stream: trio.SocketStream | None = None
        self.buf = bytearray()
        self.head = (
            f"POST /api/telegram HTTP/1.1\r\nHost: {HOST}:{port}\r\n"
            f"Content-Type: application/json\r\nX-Telegram-Bot-Api-Secret-Token: {SECRET}\r\n"
        ).encode()

    async def post(self, body: bytes) -> int:
        for attempt in range(2):
            if self.stream is None:
                self.stream = await trio.open_tcp_stream(HOST, self.port)
                self.buf = bytearray()
            try:
                await self.stream.send_all(
                    self.head + b"Content-Length: %d\r\n\r\n" % len(body) + body
                )
                message = await read_http(self.stream, self.buf)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                message = None
            if message is not None:
                return int(message[0].split(b" ", 2)[1])
            await self.aclose()
            if attempt:
                break
        raise RuntimeError("the webhook closed the connection without an answer")

    async def aclose(self) -> None:
        if self.stream is not None:
            await self.stream.aclose()
            self.stream = None


def update_body(update_id: int, chat_id: int, text: str) -> bytes:
    return json.dumps(
        {
            "update_id": update_id,
            "message": {
                "message_id": update_id,
                "date": int(time.time()),
                "chat": {"id": chat_id, "type": "private", "first_name": "Bench"},
                "from": {"id": chat_id, "is_bot": False, "first_name": "Bench"},
                "text": text,
            },
        }
    ).encode()


class Lines:
    """JSON lines over the bench's pipes."""

    def __init__(self) -> None:
        self.out = trio.lowlevel.FdStream(1)
        self.inp = trio.lowlevel.FdStream(0)
        self.buf = bytearray()

    async def send(self, **message: Any) -> None:
        await self.out.send_all(json.dumps(message).encode() + b"\n")

    async def receive(self) -> dict[str, Any]:
        while (end := self.buf.find(b"\n")) < 0:
            data = await self.inp.receive_some(65536)
            if not data:
                raise EOFError("the bench closed the pipe")
            self.buf += data
        line = bytes(self.buf[:end])
        del self.buf[: end + 1]
        value: dict[str, Any] = json.loads(line)
        return value


async def drive(lines: Lines, stub: StubBotApi, plan: dict[str, Any]) -> None:
    """Sequential turns, as the bench asks; the timing of each goes back to the bench."""
    rng = np.random.default_rng(plan["seed"] + 2)
    client = WebhookClient(plan["webhook_port"])
    chats: list[int] = plan["chats"]
    last_sent: dict[int, float] = {}
    try:
        for i in range(plan["warmup"] + plan["turns"]):
            chat = chats[i % len(chats)]
            text, _ = user_message(rng)
            body = update_body(10_000 + i, chat, text)
            await lines.send(turn=i, chat=chat)
            await lines.receive()
            stub.await_reply(chat)
            t0 = now()
            paced = t0 - last_sent.get(chat, -math.inf) < plan["interval"]
            status = await client.post(body)
            t_ack = now()
            with trio.move_on_after(TURN_TIMEOUT):
                await stub.arrived.wait()
            t_sent, reply = stub.sent if stub.sent is not None else (math.nan, "")
            last_sent[chat] = t_sent
            await lines.send(
                done=i, status=status, t0=t0, t_ack=t_ack, t_sent=t_sent, reply=reply, paced=paced
            )
            await lines.receive()
            await trio.sleep(max(0.0, plan["spacing"] - (now() - t0)))
    finally:
        await client.aclose()


async def main() -> None:
    lines = Lines()
    stub = StubBotApi()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(stub.run)
        await lines.send(port=port)
        await drive(lines, stub, await lines.receive())
        await lines.send(end=True, counts=dict(stub.counts))
        await lines.receive()  # the bench has stopped the bot (its last getUpdates, if any)
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main)
