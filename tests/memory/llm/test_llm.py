"""LLM providers through the real SDKs (under trio) against the strict fakes and the real
database: text replies, tool chains, usage rows and cost, error mapping; plus the pure mapping,
and the fake OpenAI chat completions and embeddings endpoints' strictness."""

from __future__ import annotations

import base64
import socket
import struct
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import attrs
import httpx
import pytest
import trio
from fakes.anthropic_api import Failure as AnthropicFailure
from fakes.anthropic_api import FakeAnthropic
from fakes.openai_api import (
    CHAT_COMPLETIONS,
    EMBEDDINGS,
    ChatReply,
    FakeOpenAI,
    run_fake_openai,
)
from fakes.openai_api import Failure as OpenAIFailure

from memory.errors import (
    LLMError,
    LLMInvalidResponse,
    LLMOverloaded,
    LLMRateLimited,
    LLMRequestError,
    LLMTimeout,
    LLMUnavailable,
)
from memory.llm.anthropic_provider import AnthropicLLM, message_params
from memory.llm.cost import DEFAULT_RATES, Rate, token_cost
from memory.llm.openai_provider import OpenAICompatibleLLM, chat_messages
from memory.llm.protocol import (
    LLM,
    Completion,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
)
from memory.llm.provider_calls import CallContext, retry_after_seconds, status_error
from runtime.db import Database

CHAT = 777
SEARCH = ToolSpec(
    "search_entries",
    "Search the journal.",
    {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
)
OAI_MODEL = "gpt-4o-mini"
OAI_RATES = {**DEFAULT_RATES, OAI_MODEL: Rate(0.15, 0.60)}


async def usage_rows(db: Database) -> list[dict[str, Any]]:
    return [dict(r) for r in await db.fetch("SELECT * FROM api_usage ORDER BY id")]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- pure mapping ------------------------------------------------------------------------------


def test_anthropic_mapping_puts_tool_results_first_and_drops_blank_text() -> None:
    messages = [
        Message.user("hi"),
        Message.assistant("\n", ToolUseBlock("toolu_1", "search_entries", {"query": "x"})),
        Message.user("thanks", ToolResultBlock("toolu_1", "boom", is_error=True)),
    ]
    assert message_params(messages) == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "search_entries",
                    "input": {"query": "x"},
                }
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": "boom",
                    "is_error": True,
                },
                {"type": "text", "text": "thanks"},
            ],
        },
    ]


def test_openai_mapping_of_tool_calls_and_results() -> None:
    messages = [
        Message.user("hi"),
        Message.assistant("Looking.", ToolUseBlock("call_1", "search_entries", {"query": "x"})),
        Message.user(ToolResultBlock("call_1", "boom", is_error=True), "and?"),
        Message.assistant(ToolUseBlock("call_2", "search_entries", {})),
        Message.user(ToolResultBlock("call_2", "ok")),
    ]
    assert chat_messages("sys", messages) == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "Looking.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "search_entries", "arguments": '{"query": "x"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Error: boom"},
        {"role": "user", "content": "and?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "search_entries", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_2", "content": "ok"},
    ]


def test_neutral_types() -> None:
    message = Message.user("a", TextBlock("b"))
    assert message.blocks == (TextBlock("a"), TextBlock("b")) and message.text == "ab"
    with pytest.raises(ValueError):
        Message("system", ())  # type: ignore[arg-type]
    use = ToolUseBlock("t1", "search_entries", {"query": "x"})
    done = Completion((TextBlock("hm"), use), "tool_use", 1, 2, "m")
    assert done.tool_uses == (use,) and done.text == "hm"
    assert done.as_message() == Message("assistant", (TextBlock("hm"), use))


