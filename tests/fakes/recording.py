"""The fakes of the multi-process test and bench (``tests/replicas_outside.py``): a Bot API
noting when each reply went out and which updates it answers (waking whoever waits for a chat's
next reply), and an echo model noting every user message it is asked to answer."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import trio
from engram_outside import EchoAnthropic, answered_ids, asked_ids
from quart import Response

from fakes.anthropic_api import RecordedRequest, run_fake_anthropic
from fakes.bot_api import FakeBotApi, run_fake_bot_api

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
    async with run_fake_bot_api(fake=RecordingBot(), backlog=1024) as bot:
        yield cast(RecordingBot, bot)


class RecordingModel(EchoAnthropic):
    """The echo model noting, per request, its time and the updates of the newest user message
    that names any (the message of the turn it is asked to answer)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[float, list[int]]] = []

    async def _messages(self, call: RecordedRequest) -> Response:
        if ids := asked_ids(call.raw):
            self.seen.append((time.monotonic(), ids))
        return await super()._messages(call)


@asynccontextmanager
async def run_recording_model() -> AsyncIterator[RecordingModel]:
    async with run_fake_anthropic(fake=RecordingModel()) as fake:
        yield cast(RecordingModel, fake)
