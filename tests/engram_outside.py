"""``engram serve`` as an operator runs it — a subprocess, in webhook mode — with the fakes it
talks to, for the tests and benches that check promises from outside (crashes, outages, limits,
start-up time). Imported by tests (``tests/`` is on the path) and by ``bench/`` scripts.

    async with run_fake_bot_api() as bot_api, run_echo_anthropic() as model:
        env = serve_env(home, bot_api=bot_api.base_url, model=model.base_url, port=port,
                        chats=[1, 2], DATABASE_URL=url)
        engram = Engram(env, log_path)
        await engram.start()
        await engram.wait_ready()
        status = await post_update(client, port, update_body(7, chat=1))
        engram.kill()                      # SIGKILL: no drain, no cleanup

The echo model answers every turn with ``re <ids>``: the update ids (``msg <id>``) found in the
newest user message, so a reply says which updates it answers.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import httpx
import trio
from fakes.anthropic_api import (
    DEFAULT_API_KEY,
    FakeAnthropic,
    RecordedRequest,
    run_fake_anthropic,
)
from fakes.bot_api import DEFAULT_TOKEN
from quart import Response

REPO = Path(__file__).resolve().parent.parent
SECRET = "outside-webhook-secret"
WEBHOOK = "/api/telegram"
SKIP_NOTICE = "could not process one of your messages"


_WEBHOOK_FLAG: list[str] | None = None


def webhook_args() -> list[str]:
    """``["--webhook"]`` where ``engram serve`` needs it to stay in webhook mode (polling
    became the default without a configured webhook URL), else nothing."""
    global _WEBHOOK_FLAG
    if _WEBHOOK_FLAG is None:
        out = subprocess.run(
            [sys.executable, "-m", "actors.cli", "serve", "--help"],
            capture_output=True,
            text=True,
            cwd=REPO,
            check=False,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        ).stdout
        _WEBHOOK_FLAG = ["--webhook"] if "--webhook" in out else []
    return _WEBHOOK_FLAG


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_env(
    home: Path,
    *,
    bot_api: str,
    model: str,
    port: int,
    chats: Iterable[int],
    **extra: str,
) -> dict[str, str]:
    """The environment of an ``engram serve`` in webhook mode against the fakes: no variable
    of the caller's ENGRAM_/TELEGRAM_/DATABASE_URL leaks in; ``extra`` wins."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ENGRAM_", "TELEGRAM_", "DATABASE_URL", "ANTHROPIC_", "OPENAI_"))
    }
    env.update(
        LOG_FORMAT="json",
        LOG_LEVEL="INFO",
        ENGRAM_HOME=str(home),
        ENGRAM_PORT=str(port),
        TELEGRAM_BOT_TOKEN=DEFAULT_TOKEN,
        TELEGRAM_SECRET_TOKEN=SECRET,
        TELEGRAM_API_BASE_URL=bot_api,
        TELEGRAM_ALLOWED_CHAT_IDS=",".join(str(c) for c in chats),
        ANTHROPIC_API_KEY=DEFAULT_API_KEY,
        ANTHROPIC_BASE_URL=model,
        EMBEDDING_PROVIDER="local",
        EMBEDDED_PG_SHARED_BUFFERS="128MB",
        # scripted conversations write faster than a person: no per-chat turn limit unless a
        # test sets one (tests/e2e/test_chat_faults_outside.py runs with the default)
        CHAT_TURNS_PER_MINUTE="0",
        PYTHONPATH=str(REPO),  # this checkout's engram, whatever is installed
        XDG_RUNTIME_DIR=env.get("XDG_RUNTIME_DIR", "/tmp"),
    )
    env.update(extra)
    return env