def test_retry_after_parsing() -> None:
    assert retry_after_seconds({"retry-after": "7"}) == 7.0
    assert retry_after_seconds({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({"retry-after": "-3"}) is None
    assert retry_after_seconds({}) is None
    later = datetime(2030, 1, 1, tzinfo=UTC)
    now = (later - timedelta(seconds=30)).timestamp()
    assert retry_after_seconds({"retry-after": format_datetime(later, usegmt=True)}, now) == 30


@pytest.mark.parametrize(
    ("status", "error_type", "kind", "retryable"),
    [
        (429, "rate_limit_error", LLMRateLimited, True),
        (529, "overloaded_error", LLMOverloaded, True),
        (500, "api_error", LLMUnavailable, True),
        (503, None, LLMUnavailable, True),
        (408, None, LLMTimeout, True),
        (400, "invalid_request_error", LLMRequestError, False),
        (401, "authentication_error", LLMRequestError, False),
        (429, "insufficient_quota", LLMRequestError, False),
    ],
)
def test_status_classification(
    status: int, error_type: str | None, kind: type[LLMError], retryable: bool
) -> None:
    key = "sk-ant-secret-0123456789"
    ctx = CallContext("anthropic", "claude-x", (key,))
    err = status_error(
        ctx,
        status,
        error_type=error_type,
        message=f"bad key {key}",
        request_id="req_1",
        headers={"retry-after": "2"},
    )
    assert type(err) is kind and err.retryable is retryable and err.status == status
    assert key not in str(err) and "req_1" in str(err) and err.retry_after == 2.0


# --- Anthropic ---------------------------------------------------------------------------------


async def ask(llm: LLM, messages: list[Message], **options: Any) -> Completion:
    params: dict[str, Any] = {
        "system": "You are kind.",
        "tools": [SEARCH],
        "max_tokens": 512,
        "purpose": "agent",
        "chat_id": CHAT,
    }
    params.update(options)
    return await llm.complete(messages=messages, **params)


async def test_claude_text_reply_is_logged_with_cost(
    claude: AnthropicLLM, fake_claude: FakeAnthropic, db: Database
) -> None:
    fake_claude.queue_text("Hello there.", input_tokens=1_000, output_tokens=200)
    completion = await ask(claude, [Message.user("hi")])
    assert completion.blocks == (TextBlock("Hello there."),)
    assert completion.stop_reason == "end_turn" and completion.model == "claude-sonnet-4-6"
    assert (completion.input_tokens, completion.output_tokens) == (1_000, 200)
    assert completion.cost_usd == pytest.approx(0.006) and completion.latency_ms > 0
    [request] = fake_claude.requests
    assert request.body == {
        "model": "claude-sonnet-4-6",
        "max_tokens": 512,
        "system": "You are kind.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "tools": [
            {
                "name": "search_entries",
                "description": "Search the journal.",
                "input_schema": dict(SEARCH.input_schema),
            }
        ],
    }
    [row] = await usage_rows(db)
    assert (row["provider"], row["model"], row["purpose"], row["chat_id"]) == (
        "anthropic",
        "claude-sonnet-4-6",
        "agent",
        CHAT,
    )
    assert (row["input_tokens"], row["output_tokens"], row["ok"]) == (1_000, 200, True)
    assert row["cost_usd"] == pytest.approx(0.006) and row["latency_ms"] >= 0
    assert row["error"] is None


async def test_claude_tool_chain_round_trip(
    claude: AnthropicLLM, fake_claude: FakeAnthropic, db: Database
) -> None:
    tid = fake_claude.queue_tool_use(
        "search_entries",
        {"query": "sleep"},
        text="Let me look.",
        input_tokens=2_000,
        output_tokens=50,
    )
    fake_claude.queue_text("You slept badly on Monday.", input_tokens=2_400, output_tokens=30)
    messages = [Message.user("How did I sleep?")]
    first = await ask(claude, messages)
    assert first.stop_reason == "tool_use"
    assert first.tool_uses == (ToolUseBlock(tid, "search_entries", {"query": "sleep"}),)
    messages += [first.as_message(), Message.user(ToolResultBlock(tid, "Mon: slept 4h"))]
    final = await ask(claude, messages)
    assert final.text == "You slept badly on Monday." and final.stop_reason == "end_turn"
    sent = fake_claude.requests[1].messages
    assert sent[1]["content"][1] == {
        "type": "tool_use",
        "id": tid,
        "name": "search_entries",
        "input": {"query": "sleep"},
    }
    assert sent[2]["content"] == [
        {"type": "tool_result", "tool_use_id": tid, "content": "Mon: slept 4h"}
    ]
    rows = await usage_rows(db)
    assert [(r["input_tokens"], r["output_tokens"]) for r in rows] == [(2_000, 50), (2_400, 30)]
    assert sum(r["cost_usd"] for r in rows) == pytest.approx((4_400 * 3 + 80 * 15) / 1e6)


async def test_claude_sends_cache_breakpoints_and_records_cache_tokens(
    claude: AnthropicLLM, fake_claude: FakeAnthropic, db: Database
) -> None:
    fake_claude.clock = lambda: 100.0
    tool = attrs.evolve(SEARCH, description="Search the journal. " * 250, cache="1h")
    system = [
        TextBlock("You are kind and remember everything. " * 100, cache="1h"),
        TextBlock("  ", cache="5m"),  # blank: dropped, its breakpoint moves to the block before
        TextBlock("Now: Monday 09:15."),
    ]
    messages = [Message.user("How did I sleep?", cache="5m")]
    first = await ask(claude, messages, tools=[tool], system=system)
    second = await ask(claude, messages, tools=[tool], system=system)
    sent = fake_claude.requests[0].body
    hour = {"type": "ephemeral", "ttl": "1h"}
    assert sent["tools"][0]["cache_control"] == hour
    assert sent["system"] == [
        {"type": "text", "text": system[0].text, "cache_control": hour},
        {"type": "text", "text": "Now: Monday 09:15."},
    ]
    assert sent["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "How did I sleep?", "cache_control": {"type": "ephemeral"}}
            ],
        }
    ]
    write, read = (r.cache for r in fake_claude.answered)  # what the fake billed
    assert write is not None and read is not None
    assert write.read == 0 and write.write_1h > 2_000 and write.write_5m > 0
    assert read.read == write.write and read.write == 0
    assert (first.cache_read_tokens, first.cache_write_tokens) == (0, write.write)
    assert (second.cache_read_tokens, second.cache_write_tokens) == (read.read, 0)
    assert first.input_tokens == second.input_tokens > write.write  # the whole prompt
    rows = await usage_rows(db)
    assert [(r["cache_read_tokens"], r["cache_write_tokens"]) for r in rows] == [
        (0, write.write),
        (read.read, 0),
    ]
    assert [r["input_tokens"] for r in rows] == [first.input_tokens, second.input_tokens]
    expected = [
        token_cost(
            DEFAULT_RATES,
            "claude-sonnet-4-6",
            first.input_tokens,
            first.output_tokens,
            cache_write_tokens=write.write,
            cache_write_1h_tokens=write.write_1h,
        ).usd,
        token_cost(
            DEFAULT_RATES,
            "claude-sonnet-4-6",
            second.input_tokens,
            second.output_tokens,
            cache_read_tokens=read.read,
        ).usd,
    ]
    assert [r["cost_usd"] for r in rows] == pytest.approx(expected)
    assert first.cost_usd == pytest.approx(expected[0]) and second.cost_usd < first.cost_usd / 5


