"""Telegram's side of ``bench/commands.py``, in a process of its own (as for ``bench/turn.py``):
the webhook sender and the stub Bot API of ``bench/_turn_outside.py``, driven command by command.

JSON lines on stdin/stdout (times are ``time.perf_counter()``, the system-wide monotonic clock
on Linux, which both processes read):

* this process: ``{"port": P}`` (the stub Bot API listens on 127.0.0.1:P);
* bench: ``{"webhook_port": W}``;
* per command: bench ``{"chat": c, "text": t}``; this process POSTs the update and waits for
  the stub to read that chat's ``sendMessage``: ``{"status", "t0", "t_ack", "t_sent", "reply"}``;
* at the end: bench ``{"end": true}``; this process ``{"counts": {...}}`` (stub calls by method).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _turn_outside import TURN_TIMEOUT, Lines, StubBotApi, WebhookClient, now, update_body


async def drive(lines: Lines, stub: StubBotApi, port: int) -> None:
    client = WebhookClient(port)
    update_id = 50_000
    try:
        while "end" not in (ask := await lines.receive()):
            chat, text = int(ask["chat"]), str(ask["text"])
            update_id += 1
            body = update_body(update_id, chat, text)
            stub.await_reply(chat)
            t0 = now()
            status = await client.post(body)
            t_ack = now()
            with trio.move_on_after(TURN_TIMEOUT):
                await stub.arrived.wait()
            t_sent, reply = stub.sent if stub.sent is not None else (math.nan, "")
            await lines.send(status=status, t0=t0, t_ack=t_ack, t_sent=t_sent, reply=reply)
    finally:
        await client.aclose()


async def main() -> None:
    lines = Lines()
    stub = StubBotApi()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(stub.run)
        await lines.send(port=port)
        plan = await lines.receive()
        await drive(lines, stub, int(plan["webhook_port"]))
        await lines.send(counts=dict(stub.counts))
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main)
