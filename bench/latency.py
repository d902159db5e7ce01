"""Streamed replies' latency (issue 23): webhook in -> first draft with text -> final message
sent, through the real turn of ``engram serve`` (webhook mode, a subprocess) against the fake
Anthropic API streaming at a fixed pace (Sonnet-like by default: the first token 0.8 s after the
request, then 60 tokens/s) and the strict fake Bot API, which timestamps every call.

Each turn is a message whose answer takes a tool call first (``search_entries``, after a short
"Let me look." that streams) and then ~``--words`` words. Run with ``STREAM_REPLIES=auto``
(drafts) and again with ``off``, one after the other on the same database server.

Figures per mode (p50/p95 over ``--turns`` turns):

* ``first_ms``: webhook POST -> first draft showing text (``off``: the final message);
* ``final_ms``: webhook POST -> the reply's sendMessage;
* ``first_after_token_ms``: first draft with text - the model's first text piece (the fake's
  own schedule): how long text waits to be shown (goal p95 <= 1,000 ms);
* ``overhead_ms``: the reply's sendMessage - the last piece of the model's last answer: what
  engram adds after the model is done (goal p95 <= 50 ms);
* ``before_model_ms``: webhook POST -> the first model request (ingest, retrieval, context).

    python bench/latency.py [--turns 30] [--words 120] [--first-token 0.8] [--rate 60] [--smoke]

Last line: ``latency first_p95_ms=… final_p95_ms=… first_after_token_p95_ms=…
overhead_p95_ms=… off_final_p95_ms=…``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import trio

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "bench")]

from _db import run_on_database  # noqa: E402
from _smoke import add_smoke_flag, shrink  # noqa: E402
from engram_outside import Engram, free_port, post_update, serve_env  # noqa: E402
from fakes.anthropic_api import FakeAnthropic, Reply, run_fake_anthropic  # noqa: E402
from fakes.bot_api import FakeBotApi, run_fake_bot_api  # noqa: E402
from fakes.sse import StreamTiming  # noqa: E402

CHAT = 4029001
#: seconds between a reply and the next message (the sender keeps Telegram's one message a
#: second per chat, which back-to-back turns would measure instead of the turn)
PAUSE = 1.5
LOOK = "Let me look."


def answer(words: int, turn: int) -> str:
    return " ".join(f"w{turn}.{n}" for n in range(words)) + "."


def responder(words: int) -> Any:
    """The model: a tool call first (with a short text), then the answer."""

    def reply(body: Mapping[str, Any]) -> Reply | None:
        last = body["messages"][-1]
        content = last["content"]
        done = isinstance(content, list) and any(b.get("type") == "tool_result" for b in content)
        if done:
            turn = len(body["messages"])
            return Reply(({"type": "text", "text": answer(words, turn)},))
        tool = {
            "type": "tool_use",
            "id": f"toolu_bench{len(body['messages'])}",
            "name": "search_entries",
            "input": {"query": "sleep"},
        }
        return Reply(({"type": "text", "text": LOOK}, tool), "tool_use")

    return reply


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def run_mode(
    mode: str,
    url: str,
    home: Path,
    args: argparse.Namespace,
    bot: FakeBotApi,
    model: FakeAnthropic,
) -> dict[str, list[float]]:
    """``--turns`` turns of one ``engram serve`` with ``STREAM_REPLIES=mode`` (the fakes are
    shared by both modes, so update ids never repeat on the shared database)."""
    timing = StreamTiming(first_token_delay=args.first_token, tokens_per_second=args.rate)
    out: dict[str, list[float]] = {k: [] for k in ("first", "final", "after", "over", "before")}
    model.timing = timing
    model.responder = responder(args.words)
    env = serve_env(
        home / mode,
        bot_api=bot.base_url,
        model=model.base_url,
        port=free_port(),
        chats=[CHAT],
        DATABASE_URL=url,
        STREAM_REPLIES=mode,
        LOG_LEVEL="WARNING",
    )
    engram = Engram(env, home / f"{mode}.log")
    await engram.start()
    try:
        await engram.wait_ready()
        async with httpx.AsyncClient(timeout=10) as client:
            for turn in range(args.turns + 1):  # the first one warms up and is not counted
                await trio.sleep(PAUSE)  # a person reads the reply: the sender's pace is met
                figures = await one_turn(engram, bot, model, client, timing)
                if turn:
                    for key, value in figures.items():
                        out[key].append(value)
    except BaseException:
        print(engram.tail(40), file=sys.stderr)
        raise
    finally:
        await engram.stop()
    return out


async def one_turn(
    engram: Engram,
    bot: FakeBotApi,
    model: FakeAnthropic,
    client: httpx.AsyncClient,
    timing: StreamTiming,
) -> dict[str, float]:
    calls_before, requests_before = len(bot.calls), len(model.requests)
    sent_before = len(bot.sent_texts(CHAT))
    start = trio.current_time()
    assert await post_update(client, engram.port, bot.push_message(CHAT, "how did I sleep?")) == 200
    with trio.fail_after(60):
        while len(bot.sent_texts(CHAT)) == sent_before:  # noqa: ASYNC110 - another process
            await trio.sleep(0.002)
    calls = bot.calls[calls_before:]
    final = next(c.time for c in calls if c.method == "sendMessage")
    drafts = [c.time for c in calls if c.method == "sendMessageDraft" and c.params.get("text")]
    requests = model.requests[requests_before:]
    first_piece = timing.at(requests[0].time, 0)
    last = requests[-1]  # the answer: every content delta of it is one paced piece
    reply_pieces = sum(1 for e in last.events if e == "content_block_delta")
    last_piece = timing.at(last.time, max(0, reply_pieces - 1))
    first = drafts[0] if drafts else final
    return {
        "first": (first - start) * 1000,
        "final": (final - start) * 1000,
        "after": (first - first_piece) * 1000,
        "over": (final - last_piece) * 1000,
        "before": (requests[0].time - start) * 1000,
    }


def summary(name: str, figures: dict[str, list[float]]) -> str:
    return " ".join(
        f"{name}_{key}_p50_ms={pct(values, 0.5):.1f} {name}_{key}_p95_ms={pct(values, 0.95):.1f}"
        for key, values in figures.items()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--words", type=int, default=120)
    parser.add_argument("--first-token", type=float, default=0.8)
    parser.add_argument("--rate", type=float, default=60.0)
    parser.add_argument("--database-url", default="")
    add_smoke_flag(parser)
    args = parser.parse_args()
    shrink(parser, args, turns=2, words=20, first_token=0.2, rate=200.0)
    results: dict[str, dict[str, list[float]]] = {}

    async def run(url: str) -> None:
        with tempfile.TemporaryDirectory(prefix="engram-latency-") as tmp:
            async with run_fake_bot_api() as bot, run_fake_anthropic() as model:
                for mode in ("auto", "off"):
                    results[mode] = await run_mode(mode, url, Path(tmp), args, bot, model)

    run_on_database(args.database_url, "engram-bench-latency-", run)
    on, off = results["auto"], results["off"]
    print(
        f"turns={args.turns} words={args.words} first_token_s={args.first_token} "
        f"tokens_per_s={args.rate}"
    )
    print(summary("stream", on))
    print(summary("nostream", off))
    print(
        f"latency first_p95_ms={pct(on['first'], 0.95):.1f} "
        f"final_p95_ms={pct(on['final'], 0.95):.1f} "
        f"first_after_token_p95_ms={pct(on['after'], 0.95):.1f} "
        f"overhead_p95_ms={pct(on['over'], 0.95):.1f} "
        f"off_final_p95_ms={pct(off['final'], 0.95):.1f} "
        f"first_speedup={statistics.median(off['first']) / statistics.median(on['first']):.2f}"
    )


if __name__ == "__main__":
    main()
