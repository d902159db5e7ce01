"""Streamed calls (``on_event``) through the real SDKs against the fakes' SSE streams: the same
Completion as a non-streamed call, events in order, tool input from its pieces, usage at the end,
errors and drops mid-stream mapped to memory.errors, a call cancelled mid-stream still charged
(its api_usage row with the input tokens reported and the output tokens estimated so far), the
fakes' pacing knobs, OpenAI's include_usage, and images accepted or refused."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import trio
from fakes.anthropic_api import Failure as AnthropicFailure
from fakes.anthropic_api import FakeAnthropic
from fakes.openai_api import CHAT_COMPLETIONS, FakeOpenAI
from fakes.openai_api import Failure as OpenAIFailure
from fakes.sse import StreamTiming

from memory.errors import (
    LLMError,
    LLMOverloaded,
    LLMRateLimited,
    LLMRequestError,
    LLMTimeout,
    LLMUnavailable,
)
from memory.llm.anthropic_provider import AnthropicLLM
from memory.llm.cost import DEFAULT_RATES, Rate
from memory.llm.factory import MAX_IMAGE_BYTES
from memory.llm.openai_provider import OpenAICompatibleLLM
from memory.llm.openai_stream import IMAGE_TOKENS, prompt_estimate
from memory.llm.protocol import (
    LLM,
    Completion,
    ImageBlock,
    Message,
    StreamEvent,
    TextBlock,
    TextDelta,
    TokenUsage,
    ToolSpec,
    ToolStarted,
    ToolUseBlock,
)
from memory.llm.provider_calls import CallContext, stream_error
from memory.llm.streaming import StreamTally
from runtime.db import Database

CHAT = 4242
SEARCH = ToolSpec(
    "search_entries",
    "Search the journal.",
    {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
)
OAI_MODEL = "gpt-4o-mini"
OAI_RATES = {**DEFAULT_RATES, OAI_MODEL: Rate(0.15, 0.60)}
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
LONG = " ".join(f"word{i}" for i in range(200))


async def usage_rows(db: Database) -> list[dict[str, Any]]:
    return [dict(r) for r in await db.fetch("SELECT * FROM api_usage ORDER BY id")]


async def ask(
    llm: LLM, events: list[StreamEvent] | None, *blocks: Any, tools: bool = True
) -> Completion:
    return await llm.complete(
        system="You are kind.",
        messages=[Message.user(*(blocks or ("hi",)))],
        tools=[SEARCH] if tools else [],
        max_tokens=512,
        purpose="agent",
        chat_id=CHAT,
        on_event=None if events is None else events.append,
    )


def same(a: Completion, b: Completion) -> bool:
    """Equal but for the timing and the tool ids the fake draws."""
    return (a.text, a.stop_reason, a.input_tokens, a.output_tokens, a.model, a.cost_usd) == (
        b.text,
        b.stop_reason,
        b.input_tokens,
        b.output_tokens,
        b.model,
        b.cost_usd,
    ) and [(u.name, u.input) for u in a.tool_uses] == [(u.name, u.input) for u in b.tool_uses]


@pytest.fixture
async def gpt(fake_openai: FakeOpenAI, db: Database) -> AsyncIterator[OpenAICompatibleLLM]:
    async with OpenAICompatibleLLM(
        api_key=fake_openai.api_key,
        base_url=fake_openai.base_url,
        model=OAI_MODEL,
        db=db,
        rates=OAI_RATES,
        timeout=5.0,
    ) as llm:
        yield llm


# --- pure rules ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error_type", "kind", "status"),
    [
        ("overloaded_error", LLMOverloaded, 529),
        ("rate_limit_error", LLMRateLimited, 429),
        ("api_error", LLMUnavailable, 500),
        ("invalid_request_error", LLMRequestError, 400),
        ("timeout_error", LLMUnavailable, 504),
        ("something_new", LLMUnavailable, 500),
        (None, LLMUnavailable, 500),
    ],
)
def test_mid_stream_errors_are_classified_like_http_ones(
    error_type: str | None, kind: type[LLMError], status: int
) -> None:
    ctx = CallContext("anthropic", "claude-x", ("sk-secret-123456",))
    err = stream_error(
        ctx, error_type=error_type, message="sk-secret-123456 broke", request_id=None
    )
    assert type(err) is kind and err.status == status and "sk-secret" not in str(err)
    assert "(mid-stream)" in str(err)


def test_stream_tally_estimates() -> None:
    tally = StreamTally(None, prompt_estimate=300)
    assert tally.so_far() is None  # nothing from the server yet: not charged
    tally.started = True
    for piece in ("Hello", " there", ", how are you doing today?"):
        tally.generated(piece)
    assert tally.so_far() == TokenUsage(300, 10)  # 37 characters / 4, more than 3 pieces
    tally.reported = TokenUsage(1_200, 1, cache_read_tokens=1_000)
    tally.reported_output = 25
    assert tally.so_far() == TokenUsage(1_200, 25, cache_read_tokens=1_000)


def test_openai_prompt_estimate_counts_an_image_not_its_url() -> None:
    text = {"model": "m", "messages": [{"role": "user", "content": "x" * 400}]}
    url = "data:image/png;base64," + "A" * 400_000
    image = {
        "model": "m",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": url}},
                    {"type": "text", "text": "x" * 400},
                ],
            }
        ],
    }
    assert 100 <= prompt_estimate(text) < 130
    assert prompt_estimate(image) - prompt_estimate(text) < IMAGE_TOKENS + 30


# --- Anthropic -------------------------------------------------------------------------------


async def test_claude_streamed_text_is_the_same_completion(
    claude: AnthropicLLM, fake_claude: FakeAnthropic, db: Database
) -> None:
    text = "You slept badly on Monday, and better since."
    fake_claude.queue_text(text, input_tokens=1_000, output_tokens=200)
    fake_claude.queue_text(text, input_tokens=1_000, output_tokens=200)
    events: list[StreamEvent] = []
    streamed = await ask(claude, events)
    plain = await ask(claude, None)
    assert same(streamed, plain) and streamed.blocks == (TextBlock(text),)
    assert len(events) > 3 and all(isinstance(e, TextDelta) for e in events)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == text
    first, second = fake_claude.requests
    assert first.body["stream"] is True and "stream" not in second.body
    assert first.events[:3] == ["message_start", "content_block_start", "ping"]
    assert first.events[-2:] == ["message_delta", "message_stop"]
    assert first.stream_end == "complete"
    rows = await usage_rows(db)
    assert [(r["input_tokens"], r["output_tokens"], r["ok"]) for r in rows] == [
        (1_000, 200, True)
    ] * 2
    assert rows[0]["cost_usd"] == rows[1]["cost_usd"] > 0


async def test_claude_streamed_tool_use_is_assembled_from_json_pieces(
    claude: AnthropicLLM, fake_claude: FakeAnthropic
) -> None:
    query = {"query": "how did I sleep in the first week of October, and why?"}
    fake_claude.queue_tool_use("search_entries", query, text="Let me look.", output_tokens=60)
    events: list[StreamEvent] = []
    completion = await ask(claude, events)
    [use] = completion.tool_uses
    assert (use.name, use.input, completion.stop_reason) == ("search_entries", query, "tool_use")
    assert completion.text == "Let me look." and completion.output_tokens == 60
    assert events[-1] == ToolStarted("search_entries")
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Let me look."
    deltas = fake_claude.requests[0].events.count("content_block_delta")
    assert deltas > 8  # the input arrived in several input_json_delta pieces


async def test_claude_error_event_mid_stream_is_overloaded(
    claude: AnthropicLLM, fake_claude: FakeAnthropic, db: Database
) -> None:
    fake_claude.queue_text(LONG, input_tokens=900)
    fake_claude.fail_next(AnthropicFailure.stream_error(after=5))
    events: list[StreamEvent] = []
    with pytest.raises(LLMOverloaded) as info:
        await ask(claude, events)
    assert info.value.error_type == "overloaded_error" and info.value.retryable
    assert len(events) == 5 and fake_claude.requests[0].stream_end == "error"
    [row] = await usage_rows(db)
    assert row["ok"] is False and "Overloaded" in row["error"]
    assert row["input_tokens"] == 900 and row["output_tokens"] >= 5 and row["cost_usd"] == 0


async def test_claude_rate_limit_event_mid_stream(
    claude: AnthropicLLM, fake_claude: FakeAnthropic
) -> None:
    fake_claude.fail_next(AnthropicFailure.stream_error(2, "rate_limit_error", "slow down"))
    with pytest.raises(LLMRateLimited):
        await ask(claude, [])


async def test_claude_dropped_stream_is_unavailable(
    claude: AnthropicLLM, fake_claude: FakeAnthropic, db: Database
) -> None:
    fake_claude.queue_text(LONG)
    fake_claude.fail_next(AnthropicFailure.dropped(after=3))
    with pytest.raises(LLMUnavailable):
        await ask(claude, [])
    [row] = await usage_rows(db)
    assert row["ok"] is False
    # the connection is still usable for the next call
    assert (await ask(claude, [])).text == fake_claude.default_text


async def test_claude_cancelled_mid_stream_is_charged(
    claude: AnthropicLLM, fake_claude: FakeAnthropic, db: Database
) -> None:
    fake_claude.timing = StreamTiming(first_token_delay=0.05, tokens_per_second=100)
    fake_claude.queue_text(LONG, input_tokens=1_500, output_tokens=400)
    events: list[StreamEvent] = []
    with trio.move_on_after(0.4) as scope:
        await ask(claude, events)
    assert scope.cancelled_caught and 5 < len(events) < 200
    await trio.sleep(0.1)
    assert fake_claude.requests[0].stream_end == "client_gone"
    [row] = await usage_rows(db)
    sent = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert (row["ok"], row["error"], row["input_tokens"]) == (True, "cancelled", 1_500)
    # output: the larger of the pieces received and the characters / 4
    assert row["output_tokens"] == max(len(events), -(-len(sent) // 4))
    assert 0 < row["cost_usd"] < 1_500 * 3e-6 + 400 * 15e-6


async def test_claude_cancelled_before_the_stream_is_not_charged(
    claude: AnthropicLLM, fake_claude: FakeAnthropic, db: Database
) -> None:
    fake_claude.fail_next(AnthropicFailure.slow(5.0))
    with trio.move_on_after(0.3):
        await ask(claude, [])
    [row] = await usage_rows(db)
    assert (row["ok"], row["error"], row["input_tokens"]) == (False, "cancelled", 0)


async def test_fake_claude_paces_tokens(claude: AnthropicLLM, fake_claude: FakeAnthropic) -> None:
    fake_claude.timing = StreamTiming(first_token_delay=0.3, tokens_per_second=50)
    fake_claude.queue_text("one two three four five six seven eight nine ten")
    times: list[float] = []
    start = trio.current_time()
    await ask(claude, None, tools=False)  # warm the connection: a non-streamed call waits too
    assert trio.current_time() - start >= 0.3 + 9 / 50
    fake_claude.queue_text("one two three four five six seven eight nine ten")
    start = trio.current_time()
    await ask(claude, [], tools=False)
    await claude.complete(
        system="s",
        messages=[Message.user("hi")],
        tools=[],
        max_tokens=50,
        purpose="agent",
        chat_id=None,
        on_event=lambda e: times.append(trio.current_time() - start),
    )
    assert times[0] >= 0.3 and times[-1] >= 0.3 + 4 / 50 - 0.01


async def test_claude_on_event_failure_does_not_break_the_call(
    claude: AnthropicLLM, fake_claude: FakeAnthropic
) -> None:
    def boom(event: StreamEvent) -> None:
        raise RuntimeError("display broke")

    completion = await claude.complete(
        system="s",
        messages=[Message.user("hi")],
        tools=[],
        max_tokens=50,
        purpose="agent",
        chat_id=None,
        on_event=boom,
    )
    assert completion.text == fake_claude.default_text


async def test_claude_takes_images_and_a_text_only_model_refuses_them(
    claude: AnthropicLLM, fake_claude: FakeAnthropic, db: Database
) -> None:
    photo = ImageBlock("image/png", PNG)
    completion = await ask(claude, [], photo, "what is this?")
    assert completion.text == fake_claude.default_text
    [image, _] = fake_claude.requests[0].messages[0]["content"]
    assert image["source"]["media_type"] == "image/png"
    fake_claude.images.supported = False
    with pytest.raises(LLMRequestError) as info:
        await ask(claude, [], photo, "and this?")
    assert info.value.status == 400 and "does not support image input" in str(info.value)


@pytest.mark.parametrize(
    ("media_type", "data", "problem"),
    [
        ("image/bmp", PNG, "Input should be 'image/jpeg'"),
        ("image/jpeg", PNG, "does not match the provided media type"),
        ("image/png", b"\x89PNG\r\n\x1a\n" + b"\x00" * (5 * 1024 * 1024), "exceeds 5 MB"),
    ],
)
async def test_fake_claude_is_strict_about_images(
    claude: AnthropicLLM, fake_claude: FakeAnthropic, media_type: str, data: bytes, problem: str
) -> None:
    with pytest.raises(LLMRequestError) as info:
        await ask(claude, None, ImageBlock(media_type, data), "look")
    assert info.value.status == 400 and problem in str(info.value)


async def test_fake_claude_refuses_bad_base64_and_assistant_images(
    fake_claude: FakeAnthropic,
) -> None:
    source = {"type": "base64", "media_type": "image/png"}
    bad = {"type": "image", "source": {**source, "data": "not base64!"}}
    good = {"type": "image", "source": {**source, "data": "iVBORw0KGgoAAAAA"}}
    cases: list[list[dict[str, Any]]] = [
        [{"role": "user", "content": [bad]}],
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [good]},
            {"role": "user", "content": "so?"},
        ],
    ]
    headers = {"x-api-key": fake_claude.api_key, "anthropic-version": "2023-06-01"}
    async with httpx.AsyncClient(base_url=fake_claude.base_url) as client:
        for messages in cases:
            body = {"model": "claude-sonnet-4-6", "max_tokens": 10, "messages": messages}
            response = await client.post("/v1/messages", json=body, headers=headers)
            assert response.status_code == 400
    assert "Invalid base64" in (fake_claude.requests[0].error or "")
    assert "only allowed in user messages" in (fake_claude.requests[1].error or "")


async def test_claude_stalled_stream_times_out(fake_claude: FakeAnthropic, db: Database) -> None:
    fake_claude.timing = StreamTiming(tokens_per_second=2)  # a piece every 0.5 s
    fake_claude.queue_text(LONG)
    async with AnthropicLLM(
        api_key=fake_claude.api_key, base_url=fake_claude.base_url, db=db, timeout=0.25
    ) as llm:
        with pytest.raises(LLMTimeout):
            await ask(llm, [])
    [row] = await usage_rows(db)
    assert row["ok"] is False and row["input_tokens"] > 0  # message_start had arrived


# --- OpenAI-compatible ---------------------------------------------------------------------------


async def test_gpt_streamed_text_is_the_same_completion(
    gpt: OpenAICompatibleLLM, fake_openai: FakeOpenAI, db: Database
) -> None:
    text = "You slept badly on Monday, and better since."
    for _ in range(2):
        fake_openai.queue_chat_text(text, prompt_tokens=1_000, completion_tokens=200)
    events: list[StreamEvent] = []
    streamed = await ask(gpt, events)
    plain = await ask(gpt, None)
    assert same(streamed, plain) and streamed.blocks == (TextBlock(text),)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == text
    first, second = fake_openai.calls_to(CHAT_COMPLETIONS)
    assert first.params["stream"] is True
    assert first.params["stream_options"] == {"include_usage": True}
    assert "stream" not in second.params
    assert first.events[-2:] == ["usage", "done"] and first.stream_end == "complete"
    rows = await usage_rows(db)
    assert [(r["input_tokens"], r["output_tokens"]) for r in rows] == [(1_000, 200)] * 2
    assert rows[0]["cost_usd"] == rows[1]["cost_usd"] > 0


async def test_gpt_streamed_tool_calls_are_assembled(
    gpt: OpenAICompatibleLLM, fake_openai: FakeOpenAI
) -> None:
    first = {"query": "how did I sleep in the first week of October?"}
    second = {"query": "work stress"}
    fake_openai.queue_tool_calls(
        [("search_entries", first), ("search_entries", second)], text="Looking."
    )
    events: list[StreamEvent] = []
    completion = await ask(gpt, events)
    assert [u.input for u in completion.tool_uses] == [first, second]
    assert completion.stop_reason == "tool_use" and completion.text == "Looking."
    assert [e for e in events if isinstance(e, ToolStarted)] == [ToolStarted("search_entries")] * 2
    assert all(isinstance(b, TextBlock | ToolUseBlock) for b in completion.blocks)


async def test_gpt_error_chunk_mid_stream_is_unavailable(
    gpt: OpenAICompatibleLLM, fake_openai: FakeOpenAI, db: Database
) -> None:
    fake_openai.queue_chat_text(LONG)
    fake_openai.fail_next(CHAT_COMPLETIONS, OpenAIFailure.stream_error(after=4))
    events: list[StreamEvent] = []
    with pytest.raises(LLMUnavailable) as info:
        await ask(gpt, events)
    assert info.value.error_type == "server_error" and len(events) == 4
    [row] = await usage_rows(db)
    assert row["ok"] is False and row["output_tokens"] >= 4


async def test_gpt_dropped_stream_is_unavailable(
    gpt: OpenAICompatibleLLM, fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue_chat_text(LONG)
    fake_openai.fail_next(CHAT_COMPLETIONS, OpenAIFailure.dropped(after=2))
    with pytest.raises(LLMUnavailable):
        await ask(gpt, [])


async def test_gpt_cancelled_mid_stream_is_charged_on_estimates(
    gpt: OpenAICompatibleLLM, fake_openai: FakeOpenAI, db: Database
) -> None:
    fake_openai.timing = StreamTiming(first_token_delay=0.05, tokens_per_second=100)
    fake_openai.queue_chat_text(LONG, prompt_tokens=1_500)
    events: list[StreamEvent] = []
    with trio.move_on_after(0.4) as scope:
        await ask(gpt, events)
    assert scope.cancelled_caught and 5 < len(events) < 200
    [row] = await usage_rows(db)
    sent = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert (row["ok"], row["error"]) == (True, "cancelled")
    # usage arrives only at the end: the input is estimated from the request, the output
    # counted (one piece a token) or estimated from the characters, whichever is more
    assert 20 < row["input_tokens"] < 200
    assert row["output_tokens"] == max(len(events), -(-len(sent) // 4))
    assert row["cost_usd"] > 0


async def test_gpt_stalled_stream_times_out(fake_openai: FakeOpenAI, db: Database) -> None:
    fake_openai.timing = StreamTiming(tokens_per_second=2)
    fake_openai.queue_chat_text(LONG)
    async with OpenAICompatibleLLM(
        api_key=fake_openai.api_key,
        base_url=fake_openai.base_url,
        model=OAI_MODEL,
        db=db,
        rates=OAI_RATES,
        timeout=0.25,
    ) as llm:
        with pytest.raises(LLMTimeout):
            await ask(llm, [])


async def test_gpt_stream_without_usage_chunk_is_estimated(
    gpt: OpenAICompatibleLLM, fake_openai: FakeOpenAI, db: Database
) -> None:
    """A server that ignores include_usage: the call is still charged, on estimates."""
    fake_openai.queue_chat_text("Fine, thanks.")
    fake_openai.ignore_include_usage = True
    completion = await ask(gpt, [])
    assert completion.text == "Fine, thanks." and completion.input_tokens > 0
    assert fake_openai.calls_to(CHAT_COMPLETIONS)[0].events[-1] == "done"
    assert "usage" not in fake_openai.calls_to(CHAT_COMPLETIONS)[0].events
    [row] = await usage_rows(db)
    assert row["output_tokens"] >= 3 and row["ok"] is True


async def test_gpt_server_refusing_stream_options_is_streamed_without_them(
    gpt: OpenAICompatibleLLM, fake_openai: FakeOpenAI, db: Database
) -> None:
    """An older OpenAI-compatible server answers 400 to ``stream_options``: the call streams
    again without it (and every later call of the client starts without it), charged on
    estimates; one usage row per answered call, none for the refused request."""
    fake_openai.rejects_stream_options = True
    fake_openai.queue_chat_text("First answer.")
    fake_openai.queue_chat_text("Second answer.")
    events: list[StreamEvent] = []
    assert (await ask(gpt, events)).text == "First answer."
    assert any(isinstance(e, TextDelta) for e in events)  # streamed
    assert (await ask(gpt, [])).text == "Second answer."
    calls = fake_openai.calls_to(CHAT_COMPLETIONS)
    assert ["stream_options" in c.params for c in calls] == [True, False, False]
    rows = await usage_rows(db)
    assert [r["ok"] for r in rows] == [True, True]
    assert all(r["input_tokens"] > 0 and r["output_tokens"] > 0 for r in rows)


async def test_gpt_server_refusing_stream_options_but_sending_usage_is_charged_its_usage(
    gpt: OpenAICompatibleLLM, fake_openai: FakeOpenAI, db: Database
) -> None:
    """A server that refuses ``stream_options`` but puts the usage on its last chunk anyway
    (llama.cpp's server): the call is charged the server's figures, not an estimate."""
    fake_openai.rejects_stream_options = True
    fake_openai.usage_on_finish = True
    fake_openai.queue_chat_text("An answer.", prompt_tokens=1234, completion_tokens=56)
    assert (await ask(gpt, [])).text == "An answer."
    (row,) = await usage_rows(db)
    assert (row["input_tokens"], row["output_tokens"], row["ok"]) == (1234, 56, True)


async def test_gpt_images_accepted_and_refused_by_a_text_only_model(
    gpt: OpenAICompatibleLLM, fake_openai: FakeOpenAI
) -> None:
    photo = ImageBlock("image/png", PNG)
    assert (await ask(gpt, [], photo, "what is this?")).text == fake_openai.default_chat_text
    [part, _] = fake_openai.calls_to(CHAT_COMPLETIONS)[0].params["messages"][1]["content"]
    assert part["image_url"]["url"].startswith("data:image/png;base64,iVBORw0KGgo")
    with pytest.raises(LLMRequestError) as info:
        await ask(gpt, [], ImageBlock("image/jpeg", PNG), "and this?")
    assert "unsupported image" in str(info.value)
    fake_openai.images.supported = False
    with pytest.raises(LLMRequestError) as info:
        await ask(gpt, [], photo, "and now?")
    assert info.value.status == 400 and "image_url is only supported" in str(info.value)


async def test_fake_openai_checks_stream_options(fake_openai: FakeOpenAI) -> None:
    headers = {"authorization": f"Bearer {fake_openai.api_key}"}
    base = {"model": OAI_MODEL, "messages": [{"role": "user", "content": "hi"}]}
    cases: list[tuple[dict[str, Any], str]] = [
        ({"stream": True, "stream_options": {"include_usage": "yes"}}, "Invalid type"),
        ({"stream": True, "stream_options": {"extra": True}}, "Additional properties"),
        ({"stream_options": {"include_usage": True}}, "only allowed when 'stream' is enabled"),
    ]
    async with httpx.AsyncClient(base_url=fake_openai.base_url) as client:
        for extra, problem in cases:
            body = {**base, **extra}
            response = await client.post("/chat/completions", json=body, headers=headers)
            assert response.status_code == 400 and problem in response.json()["error"]["message"]


# --- the fakes' wire format, read without an SDK -------------------------------------------------


def sse_events(raw: str) -> list[tuple[str | None, Any]]:
    out: list[tuple[str | None, Any]] = []
    for block in raw.strip().split("\n\n"):
        name, data = None, ""
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
        out.append((name, data if data == "[DONE]" else json.loads(data)))
    return out


async def test_fake_claude_wire_events_for_a_tool_use(fake_claude: FakeAnthropic) -> None:
    fake_claude.queue_tool_use(
        "search_entries", {"query": "sleep"}, input_tokens=50, output_tokens=9
    )
    tool = {"name": "search_entries", "input_schema": {"type": "object"}}
    body = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 20,
        "stream": True,
        "tools": [tool],
        "messages": [{"role": "user", "content": "hi"}],
    }
    headers = {"x-api-key": fake_claude.api_key, "anthropic-version": "2023-06-01"}
    async with httpx.AsyncClient(base_url=fake_claude.base_url) as client:
        response = await client.post("/v1/messages", json=body, headers=headers)
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response.text)
    assert all(name == data["type"] for name, data in events)
    names = [name for name, _ in events]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert (start["usage"]["input_tokens"], start["usage"]["output_tokens"]) == (50, 1)
    block = events[1][1]["content_block"]
    assert (block["type"], block["name"], block["input"]) == ("tool_use", "search_entries", {})
    pieces = [d["delta"]["partial_json"] for n, d in events if n == "content_block_delta"]
    assert pieces[0] == "" and json.loads("".join(pieces)) == {"query": "sleep"}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"
    assert events[-2][1]["usage"] == {"output_tokens": 9}


async def test_fake_openai_wire_chunks_with_and_without_usage(fake_openai: FakeOpenAI) -> None:
    headers = {"authorization": f"Bearer {fake_openai.api_key}"}
    base = {"model": OAI_MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with httpx.AsyncClient(base_url=fake_openai.base_url) as client:
        fake_openai.queue_chat_text("Hi there you.", prompt_tokens=7, completion_tokens=4)
        plain = sse_events(
            (await client.post("/chat/completions", json=base, headers=headers)).text
        )
        fake_openai.queue_chat_text("Hi there you.", prompt_tokens=7, completion_tokens=4)
        options = {"include_usage": True, "include_obfuscation": False}
        body = {**base, "stream_options": options}
        counted = sse_events(
            (await client.post("/chat/completions", json=body, headers=headers)).text
        )
    for chunks in (plain, counted):
        assert chunks[-1] == (None, "[DONE]")
        assert all(d["object"] == "chat.completion.chunk" for _, d in chunks[:-1])
        assert chunks[0][1]["choices"][0]["delta"]["role"] == "assistant"
    assert all("usage" not in d and "obfuscation" in d for _, d in plain[:-1])
    assert plain[-2][1]["choices"][0]["finish_reason"] == "stop"
    text = "".join(d["choices"][0]["delta"].get("content") or "" for _, d in plain[:-1])
    assert text == "Hi there you."
    usage_chunk = counted[-2][1]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["prompt_tokens"] == 7
    assert all(d["usage"] is None and "obfuscation" not in d for _, d in counted[:-2])


async def test_fake_claude_measures_an_image_as_its_base64_text(
    claude: AnthropicLLM, fake_claude: FakeAnthropic
) -> None:
    """The 5 MB limit is on the base64 text: 3.9 MB of bytes (5.2 MB as base64) is too much."""
    limit = MAX_IMAGE_BYTES["anthropic"]
    over = b"\x89PNG\r\n\x1a\n" + b"\x00" * (limit + 3 - 8)
    with pytest.raises(LLMRequestError) as info:
        await ask(claude, None, ImageBlock("image/png", over), "look")
    assert "image exceeds 5 MB maximum: 5242884 bytes > 5242880 bytes" in str(info.value)
    fits = b"\x89PNG\r\n\x1a\n" + b"\x00" * (limit - 8)
    assert (await ask(claude, None, ImageBlock("image/png", fits), "look")).text
