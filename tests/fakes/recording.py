"""The fakes of the multi-process test and bench (``tests/replicas_outside.py``): a Bot API
noting when each reply went out and which updates it answers (waking whoever waits for a chat's
next reply), and an echo model noting every user message it is asked to answer."""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import trio
from engram_outside import EchoAnthropic, answered_ids
from quart import Response

from fakes.anthropic_api import RecordedRequest, run_fake_anthropic
from fakes.bot_api import FakeBotApi

MSG = "msg"


class RecordingBot(FakeBotApi):
    """The fake Bot API noting, per sent message, its time and the updates it answers, and
    waking whoever waits for a chat's next reply."""

    def __init__(self) -> None:
        super().__init__()
        self.replies: list[tuple[float, int, list[int]]] = []  # (monotonic, chat, ids)
        self.waiting: dict[int, trio.Event] = {}

    async def _send_message(self, p: dict[str, Any]) -> object:
        out = await super()._send_message(p)
        chat = int(p["chat_id"])
        self.replies.append((time.monotonic(), chat, answered_ids(str(p["text"]))))
        if (event := self.waiting.pop(chat, None)) is not None:
            event.set()
        return out


@asynccontextmanager
async def run_recording_bot() -> AsyncIterator[RecordingBot]:
    bot = RecordingBot()
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1", backlog=1024)
        bot.base_url = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        nursery.start_soon(trio.serve_listeners, bot.serve_connection, listeners)
        try:
            yield bot
        finally:
            nursery.cancel_scope.cancel()


class RecordingModel(EchoAnthropic):
    """The echo model noting, per request, its time and the updates of the newest user message
    that names any (the message of the turn it is asked to answer)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[float, list[int]]] = []

    async def _messages(self, call: RecordedRequest) -> Response:
        try:
            messages = json.loads(call.raw).get("messages") or []
        except (ValueError, AttributeError):
            messages = []
        for message in reversed(messages):
            if message.get("role") != "user":
                continue
            content = message.get("content")
            texts = (
                [content]
                if isinstance(content, str)
                else [b.get("text", "") for b in content or [] if isinstance(b, dict)]
            )
            if ids := [int(m) for t in texts for m in re.findall(rf"\b{MSG} (\d+)\b", t or "")]:
                self.seen.append((time.monotonic(), ids))
                break
        return await super()._messages(call)


@asynccontextmanager
async def run_recording_model() -> AsyncIterator[RecordingModel]:
    async with run_fake_anthropic(fake=RecordingModel()) as fake:
        yield cast(RecordingModel, fake)
