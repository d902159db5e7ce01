"""Memory per idle chat actor, the last phase of ``bench/replicas.py``: one ``engram serve``
with room for every chat's actor (ACTOR_MAX_LIVE) and a long ACTOR_IDLE_TIMEOUT; each chat sends
``/help`` (answered from the command table, no model call) so its actor stays alive; VmRSS after
``--warm`` chats and after ``--idle-chats``; bytes per actor = RSS delta / live actors added
(``engram_live_actors`` of kind ``chats`` on /metrics)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import httpx
import trio
from engram_outside import (
    Engram,
    free_port,
    post_update,
    run_echo_anthropic,
    serve_env,
    update_body,
)
from fakes.recording import run_recording_bot

CHAT_BASE = 800_000
CONCURRENCY = 32


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


async def live_chat_actors(client: httpx.AsyncClient, port: int) -> int:
    text = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
    m = re.search(r'^engram_live_actors\{kind="chats?"\} ([0-9.e+]+)$', text, re.M)
    return int(float(m.group(1))) if m else -1


async def help_all(engram: Engram, client: httpx.AsyncClient, chats: range, first_id: int) -> None:
    """``/help`` from each chat of ``chats`` (``CONCURRENCY`` at a time), until a chat actor
    lives for each chat so far (not until every answer went out: the sender paces replies at
    Telegram's 30 a second, 10,000 of them would take minutes)."""
    pending = iter(enumerate(chats))

    async def worker() -> None:
        for i, chat in pending:
            body = update_body(first_id + i, chat=chat, text="/help")
            while not 200 <= await post_update(client, engram.port, body) < 300:  # noqa: ASYNC110
                await trio.sleep(0.2)

    async with trio.open_nursery() as nursery:
        for _ in range(CONCURRENCY):
            nursery.start_soon(worker)
    with trio.fail_after(300):
        while await live_chat_actors(client, engram.port) < chats.stop - CHAT_BASE:  # noqa: ASYNC110
            await trio.sleep(0.5)


async def measure_memory(args: argparse.Namespace, url: str, home: Path) -> str:
    await trio.Path(home).mkdir(parents=True, exist_ok=True)
    chats = range(CHAT_BASE, CHAT_BASE + args.idle_chats)
    extra: dict[str, Any] = {
        "DATABASE_URL": url,
        "ACTOR_MAX_LIVE": str(args.idle_chats + 1000),
        "ACTOR_IDLE_TIMEOUT": "86400",
        "ENGRAM_INSTANCE": "memory",
    }
    if args.engram_repo:
        extra["PYTHONPATH"] = args.engram_repo
    async with (
        run_recording_bot() as bot,
        run_echo_anthropic() as model,
        httpx.AsyncClient(timeout=30) as client,
    ):
        env = serve_env(home, bot_api=bot.base_url, model=model.base_url, port=0, chats=chats)

        env.update(extra, ENGRAM_PORT=str(free_port()))
        engram = Engram(env, home / "engram.log")
        await engram.start()
        await engram.wait_ready(180)
        assert engram.proc is not None
        try:
            warm = range(chats.start, chats.start + args.warm)
            await help_all(engram, client, warm, 1)
            await trio.sleep(1)
            rss0, live0 = rss_bytes(engram.proc.pid), await live_chat_actors(client, engram.port)
            rest = range(warm.stop, chats.stop)
            await help_all(engram, client, rest, 1 + args.warm)
            await trio.sleep(1)
            rss1, live1 = rss_bytes(engram.proc.pid), await live_chat_actors(client, engram.port)
        finally:
            await engram.stop()
    model_calls = len(model.requests)
    answered = sum(len(m) for m in bot.sent.values())
    added = live1 - live0
    per = (rss1 - rss0) / added if added > 0 else float("nan")
    print(
        f"memory: live chat actors {live0} -> {live1}, VmRSS {rss0 / 2**20:.1f} -> "
        f"{rss1 / 2**20:.1f} MiB: {per:.0f} bytes per idle actor (goal <= 16384); "
        f"model calls {model_calls}; {answered} /help answers sent by then",
        flush=True,
    )
    return f"{per:.0f}"