async def test_claude_without_marks_sends_no_cache_control(
    claude: AnthropicLLM, fake_claude: FakeAnthropic
) -> None:
    await ask(claude, [Message.user("hi")], system=[TextBlock("One."), TextBlock("Two.")])
    body = fake_claude.requests[0].body
    assert body["system"] == [{"type": "text", "text": "One."}, {"type": "text", "text": "Two."}]
    assert "cache_control" not in repr(body)


async def test_claude_max_tokens_stop_and_no_tools(
    claude: AnthropicLLM, fake_claude: FakeAnthropic
) -> None:
    fake_claude.queue_text("It was a dark and", stop_reason="max_tokens")
    completion = await ask(claude, [Message.user("story")], tools=[], system="")
    assert completion.stop_reason == "max_tokens"
    assert "tools" not in fake_claude.requests[0].body
    assert "system" not in fake_claude.requests[0].body


async def test_claude_broken_pairing_is_a_request_error(
    claude: AnthropicLLM, fake_claude: FakeAnthropic, db: Database
) -> None:
    orphan = Message.assistant(ToolUseBlock("toolu_9", "search_entries", {"query": "x"}))
    with pytest.raises(LLMRequestError) as info:
        await ask(claude, [Message.user("hi"), orphan, Message.user("hello?")])
    assert info.value.status == 400 and "toolu_9" in str(info.value)
    assert not info.value.retryable
    [row] = await usage_rows(db)
    assert row["ok"] is False and "400" in row["error"]


