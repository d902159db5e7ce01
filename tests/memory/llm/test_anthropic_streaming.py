"""Streamed Claude calls (issue 23): the real anthropic SDK's ``messages.stream`` against the
fake's server-sent events — text as it is written, tool starts, the same Completion as without
streaming, errors mid-stream classified like their status, and a call stopped part way billed
for what it generated."""

from __future__ import annotations

import base64

import pytest
import trio
from fakes.anthropic_api import Failure, FakeAnthropic
from fakes.stream_pace import Pace

from memory.errors import LLMOverloaded, LLMRequestError
from memory.llm.anthropic_provider import AnthropicLLM
from memory.llm.protocol import ImageBlock, Message, StreamEvent, TextDelta, ToolSpec, ToolStarted
from runtime.db import Database

TOOLS = [
    ToolSpec(
        "search_entries",
        "Search the journal.",
        {"type": "object", "properties": {"query": {"type": "string"}}},
    )
]
ANSWER = "You slept badly on Monday and better after the walk on Tuesday."


async def call(llm: AnthropicLLM, events: list[StreamEvent] | None, **kw: object) -> object:
    return await llm.complete(
        system="Be brief.",
        messages=[Message.user("How did I sleep?")],
        tools=TOOLS,
        max_tokens=512,
        purpose="agent",
        chat_id=7,
        on_event=None if events is None else events.append,
        **kw,  # type: ignore[arg-type]
    )


async def test_text_streams_and_the_completion_is_the_unstreamed_one(
    claude: AnthropicLLM, fake_claude: FakeAnthropic, db: Database
) -> None:
    fake_claude.queue_text(ANSWER, input_tokens=900, output_tokens=17)
    fake_claude.queue_text(ANSWER, input_tokens=900, output_tokens=17)
    events: list[StreamEvent] = []
    streamed = await call(claude, events)
    plain = await call(claude, None)
    assert fake_claude.requests[0].body["stream"] is True
    assert "stream" not in fake_claude.requests[1].body
    assert fake_claude.requests[0].stream_complete is True
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 5 and "".join(deltas) == ANSWER
    for field in ("text", "stop_reason", "input_tokens", "output_tokens", "model", "cost_usd"):
        assert getattr(streamed, field) == getattr(plain, field), field
    rows = await db.fetch("SELECT input_tokens, output_tokens, ok FROM api_usage ORDER BY id")
    assert [tuple(r.values()) for r in rows] == [(900, 17, True), (900, 17, True)]


async def test_a_tool_call_streams_its_start_and_arrives_whole(
    claude: AnthropicLLM, fake_claude: FakeAnthropic
) -> None:
    args = {"query": "sleep after walks", "limit": 5, "nested": {"a": [1, 2, 3]}}
    fake_claude.queue_tool_use("search_entries", args, text="Let me look.")
    events: list[StreamEvent] = []
    completion = await call(claude, events)
    assert ToolStarted("search_entries") in events
    started = events.index(ToolStarted("search_entries"))
    assert "".join(e.text for e in events[:started] if isinstance(e, TextDelta)) == "Let me look."
    (use,) = completion.tool_uses  # type: ignore[attr-defined]
    assert use.name == "search_entries" and dict(use.input) == args
    assert completion.stop_reason == "tool_use"  # type: ignore[attr-defined]


async def test_an_overload_mid_stream_is_an_overload(
    claude: AnthropicLLM, fake_claude: FakeAnthropic, db: Database
) -> None:
    fake_claude.queue_text(ANSWER)
    fake_claude.fail_next(Failure.mid_stream(after=3))
    events: list[StreamEvent] = []
    with pytest.raises(LLMOverloaded) as raised:
        await call(claude, events)
    assert len(events) == 3  # what came before the error was shown
    assert raised.value.status == 529
    assert await db.fetchval("SELECT ok FROM api_usage") is False


async def test_a_call_stopped_mid_stream_is_billed_for_what_it_wrote(
    claude: AnthropicLLM, fake_claude: FakeAnthropic, db: Database
) -> None:
    fake_claude.pace = Pace(first_token_delay=0.05, tokens_per_second=200)
    fake_claude.queue_text(ANSWER * 20, input_tokens=1500)
    events: list[StreamEvent] = []
    with trio.move_on_after(0.5) as scope:
        await call(claude, events)
    assert scope.cancelled_caught and events
    row = await db.fetchrow(
        "SELECT input_tokens, output_tokens, cost_usd, ok, error FROM api_usage"
    )
    assert row is not None
    shown = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert row["input_tokens"] == 1500
    assert row["output_tokens"] >= len(shown) // 4 > 0
    assert row["ok"] is True and row["error"] == "stopped mid-stream" and row["cost_usd"] > 0
    with trio.fail_after(5):
        while fake_claude.requests[0].stream_complete is None:  # noqa: ASYNC110 - the fake's
            await trio.sleep(0.01)
    assert fake_claude.requests[0].stream_complete is False  # the stream was cut, not finished


async def test_a_failing_listener_does_not_fail_the_call(
    claude: AnthropicLLM, fake_claude: FakeAnthropic
) -> None:
    fake_claude.queue_text(ANSWER)

    def broken(event: StreamEvent) -> None:
        raise RuntimeError("draft failed")

    completion = await claude.complete(
        system="s",
        messages=[Message.user("hi")],
        tools=[],
        max_tokens=100,
        purpose="agent",
        chat_id=1,
        on_event=broken,
    )
    assert completion.text == ANSWER


PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


async def test_images_go_as_base64_blocks_and_bad_ones_are_refused(
    claude: AnthropicLLM, fake_claude: FakeAnthropic
) -> None:
    fake_claude.queue_text("A tiny dot.")
    await claude.complete(
        system="s",
        messages=[Message.user(ImageBlock("image/png", PNG), "what is this?")],
        tools=[],
        max_tokens=100,
        purpose="agent",
        chat_id=1,
        on_event=lambda e: None,
    )
    block = fake_claude.requests[0].messages[0]["content"][0]
    assert block["type"] == "image" and base64.b64decode(block["source"]["data"]) == PNG
    with pytest.raises(LLMRequestError, match="media_type"):
        await claude.complete(
            system="s",
            messages=[Message.user(ImageBlock("image/bmp", PNG), "and this?")],
            tools=[],
            max_tokens=100,
            purpose="agent",
            chat_id=1,
        )