class Engram:
    """One ``engram serve`` subprocess at a time; its stderr (JSON log lines) is appended to
    ``log_path`` across restarts."""

    def __init__(self, env: Mapping[str, str], log_path: Path, *, cwd: Path | None = None) -> None:
        self.env = dict(env)
        self.port = int(self.env["ENGRAM_PORT"])
        self.log_path = log_path
        self.cwd = cwd or log_path.parent
        self.proc: trio.Process | None = None
        self.started_at = 0.0
        self.starts = 0
        self.preexec: Any = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def start(self) -> None:
        log = self.log_path.open("ab")
        try:
            self.started_at = time.monotonic()
            self.proc = await trio.lowlevel.open_process(
                [sys.executable, "-m", "actors.cli", "serve", *webhook_args()],
                env=self.env,
                cwd=self.cwd,
                stdout=subprocess.DEVNULL,
                stderr=log,
                preexec_fn=self.preexec,
            )
            self.starts += 1
        finally:
            log.close()

    async def wait_ready(self, limit: float = 60.0) -> float:
        """Seconds from :meth:`start` until ``/readyz`` answers 200 (TooSlowError past
        ``limit``)."""
        async with httpx.AsyncClient(timeout=2.0) as client:
            with trio.fail_after(limit):
                while True:
                    if not self.running:
                        raise RuntimeError(f"engram exited: {self.tail()}")
                    try:
                        r = await client.get(f"http://127.0.0.1:{self.port}/readyz")
                        if r.status_code == 200:
                            return time.monotonic() - self.started_at
                    except httpx.TransportError:
                        pass
                    await trio.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL (what a crash or the OOM killer does)."""
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)

    async def stop(self, grace: float = 30.0) -> int:
        """SIGTERM and wait; SIGKILL past ``grace`` seconds. The exit code."""
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            with trio.move_on_after(grace):
                return await self.proc.wait()
            self.proc.kill()
        return await self.proc.wait()

    async def wait(self) -> int:
        assert self.proc is not None
        return await self.proc.wait()

    def log_events(self) -> list[dict[str, Any]]:
        events = []
        if self.log_path.exists():
            for line in self.log_path.read_text(errors="replace").splitlines():
                try:
                    events.append(json.loads(line))
                except ValueError:
                    events.append({"event": "(not json)", "line": line})
        return events

    def tail(self, n: int = 15) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])


def update_body(update_id: int, *, chat: int, text: str | None = None) -> dict[str, Any]:
    """A private-chat text message update whose text names its update id."""
    return {
        "update_id": update_id,
        "message": {
            "message_id": update_id,
            "date": int(time.time()),
            "chat": {"id": chat, "type": "private", "first_name": "T"},
            "from": {"id": chat, "is_bot": False, "first_name": "T"},
            "text": text if text is not None else f"msg {update_id}",
        },
    }


async def post_update(client: httpx.AsyncClient, port: int, body: Mapping[str, Any]) -> int:
    """POST one update to the webhook; the HTTP status (0: no answer, connection failed)."""
    try:
        r = await client.post(
            f"http://127.0.0.1:{port}{WEBHOOK}",
            content=json.dumps(body).encode(),
            headers={"X-Telegram-Bot-Api-Secret-Token": SECRET, "Content-Type": "application/json"},
        )
    except httpx.TransportError:
        return 0
    return r.status_code


_ID = re.compile(r"\bmsg (\d+)\b")


def answered_ids(text: str) -> list[int]:
    """The update ids a reply of the echo model answers (``re 5 6``)."""
    m = re.search(r"\bre ((?:\d+ ?)+)", text)
    return [int(x) for x in m.group(1).split()] if m else []


def asked_ids(raw: bytes | str | None) -> list[int]:
    """The update ids (``msg <id>``) named in a model request's newest user message that names
    any: the turn it is asked to answer (an unreadable body names none)."""
    try:
        messages = json.loads(raw or b"").get("messages") or []
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
        if ids := [int(i) for t in texts for i in _ID.findall(t or "")]:
            return ids
    return []


class EchoAnthropic(FakeAnthropic):
    """The strict fake, answering each request with ``re <ids>``: the update ids in the newest
    user message's text. ``delay`` (seconds) holds each answer back."""

    delay = 0.0

    async def _messages(self, call: RecordedRequest) -> Response:
        if self.delay:
            await trio.sleep(self.delay)
        ids = asked_ids(call.raw)
        # no await between here and the parent's use of it
        self.default_text = "re " + " ".join(map(str, ids)) if ids else "re (nothing)"
        return await super()._messages(call)


@asynccontextmanager
async def run_echo_anthropic() -> AsyncIterator[EchoAnthropic]:
    """An :class:`EchoAnthropic` on 127.0.0.1 (free port) for the block."""
    async with run_fake_anthropic(fake=EchoAnthropic()) as fake:
        yield cast(EchoAnthropic, fake)
