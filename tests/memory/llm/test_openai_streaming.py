"""Streamed OpenAI-compatible calls (issue 23): the real openai SDK's ``create(stream=True)``
against the fake's chunks — content as it is written, tool starts, the same Completion as
without streaming (usage from the final chunk), a call stopped part way billed on estimates,
images as data URLs and a text-only model's refusal."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator

import pytest
import trio
from fakes.openai_api import ChatReply, FakeOpenAI, ScriptedToolCall
from fakes.stream_pace import Pace

from memory.errors import LLMRequestError
from memory.llm.cost import DEFAULT_RATES, Rate
from memory.llm.openai_provider import OpenAICompatibleLLM
from memory.llm.protocol import (
    Completion,
    ImageBlock,
    Message,
    StreamEvent,
    TextDelta,
    ToolSpec,
    ToolStarted,
)
from runtime.db import Database

MODEL = "gpt-4o-mini"
TOOLS = [
    ToolSpec(
        "search_entries",
        "Search the journal.",
        {"type": "object", "properties": {"query": {"type": "string"}}},
    )
]
ANSWER = "You slept badly on Monday and better after the walk on Tuesday."
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


@pytest.fixture
async def gpt(fake_openai: FakeOpenAI, db: Database) -> AsyncIterator[OpenAICompatibleLLM]:
    async with OpenAICompatibleLLM(
        api_key=fake_openai.api_key,
        base_url=fake_openai.base_url,
        model=MODEL,
        db=db,
        rates={**DEFAULT_RATES, MODEL: Rate(0.15, 0.60)},
        timeout=5.0,
    ) as llm:
        yield llm


async def ask(
    llm: OpenAICompatibleLLM, events: list[StreamEvent] | None, *blocks: object
) -> Completion:
    return await llm.complete(
        system="Be brief.",
        messages=[Message.user(*(blocks or ("How did I sleep?",)))],  # type: ignore[arg-type]
        tools=TOOLS,
        max_tokens=256,
        purpose="agent",
        chat_id=3,
        on_event=None if events is None else events.append,
    )


async def test_content_streams_and_the_completion_is_the_unstreamed_one(
    gpt: OpenAICompatibleLLM, fake_openai: FakeOpenAI, db: Database
) -> None:
    for _ in range(2):
        fake_openai.queue_chat_text(ANSWER, prompt_tokens=700, completion_tokens=15)
    events: list[StreamEvent] = []
    streamed = await ask(gpt, events)
    plain = await ask(gpt, None)
    body = json.loads(fake_openai.calls[0].data)
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert fake_openai.calls[0].stream_complete is True
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == ANSWER
    assert len(events) > 5
    for field in ("text", "stop_reason", "input_tokens", "output_tokens", "cost_usd"):
        assert getattr(streamed, field) == getattr(plain, field), field
    rows = await db.fetch("SELECT input_tokens, output_tokens FROM api_usage ORDER BY id")
    assert [tuple(r.values()) for r in rows] == [(700, 15), (700, 15)]


async def test_tool_calls_stream_their_start_and_arrive_whole(
    gpt: OpenAICompatibleLLM, fake_openai: FakeOpenAI
) -> None:
    args = {"query": "sleep after walks", "limit": 5}
    fake_openai.queue_chat_reply(
        ChatReply(
            "Let me look.",
            (ScriptedToolCall("call_1", "search_entries", json.dumps(args)),),
            finish_reason="tool_calls",
        )
    )
    events: list[StreamEvent] = []
    completion = await ask(gpt, events)
    assert events[-1] == ToolStarted("search_entries")
    (use,) = completion.tool_uses
    assert use.id == "call_1" and dict(use.input) == args
    assert completion.stop_reason == "tool_use" and completion.text == "Let me look."


async def test_a_call_stopped_mid_stream_is_billed_on_estimates(
    gpt: OpenAICompatibleLLM, fake_openai: FakeOpenAI, db: Database
) -> None:
    fake_openai.pace = Pace(first_token_delay=0.05, tokens_per_second=200)
    fake_openai.queue_chat_text(ANSWER * 20)
    events: list[StreamEvent] = []
    with trio.move_on_after(0.5) as scope:
        await ask(gpt, events)
    assert scope.cancelled_caught and events
    row = await db.fetchrow(
        "SELECT input_tokens, output_tokens, cost_usd, ok, error FROM api_usage"
    )
    assert row is not None
    assert row["input_tokens"] > 0 and row["output_tokens"] > 0 and row["cost_usd"] > 0
    assert row["error"] == "stopped mid-stream"


async def test_images_are_data_urls_and_a_text_only_model_refuses_them(
    gpt: OpenAICompatibleLLM, fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue_chat_text("A tiny dot.")
    await ask(gpt, [], ImageBlock("image/png", PNG), "what is this?")
    content = json.loads(fake_openai.calls[0].data)["messages"][1]["content"]
    url = content[0]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == PNG
    assert content[1] == {"type": "text", "text": "what is this?"}
    fake_openai.vision = False
    with pytest.raises(LLMRequestError, match="image_url is only supported"):
        await ask(gpt, [], ImageBlock("image/png", PNG), "and now?")
