"""The fake Anthropic Messages API is strict: it rejects what the real API rejects (direct httpx
calls), answers in the API's shapes, and plays its scripts (replies, failures, slowness)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import trio

from fakes.anthropic_api import (
    DEFAULT_API_KEY,
    Failure,
    FakeAnthropic,
    Reply,
    run_fake_anthropic,
)

MODEL = "claude-haiku-4-5"
HEADERS = {"x-api-key": DEFAULT_API_KEY, "anthropic-version": "2023-06-01"}
TOOL = {
    "name": "search_entries",
    "description": "Search the journal.",
    "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}},
}


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with run_fake_anthropic() as server:
        yield server


async def post(
    fake: FakeAnthropic, body: Any, headers: dict[str, str] | None = None, **options: Any
) -> httpx.Response:
    async with httpx.AsyncClient(base_url=fake.base_url, timeout=10) as client:
        if "content" not in options:
            options["json"] = body
        return await client.post(
            "/v1/messages", headers=HEADERS if headers is None else headers, **options
        )


def body(messages: list[dict[str, Any]] | None = None, **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 256,
        "messages": messages if messages is not None else [{"role": "user", "content": "hi"}],
    }
    out.update(fields)
    return out


def tool_use(tid: str = "toolu_01A", name: str = "search_entries") -> dict[str, Any]:
    return {"type": "tool_use", "id": tid, "name": name, "input": {"query": "sleep"}}


def tool_result(tid: str = "toolu_01A", content: Any = "3 entries") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tid, "content": content}


def chain(
    *user_blocks: dict[str, Any], assistant: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "How did I sleep?"},
        {"role": "assistant", "content": assistant or [tool_use()]},
        {"role": "user", "content": list(user_blocks)},
    ]


def error_of(response: httpx.Response) -> tuple[int, str, str]:
    payload = response.json()
    assert payload["type"] == "error" and set(payload) == {"type", "error"}
    assert set(payload["error"]) == {"type", "message"}
    return response.status_code, payload["error"]["type"], payload["error"]["message"]


# --- happy path --------------------------------------------------------------------------------


async def test_valid_request_gets_a_message(fake: FakeAnthropic) -> None:
    fake.queue_text("Hello!", input_tokens=12, output_tokens=3)
    response = await post(fake, body(system="You are kind.", tools=[TOOL]))
    assert response.status_code == 200
    assert response.headers["request-id"].startswith("req_")
    message = response.json()
    assert message["type"] == "message" and message["role"] == "assistant"
    assert message["id"].startswith("msg_") and message["model"] == MODEL
    assert message["content"] == [{"type": "text", "text": "Hello!"}]
    assert message["stop_reason"] == "end_turn" and message["stop_sequence"] is None
    assert message["usage"]["input_tokens"] == 12 and message["usage"]["output_tokens"] == 3
    [request] = fake.requests
    assert request.authorized and request.status == 200
    assert request.body["system"] == "You are kind." and request.tools == [TOOL]
    assert "x-api-key" not in request.headers and "authorization" not in request.headers


async def test_default_reply_and_estimated_usage(fake: FakeAnthropic) -> None:
    message = (await post(fake, body())).json()
    assert message["content"] == [{"type": "text", "text": fake.default_text}]
    assert message["usage"]["input_tokens"] >= 1 and message["usage"]["output_tokens"] >= 1


async def test_tool_use_chain_round_trip(fake: FakeAnthropic) -> None:
    tid = fake.queue_tool_use("search_entries", {"query": "sleep"}, text="Let me look.")
    first = (
        await post(fake, body([{"role": "user", "content": "How did I sleep?"}], tools=[TOOL]))
    ).json()
    assert first["stop_reason"] == "tool_use"
    assert first["content"] == [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": tid, "name": "search_entries", "input": {"query": "sleep"}},
    ]
    fake.queue_text("Badly on Monday.")
    messages = [
        {"role": "user", "content": "How did I sleep?"},
        {"role": "assistant", "content": first["content"]},
        {"role": "user", "content": [tool_result(tid), {"type": "text", "text": "thanks"}]},
    ]
    second = await post(fake, body(messages, tools=[TOOL]))
    assert second.status_code == 200 and second.json()["content"][0]["text"] == "Badly on Monday."


async def test_parallel_tool_uses_and_rich_tool_results(fake: FakeAnthropic) -> None:
    messages = chain(
        tool_result("toolu_01B", [{"type": "text", "text": "none"}]),
        {**tool_result("toolu_01A"), "is_error": True},
        assistant=[
            {"type": "text", "text": "Checking."},
            tool_use("toolu_01A"),
            tool_use("toolu_01B"),
        ],
    )
    assert (await post(fake, body(messages, tools=[TOOL]))).status_code == 200


async def test_final_assistant_prefill_is_allowed(fake: FakeAnthropic) -> None:
    messages = [{"role": "user", "content": "Pick A or B"}, {"role": "assistant", "content": "("}]
    assert (await post(fake, body(messages))).status_code == 200


async def test_system_as_text_blocks(fake: FakeAnthropic) -> None:
    system = [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    assert (await post(fake, body(system=system))).status_code == 200


async def test_bearer_auth_of_the_2x_sdk_is_accepted(fake: FakeAnthropic) -> None:
    headers = {"authorization": f"Bearer {DEFAULT_API_KEY}", "anthropic-version": "2026-10-21"}
    assert (await post(fake, body(), headers)).status_code == 200


async def test_the_real_sdk_talks_to_the_fake(fake: FakeAnthropic) -> None:
    fake.queue_text("hi from the SDK path", input_tokens=5, output_tokens=2)
    client = fake.client()
    try:
        message = await client.messages.create(
            model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "hello"}]
        )
    finally:
        await client.close()
    assert message.content[0].type == "text" and message.usage.output_tokens == 2


# --- auth and headers --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "status", "kind", "text"),
    [
        ({"anthropic-version": "2023-06-01"}, 401, "authentication_error", "x-api-key header"),
        (
            {"x-api-key": "sk-ant-wrong", "anthropic-version": "2023-06-01"},
            401,
            "authentication_error",
            "invalid x-api-key",
        ),
        (
            {"authorization": "Bearer sk-ant-wrong", "anthropic-version": "2023-06-01"},
            401,
            "authentication_error",
            "invalid bearer token",
        ),
        ({"x-api-key": DEFAULT_API_KEY}, 400, "invalid_request_error", "anthropic-version"),
        (
            {"x-api-key": DEFAULT_API_KEY, "anthropic-version": "2020-01-01"},
            400,
            "invalid_request_error",
            "invalid version",
        ),
    ],
)
async def test_auth_and_version_headers(
    fake: FakeAnthropic, headers: dict[str, str], status: int, kind: str, text: str
) -> None:
    code, error_type, message = error_of(await post(fake, body(), headers))
    assert (code, error_type) == (status, kind) and text in message
    assert "sk-ant-wrong" not in json.dumps(fake.requests[0].headers)


async def test_unknown_path_is_a_not_found_error(fake: FakeAnthropic) -> None:
    async with httpx.AsyncClient(base_url=fake.base_url) as client:
        response = await client.post("/v1/complete", headers=HEADERS, json={})
    assert error_of(response)[:2] == (404, "not_found_error")


async def test_body_must_be_json(fake: FakeAnthropic) -> None:
    bad = await post(
        fake, None, content=b"{not json", headers={**HEADERS, "content-type": "application/json"}
    )
    assert error_of(bad)[:2] == (400, "invalid_request_error")
    form = await post(fake, None, content=b"a=1", headers={**HEADERS, "content-type": "text/plain"})
    assert "application/json" in error_of(form)[2]


# --- strict validation -------------------------------------------------------------------------

USER = {"role": "user", "content": "hi"}
ASSISTANT = {"role": "assistant", "content": "hello"}

BAD_BODIES: list[tuple[str, dict[str, Any], str]] = [
    ("missing max_tokens", {"model": MODEL, "messages": [USER]}, "max_tokens: Field required"),
    ("max_tokens zero", body(max_tokens=0), "greater than or equal to 1"),
    ("max_tokens as text", body(max_tokens="100"), "max_tokens: Input should be a valid integer"),
    ("max_tokens over the cap", body(max_tokens=64_001), "maximum allowed number of output"),
    ("missing model", {"max_tokens": 10, "messages": [USER]}, "model: Field required"),
    ("missing messages", {"model": MODEL, "max_tokens": 10}, "messages: Field required"),
    ("unknown field", body(colour="red"), "colour: Extra inputs are not permitted"),
    ("no messages", body([]), "at least one message"),
    ("first message assistant", body([ASSISTANT, USER]), 'first message must use the "user" role'),
    ("two user turns", body([USER, USER]), 'multiple "user" roles in a row'),
    (
        "two assistant turns",
        body([USER, ASSISTANT, ASSISTANT]),
        'multiple "assistant" roles in a row',
    ),
    (
        "system role in messages",
        body([{"role": "system", "content": "x"}, USER]),
        "Input should be 'user' or 'assistant'",
    ),
    ("extra message field", body([{**USER, "name": "bob"}]), "Extra inputs are not permitted"),
    ("empty content", body([{"role": "user", "content": ""}]), "non-empty content"),
    ("empty content list", body([{"role": "user", "content": []}]), "non-empty content"),
    (
        "empty text block",
        body([{"role": "user", "content": [{"type": "text", "text": ""}]}]),
        "text content blocks must be non-empty",
    ),
    (
        "blank text block",
        body([{"role": "user", "content": [{"type": "text", "text": " \n"}]}]),
        "non-whitespace text",
    ),
    (
        "unknown block type",
        body([{"role": "user", "content": [{"type": "video"}]}]),
        "Input tag 'video' found using 'type' does not match",
    ),
    (
        "tool_use in a user message",
        body([{"role": "user", "content": [tool_use()]}], tools=[TOOL]),
        "tool_use blocks can only be in assistant messages",
    ),
    (
        "tool_result in an assistant message",
        body([USER, {"role": "assistant", "content": [tool_result()]}]),
        "tool_result blocks can only be in user messages",
    ),
    (
        "tool_use without tool_result",
        body(chain({"type": "text", "text": "ok"}), tools=[TOOL]),
        "`tool_use` ids were found without `tool_result` blocks immediately after: toolu_01A",
    ),
    (
        "one of two tool_uses answered",
        body(
            chain(
                tool_result("toolu_01A"), assistant=[tool_use("toolu_01A"), tool_use("toolu_01B")]
            ),
            tools=[TOOL],
        ),
        "immediately after: toolu_01B",
    ),
    (
        "tool_result after text",
        body(chain({"type": "text", "text": "here"}, tool_result()), tools=[TOOL]),
        "immediately after: toolu_01A",
    ),
    (
        "tool_use left dangling at the end",
        body([USER, {"role": "assistant", "content": [tool_use()]}], tools=[TOOL]),
        "immediately after: toolu_01A",
    ),
    (
        "tool_result for an unknown id",
        body(chain(tool_result(), tool_result("toolu_01Z")), tools=[TOOL]),
        "unexpected `tool_use_id` found in `tool_result` blocks: toolu_01Z",
    ),
    (
        "tool_result in the first message",
        body([{"role": "user", "content": [tool_result()]}]),
        "unexpected `tool_use_id`",
    ),
    (
        "tool_result answering an older turn",
        body(
            [*chain(tool_result()), ASSISTANT, {"role": "user", "content": [tool_result()]}],
            tools=[TOOL],
        ),
        "unexpected `tool_use_id`",
    ),
    (
        "duplicate tool_result",
        body(chain(tool_result(), tool_result()), tools=[TOOL]),
        "exactly one `tool_result`",
    ),
    (
        "duplicate tool_use ids",
        body(
            [
                *chain(tool_result()),
                {"role": "assistant", "content": [tool_use()]},
                {"role": "user", "content": [tool_result()]},
            ],
            tools=[TOOL],
        ),
        "`tool_use` ids must be unique",
    ),
    (
        "bad tool_use id",
        body(chain(tool_result("toolu 1"), assistant=[tool_use("toolu 1")]), tools=[TOOL]),
        "String should match pattern",
    ),
    (
        "tool_use input not an object",
        body(chain(tool_result(), assistant=[{**tool_use(), "input": "sleep"}]), tools=[TOOL]),
        "tool_use.input: Input should be a valid dictionary",
    ),
    (
        "tool name with a space",
        body(tools=[{**TOOL, "name": "search entries"}]),
        "tools.0.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'",
    ),
    ("tool name too long", body(tools=[{**TOOL, "name": "x" * 65}]), "String should match pattern"),
    ("duplicate tool names", body(tools=[TOOL, TOOL]), "Tool names must be unique"),
    (
        "tool without input_schema",
        body(tools=[{"name": "a", "description": "b"}]),
        "input_schema: Field required",
    ),
    (
        "input_schema not an object schema",
        body(tools=[{**TOOL, "input_schema": {"type": "string"}}]),
        "input_schema.type: Input should be 'object'",
    ),
    (
        "unknown tool field",
        body(tools=[{**TOOL, "parameters": {}}]),
        "parameters: Extra inputs are not permitted",
    ),
    ("system as a number", body(system=42), "system: Input should be a valid string"),
    (
        "tool_choice without tools",
        body(tool_choice={"type": "auto"}),
        "tool_choice may only be specified while providing tools",
    ),
    (
        "tool_choice of an unknown tool",
        body(tools=[TOOL], tool_choice={"type": "tool", "name": "nope"}),
        "not found in tools",
    ),
    ("temperature too high", body(temperature=1.5), "temperature"),
    ("stream not a boolean", body(stream="yes"), "stream: Input should be a valid boolean"),
]


@pytest.mark.parametrize(("case", "payload", "text"), BAD_BODIES, ids=[c[0] for c in BAD_BODIES])
async def test_bad_requests_are_rejected(
    fake: FakeAnthropic, case: str, payload: dict[str, Any], text: str
) -> None:
    fake.queue_text("never sent")
    code, kind, message = error_of(await post(fake, payload))
    assert (code, kind) == (400, "invalid_request_error"), message
    assert text in message
    assert fake.pending_replies == 1  # a rejected request consumes no script
    assert fake.requests[0].error == message


async def test_unknown_model_is_not_found(fake: FakeAnthropic) -> None:
    code, kind, message = error_of(await post(fake, body(model="claude-9")))
    assert (code, kind, message) == (404, "not_found_error", "model: claude-9")


async def test_any_model_when_models_is_none() -> None:
    async with run_fake_anthropic(models=None) as fake:
        assert (await post(fake, body(model="my-proxy-model", max_tokens=10**6))).status_code == 200


# --- scripted failures -------------------------------------------------------------------------


async def test_rate_limited_with_retry_after(fake: FakeAnthropic) -> None:
    fake.fail_next(Failure.rate_limited(retry_after=7), times=2)
    for _ in range(2):
        response = await post(fake, body())
        assert error_of(response)[:2] == (429, "rate_limit_error")
        assert response.headers["retry-after"] == "7"
    assert (await post(fake, body())).status_code == 200


@pytest.mark.parametrize(
    ("failure", "status", "kind"),
    [
        (Failure.overloaded(), 529, "overloaded_error"),
        (Failure.server_error(), 500, "api_error"),
        (Failure.error(403, "permission_error", "nope"), 403, "permission_error"),
    ],
)
async def test_scripted_error_statuses(
    fake: FakeAnthropic, failure: Failure, status: int, kind: str
) -> None:
    fake.fail_next(failure)
    assert error_of(await post(fake, body()))[:2] == (status, kind)


async def test_failures_apply_only_to_valid_requests(fake: FakeAnthropic) -> None:
    fake.fail_next(Failure.overloaded())
    assert (await post(fake, body(max_tokens=0))).status_code == 400
    assert (await post(fake, body(), {"anthropic-version": "2023-06-01"})).status_code == 401
    assert (await post(fake, body())).status_code == 529


async def test_slow_answer(fake: FakeAnthropic) -> None:
    fake.fail_next(Failure.slow(0.4))
    fake.queue_text("finally")
    started = trio.current_time()
    response = await post(fake, body())
    assert trio.current_time() - started >= 0.4
    assert response.json()["content"][0]["text"] == "finally"


async def test_scripted_tool_not_offered_is_loud(fake: FakeAnthropic) -> None:
    fake.queue_tool_use("delete_everything", {})
    code, _, message = error_of(await post(fake, body(tools=[TOOL])))
    assert code == 500 and "delete_everything" in message


async def test_queue_reply_raw_content_and_stop_reason(fake: FakeAnthropic) -> None:
    fake.queue_reply(Reply(({"type": "text", "text": "cut"},), "max_tokens", 4, 256))
    message = (await post(fake, body())).json()
    assert message["stop_reason"] == "max_tokens" and message["usage"]["output_tokens"] == 256
    assert [r.status for r in fake.answered] == [200]


# --- prompt caching ----------------------------------------------------------------------------

SONNET = "claude-sonnet-4-6"
EPHEMERAL = {"type": "ephemeral"}


def cached(text: str, **cc: str) -> dict[str, Any]:
    return {"type": "text", "text": text, "cache_control": {**EPHEMERAL, **cc}}


def usage_of(response: httpx.Response) -> tuple[int, int, int]:
    """(uncached input, cache read, cache write) of an answer."""
    assert response.status_code == 200, response.text
    u = response.json()["usage"]
    split = u["cache_creation"]
    assert u["cache_creation_input_tokens"] == (
        split["ephemeral_5m_input_tokens"] + split["ephemeral_1h_input_tokens"]
    )
    return u["input_tokens"], u["cache_read_input_tokens"], u["cache_creation_input_tokens"]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_breakpoint_writes_then_reads_the_prefix(fake: FakeAnthropic) -> None:
    clock = Clock()
    fake.clock = clock
    persona = "You are kind and you remember everything. " * 200  # ~2,200 tokens
    first = usage_of(await post(fake, body(model=SONNET, system=[cached(persona)])))
    uncached, read, written = first
    assert read == 0 and written > 2_000 and uncached < 50  # the user message only
    clock.now += 240  # within the 5 minutes: read, and the entry lives 5 more minutes
    second = usage_of(await post(fake, body(model=SONNET, system=[cached(persona)])))
    assert second == (uncached, written, 0)
    clock.now += 299
    assert usage_of(await post(fake, body(model=SONNET, system=[cached(persona)])))[1] == written
    # the same prefix without the breakpoint is not looked up at all
    assert usage_of(await post(fake, body(model=SONNET, system=persona)))[1:] == (0, 0)
    # a different prefix misses; the whole request's tokens add up either way
    other = usage_of(await post(fake, body(model=SONNET, system=[cached(persona + "!")])))
    assert other[1] == 0 and other[2] > 2_000
    assert [r.cache.read if r.cache else None for r in fake.answered] == [0, written, written, 0, 0]


async def test_entries_expire_by_ttl(fake: FakeAnthropic) -> None:
    clock = Clock()
    fake.clock = clock
    persona = "Stable instructions that never change. " * 150
    short = body(model=SONNET, system=[cached(persona)])
    long = body(model=SONNET, system=[cached(persona + "(long)", ttl="1h")])
    assert usage_of(await post(fake, short))[1] == 0
    assert usage_of(await post(fake, long))[1] == 0
    clock.now += 301  # past 5 minutes, within the hour
    assert usage_of(await post(fake, short))[1:][0] == 0  # expired: written again
    assert usage_of(await post(fake, long))[1] > 1_000
    clock.now += 3_601
    _, read, written = usage_of(await post(fake, long))
    assert read == 0 and written > 1_000
    split = fake.answered[-1]
    assert split.cache is not None and split.cache.write_1h == written == split.cache.write


async def test_a_prefix_below_the_model_minimum_caches_nothing(fake: FakeAnthropic) -> None:
    between = "A middling system prompt. " * 240  # ~1,500 tokens: enough for Sonnet, not Haiku
    for _ in range(2):
        assert usage_of(await post(fake, body(model=MODEL, system=[cached(between)])))[1:] == (0, 0)
    assert usage_of(await post(fake, body(model=SONNET, system=[cached(between)])))[1] == 0
    assert usage_of(await post(fake, body(model=SONNET, system=[cached(between)])))[1] > 1_000
    tiny = "Short. " * 10
    for _ in range(2):
        assert usage_of(await post(fake, body(model=SONNET, system=[cached(tiny)])))[1:] == (0, 0)


async def test_reads_the_longest_cached_prefix_and_writes_the_rest(fake: FakeAnthropic) -> None:
    """Breakpoints on tools, system and the conversation: a later request that adds messages
    reads what an earlier breakpoint stored (also up to 20 blocks back) and writes the rest."""
    fake.clock = Clock()
    tool = {**TOOL, "description": "Search the journal. " * 300, "cache_control": EPHEMERAL}
    system = [cached("Persona. " * 20)]
    history = "Earlier rows of the conversation, with their local times. " * 100
    turn1: list[dict[str, Any]] = [
        {"role": "user", "content": [cached(history), {"type": "text", "text": "Sleep?"}]}
    ]

    async def ask(messages: list[dict[str, Any]], **fields: Any) -> tuple[int, int, int]:
        fields = {"tools": [tool], "system": system, **fields}
        return usage_of(await post(fake, body(messages, model=SONNET, **fields)))

    first = await ask(turn1)
    assert first[1] == 0 and first[2] > 2_500
    turn2 = [
        *turn1,
        {"role": "assistant", "content": "Badly."},
        {"role": "user", "content": [cached("And today?")]},
    ]
    _, read, written = await ask(turn2)
    assert read == first[2] and 0 < written < 50  # only the new blocks were written
    # the next breakpoint lies 2 blocks after the last one: found by the lookback
    turn3 = [
        *turn2[:2],
        {"role": "user", "content": "And today?"},
        {"role": "assistant", "content": "Better."},
        {"role": "user", "content": [cached("Thanks.")]},
    ]
    _, read3, written3 = await ask(turn3)
    assert read3 == read + written and 0 < written3 < 50
    # without the system prompt only the tools' prefix is the same
    _, read4, written4 = await ask(turn3, system="Other.")
    assert 1_000 < read4 < first[2] and written4 > 1_000
    # changed tools: nothing after them matches either
    assert (await ask(turn1, tools=[{**tool, "description": "Changed. " * 300}]))[1] == 0


async def test_the_tools_breakpoint_alone_is_a_hit(fake: FakeAnthropic) -> None:
    fake.clock = Clock()
    tool = {**TOOL, "description": "Search the journal. " * 300, "cache_control": EPHEMERAL}
    first = usage_of(await post(fake, body(model=SONNET, tools=[tool], system="One.")))
    second = usage_of(await post(fake, body(model=SONNET, tools=[tool], system="Two.")))
    assert first[2] > 1_000 and second[1:] == (first[2], 0)


CACHE_BAD_BODIES: list[tuple[str, dict[str, Any], str]] = [
    (
        "five breakpoints",
        body(system=[cached(f"part {i}") for i in range(5)]),
        "A maximum of 4 blocks with cache_control may be provided. Found 5.",
    ),
    (
        "five across tools, system and messages",
        body(
            [{"role": "user", "content": [cached("a"), cached("b")]}],
            tools=[{**TOOL, "cache_control": EPHEMERAL}],
            system=[cached("x"), cached("y")],
        ),
        "Found 5",
    ),
    (
        "unknown cache type",
        body(system=[{"type": "text", "text": "x", "cache_control": {"type": "forever"}}]),
        "system.0.cache_control.type: Input should be 'ephemeral'",
    ),
    ("unknown ttl", body(system=[cached("x", ttl="1d")]), "Input should be '5m' or '1h'"),
    (
        "extra cache field",
        body(
            system=[{"type": "text", "text": "x", "cache_control": {**EPHEMERAL, "scope": "org"}}]
        ),
        "scope: Extra inputs are not permitted",
    ),
    (
        "1h after 5m",
        body(system=[cached("x"), cached("y", ttl="1h")]),
        "ttl='1h' cache_control block must not come after a ttl='5m'",
    ),
]


@pytest.mark.parametrize(
    ("case", "payload", "text"), CACHE_BAD_BODIES, ids=[c[0] for c in CACHE_BAD_BODIES]
)
async def test_bad_cache_control_is_rejected(
    fake: FakeAnthropic, case: str, payload: dict[str, Any], text: str
) -> None:
    code, kind, message = error_of(await post(fake, payload))
    assert (code, kind) == (400, "invalid_request_error") and text in message, message


async def test_four_breakpoints_are_fine_and_1h_before_5m_too(fake: FakeAnthropic) -> None:
    payload = body(
        [{"role": "user", "content": [cached("a")]}],
        tools=[{**TOOL, "cache_control": {**EPHEMERAL, "ttl": "1h"}}],
        system=[cached("x", ttl="1h"), cached("y")],
    )
    assert (await post(fake, payload)).status_code == 200