@pytest.mark.parametrize(
    ("failure", "kind", "status"),
    [
        (AnthropicFailure.rate_limited(retry_after=7), LLMRateLimited, 429),
        (AnthropicFailure.overloaded(), LLMOverloaded, 529),
        (AnthropicFailure.server_error(), LLMUnavailable, 500),
    ],
)
async def test_claude_failures_are_mapped_and_logged(
    claude: AnthropicLLM,
    fake_claude: FakeAnthropic,
    db: Database,
    failure: AnthropicFailure,
    kind: type[LLMError],
    status: int,
) -> None:
    fake_claude.fail_next(failure)
    with pytest.raises(LLMError) as info:
        await ask(claude, [Message.user("hi")])
    exc = info.value
    assert type(exc) is kind and exc.status == status and exc.retryable
    assert exc.provider == "anthropic" and exc.model == "claude-sonnet-4-6"
    assert exc.request_id and exc.request_id.startswith("req_")
    assert exc.retry_after == (7.0 if status == 429 else None)
    assert exc.__cause__ is None and exc.__context__ is None
    assert fake_claude.api_key not in str(exc) and fake_claude.api_key not in repr(exc.args)
    assert len(fake_claude.requests) == 1  # no SDK retries
    [row] = await usage_rows(db)
    assert (row["ok"], row["cost_usd"], row["input_tokens"]) == (False, 0.0, 0)
    assert str(status) in row["error"] and row["purpose"] == "agent"


async def test_claude_timeout(fake_claude: FakeAnthropic, db: Database) -> None:
    fake_claude.fail_next(AnthropicFailure.slow(3.0))
    async with AnthropicLLM(
        api_key=fake_claude.api_key, base_url=fake_claude.base_url, db=db, timeout=0.3
    ) as llm:
        with pytest.raises(LLMTimeout) as info:
            await ask(llm, [Message.user("hi")])
    assert info.value.retryable and info.value.__context__ is None
    [row] = await usage_rows(db)
    assert row["ok"] is False and row["latency_ms"] >= 300


async def test_claude_wrong_key_never_leaks(fake_claude: FakeAnthropic, db: Database) -> None:
    wrong = "sk-ant-api03-wrong-key-0123456789abcdefghijklmnop"
    async with AnthropicLLM(api_key=wrong, base_url=fake_claude.base_url, db=db) as llm:
        with pytest.raises(LLMRequestError) as info:
            await ask(llm, [Message.user("hi")], purpose="compaction", chat_id=None)
    exc = info.value
    assert exc.status == 401 and exc.error_type == "authentication_error"
    assert wrong not in str(exc) and exc.__context__ is None and exc.__cause__ is None
    [row] = await usage_rows(db)
    assert row["purpose"] == "compaction" and row["chat_id"] == 0  # no chat (migration 023)
    assert wrong not in row["error"]


async def test_claude_connection_refused_is_unavailable(db: Database) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    async with AnthropicLLM(api_key="sk-ant-x-0123456789", base_url=url, db=db) as llm:
        with pytest.raises(LLMUnavailable) as info:
            await ask(llm, [Message.user("hi")])
    assert info.value.status is None and "connection failed" in str(info.value)
    assert [r["ok"] for r in await usage_rows(db)] == [False]


async def test_claude_cancelled_call_is_still_logged(
    claude: AnthropicLLM, fake_claude: FakeAnthropic, db: Database
) -> None:
    fake_claude.fail_next(AnthropicFailure.slow(5.0))
    with trio.move_on_after(0.3) as scope:
        await ask(claude, [Message.user("hi")])
    assert scope.cancelled_caught
    [row] = await usage_rows(db)
    assert (row["ok"], row["error"]) == (False, "cancelled")


async def test_claude_aclose_closes_the_sdk_client(
    fake_claude: FakeAnthropic, db: Database
) -> None:
    llm = AnthropicLLM(api_key=fake_claude.api_key, base_url=fake_claude.base_url, db=db)
    await llm.aclose()
    assert llm._client.is_closed()
    with pytest.raises(ValueError):
        AnthropicLLM(api_key="", db=db)


# --- OpenAI-compatible -------------------------------------------------------------------------


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


async def test_openai_text_reply_is_logged_with_cost(
    gpt: OpenAICompatibleLLM, fake_openai: FakeOpenAI, db: Database
) -> None:
    fake_openai.queue_chat_text("Hi!", prompt_tokens=1_000, completion_tokens=100)
    completion = await ask(gpt, [Message.user("hi")])
    assert completion.blocks == (TextBlock("Hi!"),) and completion.stop_reason == "end_turn"
    assert completion.cost_usd == pytest.approx((1_000 * 0.15 + 100 * 0.60) / 1e6)
    [call] = fake_openai.calls_to(CHAT_COMPLETIONS)
    assert call.model == OAI_MODEL and call.params["max_tokens"] == 512
    assert call.params["messages"][0] == {"role": "system", "content": "You are kind."}
    assert call.params["tools"][0]["function"]["parameters"] == dict(SEARCH.input_schema)
    [row] = await usage_rows(db)
    assert (row["provider"], row["model"], row["input_tokens"], row["output_tokens"]) == (
        "openai",
        OAI_MODEL,
        1_000,
        100,
    )
    assert row["ok"] is True and row["cost_usd"] == pytest.approx(completion.cost_usd)


async def test_openai_ignores_cache_marks_and_records_cached_tokens(
    gpt: OpenAICompatibleLLM, fake_openai: FakeOpenAI, db: Database
) -> None:
    fake_openai.queue_chat_reply(
        ChatReply("Hi!", prompt_tokens=10_000, completion_tokens=100, cached_tokens=8_000)
    )
    system = [TextBlock("You are kind.", cache="1h"), TextBlock("Now: Monday.")]
    tool = attrs.evolve(SEARCH, cache="1h")
    completion = await ask(gpt, [Message.user("hi", cache="5m")], system=system, tools=[tool])
    [call] = fake_openai.calls_to(CHAT_COMPLETIONS)
    assert call.params["messages"] == [
        {"role": "system", "content": "You are kind.\n\nNow: Monday."},
        {"role": "user", "content": "hi"},
    ]
    assert "cache" not in repr(call.params)
    assert (completion.input_tokens, completion.cache_read_tokens) == (10_000, 8_000)
    [row] = await usage_rows(db)
    assert (row["input_tokens"], row["cache_read_tokens"], row["cache_write_tokens"]) == (
        10_000,
        8_000,
        0,
    )
    assert row["cost_usd"] == pytest.approx((2_000 * 0.15 + 800 * 0.15 + 100 * 0.60) / 1e6)


async def test_openai_tool_chain_round_trip(
    gpt: OpenAICompatibleLLM, fake_openai: FakeOpenAI, db: Database
) -> None:
    [cid] = fake_openai.queue_tool_calls([("search_entries", {"query": "sleep"})])
    fake_openai.queue_chat_text("Badly.", finish_reason="stop")
    messages = [Message.user("How did I sleep?")]
    first = await ask(gpt, messages)
    assert first.stop_reason == "tool_use"
    assert first.tool_uses == (ToolUseBlock(cid, "search_entries", {"query": "sleep"}),)
    messages += [first.as_message(), Message.user(ToolResultBlock(cid, "Mon: 4h"))]
    final = await ask(gpt, messages)
    assert final.text == "Badly."
    sent = fake_openai.calls_to(CHAT_COMPLETIONS)[1].params["messages"]
    assert sent[-1] == {"role": "tool", "tool_call_id": cid, "content": "Mon: 4h"}
    assert sent[-2]["tool_calls"][0]["id"] == cid
    assert len(await usage_rows(db)) == 2


async def test_openai_local_server_style(fake_openai: FakeOpenAI, db: Database) -> None:
    """A dummy key, a provider name, max_completion_tokens, tool calls with finish "stop"."""
    fake_openai.api_key = "unused"
    fake_openai.queue_tool_calls([("search_entries", {"query": "x"})], finish_reason="stop")
    async with OpenAICompatibleLLM(
        api_key="unused",
        base_url=fake_openai.base_url,
        model="local:qwen",
        db=db,
        provider="local",
        max_tokens_param="max_completion_tokens",
    ) as llm:
        completion = await ask(llm, [Message.user("hi")])
    assert completion.stop_reason == "tool_use"
    assert fake_openai.calls_to(CHAT_COMPLETIONS)[0].params["max_completion_tokens"] == 512
    [row] = await usage_rows(db)
    assert (row["provider"], row["model"], row["cost_usd"]) == ("local", "local:qwen", 0.0)


async def test_openai_broken_tool_arguments_are_an_invalid_response(
    gpt: OpenAICompatibleLLM, fake_openai: FakeOpenAI, db: Database
) -> None:
    fake_openai.queue_tool_calls(
        [("search_entries", '{"query": ')], prompt_tokens=10, completion_tokens=5
    )
    with pytest.raises(LLMInvalidResponse) as info:
        await ask(gpt, [Message.user("hi")])
    assert info.value.retryable and "not a JSON object" in str(info.value)
    [row] = await usage_rows(db)
    assert row["ok"] is True and row["cost_usd"] > 0 and "invalid response" in row["error"]


@pytest.mark.parametrize(
    ("failure", "kind", "status"),
    [
        (OpenAIFailure.rate_limited(retry_after=4), LLMRateLimited, 429),
        (OpenAIFailure.insufficient_quota(), LLMRequestError, 429),
        (OpenAIFailure.overloaded(), LLMUnavailable, 503),
        (OpenAIFailure.server_error(), LLMUnavailable, 500),
    ],
)
async def test_openai_failures_are_mapped_and_logged(
    gpt: OpenAICompatibleLLM,
    fake_openai: FakeOpenAI,
    db: Database,
    failure: OpenAIFailure,
    kind: type[LLMError],
    status: int,
) -> None:
    fake_openai.fail_next(CHAT_COMPLETIONS, failure)
    with pytest.raises(LLMError) as info:
        await ask(gpt, [Message.user("hi")])
    exc = info.value
    assert type(exc) is kind and exc.status == status
    assert exc.retry_after == (4.0 if kind is LLMRateLimited else None)
    assert exc.__cause__ is None and exc.__context__ is None
    assert fake_openai.api_key not in str(exc)
    [row] = await usage_rows(db)
    assert (row["ok"], row["cost_usd"]) == (False, 0.0) and str(status) in row["error"]


async def test_openai_timeout_and_wrong_key(fake_openai: FakeOpenAI, db: Database) -> None:
    fake_openai.fail_next(CHAT_COMPLETIONS, OpenAIFailure.slow(3.0))
    async with OpenAICompatibleLLM(
        api_key=fake_openai.api_key,
        base_url=fake_openai.base_url,
        model=OAI_MODEL,
        db=db,
        timeout=0.3,
    ) as llm:
        with pytest.raises(LLMTimeout):
            await ask(llm, [Message.user("hi")])
    wrong = "sk-proj-wrong-0123456789abcdefghijklmnopqrstuvwxyz"
    async with OpenAICompatibleLLM(
        api_key=wrong, base_url=fake_openai.base_url, model=OAI_MODEL, db=db
    ) as llm:
        with pytest.raises(LLMRequestError) as info:
            await ask(llm, [Message.user("hi")])
    assert info.value.status == 401 and wrong not in str(info.value)
    assert info.value.__context__ is None
    rows = await usage_rows(db)
    assert [r["ok"] for r in rows] == [False, False]
    assert all(wrong not in r["error"] for r in rows)


# --- the fake OpenAI chat completions and embeddings endpoints are strict --------------------


async def post_openai(fake: FakeOpenAI, path: str, body: Any) -> httpx.Response:
    headers = {"authorization": f"Bearer {fake.api_key}"}
    async with httpx.AsyncClient(base_url=fake.base_url, timeout=10) as client:
        return await client.post(path, json=body, headers=headers)


USER = {"role": "user", "content": "hi"}
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "search_entries", "arguments": "{}"},
}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "search_entries", "parameters": {"type": "object", "properties": {}}},
    }
]


def chat(messages: list[Any] | None = None, **fields: Any) -> dict[str, Any]:
    return {"model": OAI_MODEL, "messages": [USER] if messages is None else messages, **fields}


BAD_CHATS: list[tuple[str, dict[str, Any], str]] = [
    ("missing model", {"messages": [USER]}, "you must provide a model parameter"),
    ("missing messages", {"model": OAI_MODEL}, "Missing required parameter: 'messages'"),
    ("empty messages", chat([]), "Invalid 'messages': empty array"),
    ("unknown field", chat(colour="red"), "Unrecognized request argument supplied: colour"),
    ("bad role", chat([{"role": "robot", "content": "x"}]), "Invalid value: 'robot'"),
    (
        "tool calls unanswered",
        chat([USER, {"role": "assistant", "tool_calls": [CALL]}, USER], tools=TOOLS),
        "did not have response messages: call_1",
    ),
    (
        "tool calls unanswered at the end",
        chat([USER, {"role": "assistant", "tool_calls": [CALL]}], tools=TOOLS),
        "did not have response messages: call_1",
    ),
    (
        "tool message without tool_calls",
        chat([USER, {"role": "tool", "tool_call_id": "call_1", "content": "x"}]),
        "must be a response to a preceeding message with 'tool_calls'",
    ),
    (
        "tool message with an unknown id",
        chat(
            [
                USER,
                {"role": "assistant", "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "call_2", "content": "x"},
            ],
            tools=TOOLS,
        ),
        "must be a response to a preceeding message",
    ),
    (
        "tool message without tool_call_id",
        chat(
            [USER, {"role": "assistant", "tool_calls": [CALL]}, {"role": "tool", "content": "x"}],
            tools=TOOLS,
        ),
        "Missing required parameter: 'messages[2].tool_call_id'",
    ),
    (
        "arguments as an object",
        chat(
            [
                USER,
                {
                    "role": "assistant",
                    "tool_calls": [
                        {**CALL, "function": {"name": "search_entries", "arguments": {}}}
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "x"},
            ],
            tools=TOOLS,
        ),
        "expected a string, but got an object",
    ),
    (
        "assistant with neither content nor calls",
        chat([USER, {"role": "assistant"}, USER]),
        "expected a string, got null",
    ),
    ("empty tools", chat(tools=[]), "Invalid 'tools': empty array"),
    ("tool of another type", chat(tools=[{"type": "retrieval"}]), "Invalid value: 'retrieval'"),
    (
        "bad function name",
        chat(tools=[{"type": "function", "function": {"name": "a b"}}]),
        "string does not match pattern",
    ),
    (
        "function name too long",
        chat(tools=[{"type": "function", "function": {"name": "x" * 65}}]),
        "string too long",
    ),
    (
        "parameters not an object schema",
        chat(
            tools=[{"type": "function", "function": {"name": "a", "parameters": {"type": "array"}}}]
        ),
        "schema must be a JSON Schema of 'type: \"object\"'",
    ),
    ("both token limits", chat(max_tokens=5, max_completion_tokens=5), "at the same time"),
    ("zero max_tokens", chat(max_tokens=0), "integer below minimum value"),
    ("tool_choice without tools", chat(tool_choice="auto"), "only allowed when 'tools'"),
    ("stream not a boolean", chat(stream="yes"), "Invalid type for 'stream'"),
    (
        "stream_options without stream",
        chat(stream_options={"include_usage": True}),
        "only allowed when 'stream'",
    ),
]


@pytest.mark.parametrize(("case", "payload", "text"), BAD_CHATS, ids=[c[0] for c in BAD_CHATS])
async def test_fake_chat_completions_rejects(
    fake_openai: FakeOpenAI, case: str, payload: dict[str, Any], text: str
) -> None:
    response = await post_openai(fake_openai, "/chat/completions", payload)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert text in error["message"] and set(error) == {"message", "type", "param", "code"}


async def test_fake_chat_completions_auth_and_valid_chain(fake_openai: FakeOpenAI) -> None:
    async with httpx.AsyncClient(base_url=fake_openai.base_url) as client:
        response = await client.post("/chat/completions", json=chat())
    assert response.status_code == 401
    chain = chat(
        [
            USER,
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": "none"},
            USER,
        ],
        tools=TOOLS,
    )
    response = await post_openai(fake_openai, "/chat/completions", chain)
    assert response.status_code == 200
    payload = response.json()
    assert payload["object"] == "chat.completion" and payload["choices"][0]["finish_reason"]
    assert payload["usage"]["total_tokens"] == (
        payload["usage"]["prompt_tokens"] + payload["usage"]["completion_tokens"]
    )


async def test_fake_chat_scripted_tool_must_be_offered(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue_tool_calls([("rm_rf", {})])
    response = await post_openai(fake_openai, "/chat/completions", chat(tools=TOOLS))
    assert response.status_code == 500 and "rm_rf" in response.json()["error"]["message"]


async def test_fake_chat_unknown_model_when_models_are_listed() -> None:
    async with run_fake_openai(chat_models={"gpt-4o"}) as fake:
        response = await post_openai(fake, "/chat/completions", chat())
    assert response.status_code == 404 and response.json()["error"]["code"] == "model_not_found"


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


async def test_fake_embeddings(fake_openai: FakeOpenAI) -> None:
    client = fake_openai.client()
    try:
        result = await client.embeddings.create(
            model="text-embedding-3-small",
            input=["I slept badly", "I slept badly again", "quarterly tax forms"],
        )
        large = await client.embeddings.create(model="text-embedding-3-large", input="x")
        short = await client.embeddings.create(
            model="text-embedding-3-small", input="I slept badly", dimensions=256
        )
    finally:
        await client.close()
    vectors = [d.embedding for d in result.data]
    assert [len(v) for v in vectors] == [1536] * 3 and len(large.data[0].embedding) == 3072
    assert all(cosine(v, v) == pytest.approx(1.0, abs=1e-5) for v in vectors)
    assert cosine(vectors[0], vectors[1]) > 0.6 > 0.2 > abs(cosine(vectors[0], vectors[2]))
    assert vectors[0] == pytest.approx(
        fake_openai.embedding_vector("text-embedding-3-small", "I slept badly")
    )
    assert len(short.data[0].embedding) == 256
    assert cosine(short.data[0].embedding, short.data[0].embedding) == pytest.approx(1.0, abs=1e-5)
    assert result.usage.prompt_tokens > 0 and result.model == "text-embedding-3-small"
    assert fake_openai.calls_to(EMBEDDINGS)[0].params["input"][2] == "quarterly tax forms"


async def test_fake_embeddings_base64_pinned_and_failures(fake_openai: FakeOpenAI) -> None:
    pinned = [0.0] * 1535 + [1.0]
    fake_openai.set_embedding("text-embedding-3-small", "pinned", pinned)
    body = {"model": "text-embedding-3-small", "input": "pinned", "encoding_format": "base64"}
    encoded = (await post_openai(fake_openai, "/embeddings", body)).json()["data"][0]["embedding"]
    assert list(struct.unpack("<1536f", base64.b64decode(encoded))) == pinned
    fake_openai.fail_next(EMBEDDINGS, OpenAIFailure.rate_limited(retry_after=2))
    response = await post_openai(fake_openai, "/embeddings", body)
    assert response.status_code == 429 and response.headers["retry-after"] == "2"


BAD_EMBEDDINGS: list[tuple[str, dict[str, Any], int, str]] = [
    ("missing input", {"model": "text-embedding-3-small"}, 400, "'input'"),
    ("empty string", {"model": "text-embedding-3-small", "input": ""}, 400, "'$.input' is invalid"),
    ("empty list", {"model": "text-embedding-3-small", "input": []}, 400, "'$.input' is invalid"),
    ("not strings", {"model": "text-embedding-3-small", "input": [1, 2]}, 400, "is invalid"),
    ("too many", {"model": "text-embedding-3-small", "input": ["a"] * 2049}, 400, "too long"),
    (
        "too long",
        {"model": "text-embedding-3-small", "input": "word " * 7000},
        400,
        "maximum context length is 8192 tokens",
    ),
    ("unknown model", {"model": "text-embedding-4", "input": "a"}, 404, "does not exist"),
    ("missing model", {"input": "a"}, 400, "you must provide a model parameter"),
    (
        "dimensions on ada",
        {"model": "text-embedding-ada-002", "input": "a", "dimensions": 8},
        400,
        "does not support specifying dimensions",
    ),
    (
        "too many dimensions",
        {"model": "text-embedding-3-small", "input": "a", "dimensions": 4096},
        400,
        "between 1 and 1536",
    ),
    (
        "bad format",
        {"model": "text-embedding-3-small", "input": "a", "encoding_format": "hex"},
        400,
        "Supported values are: 'float' and 'base64'",
    ),
    (
        "unknown field",
        {"model": "text-embedding-3-small", "input": "a", "colour": 1},
        400,
        "Unrecognized request argument",
    ),
]


@pytest.mark.parametrize(
    ("case", "payload", "status", "text"), BAD_EMBEDDINGS, ids=[c[0] for c in BAD_EMBEDDINGS]
)
async def test_fake_embeddings_rejects(
    fake_openai: FakeOpenAI, case: str, payload: dict[str, Any], status: int, text: str
) -> None:
    response = await post_openai(fake_openai, "/embeddings", payload)
    assert response.status_code == status and text in response.json()["error"]["message"]
