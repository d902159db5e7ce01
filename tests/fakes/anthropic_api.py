"""A strict fake Anthropic Messages API: quart-trio served by hypercorn on 127.0.0.1, a free port.

    async with run_fake_anthropic(api_key=KEY) as fake:
        client = anthropic.AsyncAnthropic(api_key=KEY, base_url=fake.base_url, max_retries=0)
        fake.queue_tool_use("search_entries", {"query": "sleep"}, input_tokens=900)
        fake.queue_text("You slept badly on Monday.", input_tokens=1200, output_tokens=40)
        fake.fail_next(Failure.overloaded(), times=2)
        ...
        assert fake.requests[0].body["tools"][0]["name"] == "search_entries"

``POST /v1/messages`` is validated the way the real API does: the key in ``x-api-key`` or
``Authorization: Bearer`` (the 2.x SDK's way; 401 ``authentication_error``),
``anthropic-version`` (400), a JSON object body whose UNKNOWN FIELDS
ARE REJECTED; ``model`` (404 for an unknown one), ``max_tokens`` (required, 1..the model's
output cap); ``messages`` (non-empty, first one ``user``, roles alternating, content a
non-empty string or non-empty list of known blocks, text non-empty, ``tool_use`` only from the
assistant and ``tool_result`` only from the user; every ``tool_use`` answered by a
``tool_result`` at the start of the NEXT user message, and every ``tool_result`` answering a
``tool_use`` of the message right before); ``system`` (string or text blocks); ``tools`` (names
``^[a-zA-Z0-9_-]{1,64}$`` and unique, ``input_schema`` an object schema); ``tool_choice``.
Errors have Anthropic's shape ``{"type": "error", "error": {"type", "message"}}`` and a
``request-id`` header.

Prompt caching is modelled as the real API does it. ``cache_control`` (``{"type": "ephemeral"}``
with an optional ``"ttl": "5m" | "1h"``) is accepted on tool definitions, system blocks and
message content blocks; more than 4 breakpoints, or a 1-hour one after a 5-minute one, is a
400. The request is read as one sequence of blocks (tools, then system, then each message's
content) and each breakpoint names the prefix ending at its block. A breakpoint whose prefix is
shorter than the model's minimum (1,024 tokens for Sonnet and Opus, 2,048 for Haiku; tokens
estimated as for ``input_tokens``) caches nothing. Otherwise the prefix is looked up (per API
key and model) at the breakpoint and up to 20 blocks before it: a live entry there is a read
(``cache_read_input_tokens``), and what lies between the longest read and the last breakpoint
is a write (``cache_creation_input_tokens``, split by TTL in ``cache_creation``); every
breakpoint's prefix is then stored, and a read entry refreshed, for its TTL on ``fake.clock``
(``time.monotonic`` unless a test sets another). ``input_tokens`` is what remains uncached.

Scripted answers play in order (then ``responder(body)`` when set and it answers, then
``default_text``); a scripted ``tool_use`` of a tool the
request did not offer is answered 500 (a bug in the test script, made loud). Scripted failures
(429 with ``retry-after``, 529, 500, a slow answer) apply to the next valid, authorized
requests. Every request is recorded in ``fake.requests`` (headers without the key).

``stream: true`` answers the server-sent events of the real API (:mod:`fakes.anthropic_stream`);
``fake.timing`` (:class:`fakes.sse.StreamTiming`: first-token delay, tokens per second) paces
every answer, streamed or not; ``Failure.stream_error(after, type, message)`` sends an ``error``
event mid-stream and ``Failure.dropped(after)`` drops the connection. A streamed request
records the events sent (``events``) and how the stream ended (``stream_end``). Image blocks
are checked as the API does (:mod:`fakes.images`); ``fake.images.supported = False`` plays a
model that takes no images.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import secrets
import string
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from functools import partial
from typing import Any

import anthropic
import attrs
import hypercorn.trio
import trio
from hypercorn.config import Config
from quart import Response, request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from fakes.anthropic_stream import stream_body
from fakes.images import ImageRejected, ImageRules
from fakes.sse import StreamFault, StreamTiming, pieces_in, send_stream

DEFAULT_API_KEY = "sk-ant-api03-fakeanthropic-0123456789abcdefghijklmnopqrstuvwxyzABCDEF"
#: 2026-10-21 is what the anthropic 2.x SDK sends
API_VERSIONS = frozenset({"2023-01-01", "2023-06-01", "2026-10-21"})
MAX_REQUEST_BYTES = 32 * 1024 * 1024
#: model -> its output token cap; dated snapshot names are accepted too
DEFAULT_MODELS: Mapping[str, int] = {
    "claude-sonnet-4-6": 64_000,
    "claude-sonnet-4-5": 64_000,
    "claude-sonnet-4-5-20250929": 64_000,
    "claude-sonnet-4-5-20250514": 64_000,
    "claude-haiku-4-5": 64_000,
    "claude-haiku-4-5-20251001": 64_000,
    "claude-opus-4-1": 32_000,
}
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
TOOL_USE_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
BLOCK_TYPES = (
    "text",
    "image",
    "document",
    "search_result",
    "thinking",
    "redacted_thinking",
    "tool_use",
    "tool_result",
    "server_tool_use",
    "web_search_tool_result",
)
_FIELDS = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "tools",
        "tool_choice",
        "metadata",
        "stop_sequences",
        "temperature",
        "top_p",
        "top_k",
        "stream",
        "thinking",
        "service_tier",
    }
)
_BLOCK_FIELDS: Mapping[str, frozenset[str]] = {
    "text": frozenset({"type", "text", "cache_control", "citations"}),
    "tool_use": frozenset({"type", "id", "name", "input", "cache_control"}),
    "tool_result": frozenset({"type", "tool_use_id", "content", "is_error", "cache_control"}),
}
_TOOL_FIELDS = frozenset({"name", "description", "input_schema", "cache_control", "type", "strict"})
#: prompt caching: at most this many breakpoints a request, their TTLs in seconds, how many
#: blocks before a breakpoint are looked up for a hit
MAX_CACHE_BREAKPOINTS = 4
CACHE_TTLS: Mapping[str, float] = {"5m": 300.0, "1h": 3600.0}
CACHE_LOOKBACK_BLOCKS = 20


def min_cacheable_tokens(model: str) -> int:
    """The shortest prefix a breakpoint caches: 2,048 tokens for Haiku, 1,024 otherwise."""
    return 2048 if "haiku" in model else 1024


_ID_CHARS = string.ascii_letters + string.digits


class AnthropicHttpError(Exception):
    """An error answer; raised inside handlers, rendered in Anthropic's error shape."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type = status, message, type
        self.headers = dict(headers or {})


def _bad(message: str) -> AnthropicHttpError:
    return AnthropicHttpError(400, message)


def error_response(err: AnthropicHttpError) -> Response:
    """``err`` as the API renders it."""
    body = {"type": "error", "error": {"type": err.type, "message": err.message}}
    response = Response(json.dumps(body), status=err.status, content_type="application/json")
    for name, value in err.headers.items():
        response.headers[name] = value
    return response


def new_id(prefix: str) -> str:
    """An id shaped like the API's (``toolu_01...``, ``msg_01...``, ``req_011C...``)."""
    return prefix + "".join(secrets.choice(_ID_CHARS) for _ in range(24))


@attrs.frozen
class Failure:
    """A scripted answer for ``fake.fail_next``: an error status, or a delay before answering."""

    kind: str  # "status" | "slow" | "stream"
    status: int = 0
    type: str = "api_error"
    message: str = ""
    retry_after: float | None = None
    delay: float = 0.0
    fault: StreamFault | None = None

    @classmethod
    def stream_error(
        cls, after: int = 0, type: str = "overloaded_error", message: str = "Overloaded"
    ) -> Failure:
        """A streamed answer that sends an ``error`` event after ``after`` content pieces."""
        return cls("stream", fault=StreamFault("error", after, type, message))

    @classmethod
    def dropped(cls, after: int = 0) -> Failure:
        """A streamed answer whose connection drops after ``after`` content pieces."""
        return cls("stream", fault=StreamFault("drop", after))

    @classmethod
    def rate_limited(cls, retry_after: float | None = 1) -> Failure:
        message = (
            "This request would exceed the rate limit for your organization of 30,000 input "
            "tokens per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits."
        )
        return cls("status", 429, "rate_limit_error", message, retry_after)

    @classmethod
    def overloaded(cls) -> Failure:
        return cls("status", 529, "overloaded_error", "Overloaded")

    @classmethod
    def server_error(cls, status: int = 500) -> Failure:
        return cls("status", status, "api_error", "Internal server error")

    @classmethod
    def error(cls, status: int, type: str, message: str) -> Failure:
        return cls("status", status, type, message)

    @classmethod
    def slow(cls, seconds: float) -> Failure:
        """Answer normally, but only after ``seconds``."""
        return cls("slow", delay=seconds)


@attrs.frozen
class Reply:
    """A scripted assistant answer; None tokens are estimated from the request and reply."""

    content: tuple[Mapping[str, Any], ...]
    stop_reason: str = "end_turn"
    input_tokens: int | None = None
    output_tokens: int | None = None


@attrs.define
class RecordedRequest:
    """One request as received; ``status`` is None while it runs."""

    method: str
    path: str
    time: float
    headers: dict[str, str]
    raw: bytes = b""
    body: Any = None
    authorized: bool = False
    status: int | None = None
    error_type: str | None = None
    error: str | None = None
    #: the prompt-cache accounting and the ``usage`` of an answered request
    cache: CacheUsage | None = None
    usage: dict[str, Any] | None = None
    #: a streamed answer: the events sent, and how it ended (complete, error, drop, client_gone)
    events: list[str] = attrs.Factory(list)
    stream_end: str | None = None

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body["messages"])

    @property
    def tools(self) -> list[dict[str, Any]]:
        return list(self.body.get("tools", []))


# --- validation (pure; raises AnthropicHttpError) ---------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _extra(obj: Mapping[str, Any], allowed: Iterable[str], where: str) -> None:
    for key in obj:
        if key not in allowed:
            raise _bad(f"{where}{key}: Extra inputs are not permitted")


def _check_cache_control(obj: Mapping[str, Any], where: str) -> None:
    if "cache_control" not in obj:
        return
    cc = obj["cache_control"]
    if not isinstance(cc, dict) or cc.get("type") != "ephemeral":
        raise _bad(f"{where}cache_control.type: Input should be 'ephemeral'")
    _extra(cc, ("type", "ttl"), f"{where}cache_control.")
    if "ttl" in cc and cc["ttl"] not in CACHE_TTLS:
        raise _bad(f"{where}cache_control.ttl: Input should be '5m' or '1h'")


def _check_text(block: Mapping[str, Any], where: str) -> None:
    if not isinstance(block.get("text"), str):
        raise _bad(
            f"{where}.text: Field required"
            if "text" not in block
            else f"{where}.text: Input should be a valid string"
        )
    if not block["text"]:
        raise _bad("messages: text content blocks must be non-empty")
    if not block["text"].strip():
        raise _bad("messages: text content blocks must contain non-whitespace text")


def _check_block(block: Any, role: str, where: str) -> None:
    if not isinstance(block, dict):
        raise _bad(f"{where}: Input should be a valid dictionary or object to extract fields from")
    kind = block.get("type")
    if kind not in BLOCK_TYPES:
        expected = ", ".join(f"'{t}'" for t in BLOCK_TYPES)
        raise _bad(
            f"{where}: Input tag '{kind}' found using 'type' does not match any of the "
            f"expected tags: {expected}"
        )
    if kind in _BLOCK_FIELDS:
        _extra(block, _BLOCK_FIELDS[kind], f"{where}.{kind}.")
        _check_cache_control(block, f"{where}.{kind}.")
    if kind == "text":
        _check_text(block, where)
    elif kind == "tool_use":
        if role != "assistant":
            raise _bad(f"{where}: tool_use blocks can only be in assistant messages")
        for field, kind_ok in (("id", str), ("name", str), ("input", dict)):
            if field not in block:
                raise _bad(f"{where}.tool_use.{field}: Field required")
            if not isinstance(block[field], kind_ok):
                what = "a valid string" if kind_ok is str else "a valid dictionary"
                raise _bad(f"{where}.tool_use.{field}: Input should be {what}")
        if not TOOL_USE_ID.match(block["id"]):
            raise _bad(f"{where}.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'")
    elif kind == "tool_result":
        if role != "user":
            raise _bad(f"{where}: tool_result blocks can only be in user messages")
        if not isinstance(block.get("tool_use_id"), str):
            raise _bad(f"{where}.tool_result.tool_use_id: Field required")
        content = block.get("content", "")
        if isinstance(content, list):
            for k, part in enumerate(content):
                if not isinstance(part, dict) or part.get("type") not in ("text", "image"):
                    raise _bad(f"{where}.tool_result.content.{k}: expected a text or image block")
                if part["type"] == "text":
                    _extra(part, _BLOCK_FIELDS["text"], f"{where}.tool_result.content.{k}.")
                    _check_cache_control(part, f"{where}.tool_result.content.{k}.")
                    _check_text(part, f"{where}.tool_result.content.{k}")
        elif not isinstance(content, str):
            raise _bad(f"{where}.tool_result.content: Input should be a valid string or list")
        if "is_error" in block and not isinstance(block["is_error"], bool):
            raise _bad(f"{where}.tool_result.is_error: Input should be a valid boolean")
    elif kind in ("thinking", "redacted_thinking") and role != "assistant":
        raise _bad(f"{where}: {kind} blocks can only be in assistant messages")


def _blocks_of(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    content = message["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def check_messages(messages: Any) -> None:
    """Shape, roles, alternation, block types and tool_use/tool_result pairing."""
    if not isinstance(messages, list):
        raise _bad("messages: Input should be a valid list")
    if not messages:
        raise _bad("messages: at least one message is required")
    for i, message in enumerate(messages):
        where = f"messages.{i}"
        if not isinstance(message, dict):
            raise _bad(f"{where}: Input should be a valid dictionary")
        _extra(message, ("role", "content"), f"{where}.")
        for field in ("role", "content"):
            if field not in message:
                raise _bad(f"{where}.{field}: Field required")
        role = message["role"]
        if role not in ("user", "assistant"):
            raise _bad(f"{where}.role: Input should be 'user' or 'assistant'")
        content = message["content"]
        last = i == len(messages) - 1
        if isinstance(content, str):
            if not content and not (last and role == "assistant"):
                raise _bad(
                    f"{where}: all messages must have non-empty content except for the "
                    "optional final assistant message"
                )
            continue
        if not isinstance(content, list):
            raise _bad(f"{where}.content: Input should be a valid string or list")
        if not content and not (last and role == "assistant"):
            raise _bad(
                f"{where}: all messages must have non-empty content except for the optional "
                "final assistant message"
            )
        for j, block in enumerate(content):
            _check_block(block, role, f"{where}.content.{j}")
    if messages[0]["role"] != "user":
        raise _bad('messages: first message must use the "user" role')
    for i in range(1, len(messages)):
        if messages[i]["role"] == messages[i - 1]["role"]:
            role = messages[i]["role"]
            raise _bad(
                f'messages: roles must alternate between "user" and "assistant", but found '
                f'multiple "{role}" roles in a row'
            )
    _check_pairing(messages)


def _check_pairing(messages: Sequence[Mapping[str, Any]]) -> None:
    seen: set[str] = set()
    for i, message in enumerate(messages):
        blocks = _blocks_of(message)
        if message["role"] == "assistant":
            for j, block in enumerate(blocks):
                if block["type"] == "tool_use":
                    if block["id"] in seen:
                        raise _bad(
                            f"messages.{i}.content.{j}: `tool_use` ids must be unique: "
                            f"{block['id']}"
                        )
                    seen.add(block["id"])
            continue
        previous = _blocks_of(messages[i - 1]) if i else []
        offered = [b["id"] for b in previous if b["type"] == "tool_use"]
        leading: list[str] = []  # tool results at the start of the message, "immediately after"
        for block in blocks:
            if block["type"] != "tool_result":
                break
            leading.append(block["tool_use_id"])
        missing = [tid for tid in offered if tid not in leading]
        if missing:
            raise _bad(
                f"messages.{i - 1}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                "corresponding `tool_result` block in the next message."
            )
        answered: set[str] = set()
        for j, block in enumerate(blocks):
            if block["type"] != "tool_result":
                continue
            tid = block["tool_use_id"]
            if tid not in offered:
                raise _bad(
                    f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` "
                    f"blocks: {tid}. Each `tool_result` block must have a corresponding "
                    "`tool_use` block in the previous message."
                )
            if tid in answered:
                raise _bad(
                    f"messages.{i}.content.{j}: each `tool_use` id must have exactly one "
                    f"`tool_result` block: {tid}"
                )
            answered.add(tid)
    last = messages[-1]
    dangling = [b["id"] for b in _blocks_of(last) if b["type"] == "tool_use"]
    if last["role"] == "assistant" and dangling:
        raise _bad(
            f"messages.{len(messages) - 1}: `tool_use` ids were found without `tool_result` "
            f"blocks immediately after: {', '.join(dangling)}. Each `tool_use` block must have "
            "a corresponding `tool_result` block in the next message."
        )


def check_system(system: Any) -> None:
    if isinstance(system, str):
        return
    if not isinstance(system, list):
        raise _bad("system: Input should be a valid string or a list of text blocks")
    for i, block in enumerate(system):
        if not isinstance(block, dict) or block.get("type") != "text":
            raise _bad(f"system.{i}.type: Input should be 'text'")
        _extra(block, _BLOCK_FIELDS["text"], f"system.{i}.")
        _check_cache_control(block, f"system.{i}.")
        _check_text(block, f"system.{i}")


def check_tools(tools: Any) -> list[str]:
    """The tool names, after validating each definition."""
    if not isinstance(tools, list):
        raise _bad("tools: Input should be a valid list")
    names: list[str] = []
    for i, tool in enumerate(tools):
        where = f"tools.{i}.custom"
        if not isinstance(tool, dict):
            raise _bad(f"tools.{i}: Input should be a valid dictionary")
        if tool.get("type", "custom") not in ("custom", None):
            raise _bad(f"tools.{i}: unknown tool type '{tool['type']}'")
        _extra(tool, _TOOL_FIELDS, f"{where}.")
        _check_cache_control(tool, f"{where}.")
        name = tool.get("name")
        if name is None:
            raise _bad(f"{where}.name: Field required")
        if not isinstance(name, str) or not TOOL_NAME.match(name):
            raise _bad(f"{where}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'")
        if "description" in tool and not isinstance(tool["description"], str):
            raise _bad(f"{where}.description: Input should be a valid string")
        schema = tool.get("input_schema")
        if schema is None:
            raise _bad(f"{where}.input_schema: Field required")
        if not isinstance(schema, dict):
            raise _bad(f"{where}.input_schema: Input should be a valid dictionary")
        if schema.get("type") != "object":
            raise _bad(f"{where}.input_schema.type: Input should be 'object'")
        names.append(name)
    if len(set(names)) != len(names):
        raise _bad("tools: Tool names must be unique.")
    return names


def check_tool_choice(choice: Any, names: Sequence[str] | None) -> None:
    if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none"):
        raise _bad(
            "tool_choice: Input tag found using 'type' does not match any of the expected "
            "tags: 'auto', 'any', 'tool', 'none'"
        )
    if names is None:
        raise _bad("tool_choice: tool_choice may only be specified while providing tools.")
    if choice["type"] == "tool" and choice.get("name") not in names:
        raise _bad(f"tool_choice.tool.name: Tool '{choice.get('name')}' not found in tools.")


def check_body(body: Any, models: Mapping[str, int] | None) -> list[str] | None:
    """Validate a Messages request body; the offered tool names (None without ``tools``)."""
    if not isinstance(body, dict):
        raise _bad("Input should be a valid dictionary or object to extract fields from")
    _extra(body, _FIELDS, "")
    model = body.get("model")
    if model is None:
        raise _bad("model: Field required")
    if not isinstance(model, str):
        raise _bad("model: Input should be a valid string")
    if "max_tokens" not in body:
        raise _bad("max_tokens: Field required")
    max_tokens = body["max_tokens"]
    if not _is_int(max_tokens):
        raise _bad("max_tokens: Input should be a valid integer")
    if max_tokens < 1:
        raise _bad("max_tokens: Input should be greater than or equal to 1")
    if "messages" not in body:
        raise _bad("messages: Field required")
    check_messages(body["messages"])
    if "system" in body:
        check_system(body["system"])
    names = check_tools(body["tools"]) if "tools" in body else None
    if "tool_choice" in body:
        check_tool_choice(body["tool_choice"], names)
    check_breakpoints(body)
    for field, low, high in (("temperature", 0.0, 1.0), ("top_p", 0.0, 1.0)):
        value = body.get(field)
        if value is not None and not (
            isinstance(value, int | float) and not isinstance(value, bool) and low <= value <= high
        ):
            raise _bad(f"{field}: Input should be a number between {low:g} and {high:g}")
    stops = body.get("stop_sequences", [])
    if not isinstance(stops, list) or not all(isinstance(s, str) and s.strip() for s in stops):
        raise _bad("stop_sequences: each stop sequence must be a non-empty string")
    if not isinstance(body.get("stream", False), bool):
        raise _bad("stream: Input should be a valid boolean")
    if models is not None:
        if model not in models:
            raise AnthropicHttpError(404, f"model: {model}", type="not_found_error")
        if max_tokens > models[model]:
            raise _bad(
                f"max_tokens: {max_tokens} > {models[model]}, which is the maximum allowed "
                f"number of output tokens for {model}"
            )
    return names


def _cache_controls(value: Any) -> Iterable[Mapping[str, Any]]:
    """Every ``cache_control`` in ``value``, in request order."""
    if isinstance(value, dict):
        if isinstance(value.get("cache_control"), dict):
            yield value["cache_control"]
        for key, inner in value.items():
            if key != "cache_control":
                yield from _cache_controls(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _cache_controls(inner)


def check_breakpoints(body: Mapping[str, Any]) -> None:
    """At most 4 ``cache_control`` breakpoints, no 1-hour one after a 5-minute one."""
    found = list(_cache_controls([body.get("tools"), body.get("system"), body["messages"]]))
    if len(found) > MAX_CACHE_BREAKPOINTS:
        raise _bad(
            f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {len(found)}."
        )
    ttls = [cc.get("ttl", "5m") for cc in found]
    if "5m" in ttls and "1h" in ttls[ttls.index("5m") :]:
        raise _bad(
            "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block"
        )


# --- the fake ----------------------------------------------------------------------------------


def _estimate_tokens(value: Any) -> int:
    return max(1, len(json.dumps(value, ensure_ascii=False)) // 4)


def _prompt_blocks(body: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    """The request as the cache reads it: tools, system, then every message's content blocks,
    each as its JSON (without ``cache_control``) and its breakpoint TTL (None: no breakpoint)."""
    out: list[tuple[str, str | None]] = []

    def add(block: Mapping[str, Any], prefix: str = "") -> None:
        cc = block.get("cache_control")
        plain = {k: v for k, v in block.items() if k != "cache_control"}
        ttl = cc.get("ttl", "5m") if isinstance(cc, dict) else None
        out.append((prefix + json.dumps(plain, ensure_ascii=False, sort_keys=True), ttl))

    for tool in body.get("tools") or ():
        add(tool)
    system = body.get("system")
    for block in [{"type": "text", "text": system}] if isinstance(system, str) else system or ():
        add(block)
    for message in body["messages"]:
        for block in _blocks_of(message):
            add(block, message["role"] + ":")
    return out


@attrs.frozen
class CacheUsage:
    """One request's prompt-cache accounting (the usage fields the API reports)."""

    read: int = 0
    write_5m: int = 0
    write_1h: int = 0

    @property
    def write(self) -> int:
        return self.write_5m + self.write_1h


@attrs.define
class PromptCache:
    """The fake's prompt cache: prefix hash -> (expiry, TTL) (see the module docstring)."""

    clock: Callable[[], float] = time.monotonic
    entries: dict[str, tuple[float, str]] = attrs.field(factory=dict)

    def use(self, api_key: str, model: str, body: Mapping[str, Any]) -> CacheUsage:
        blocks = _prompt_blocks(body)
        if not any(ttl for _, ttl in blocks):
            return CacheUsage()
        now = self.clock()
        self.entries = {k: v for k, v in self.entries.items() if v[0] > now}
        digest = hashlib.sha256(f"{api_key}\0{model}".encode())
        keys: list[str] = []
        tokens: list[int] = []
        chars = 0
        for text, _ in blocks:
            digest.update(b"\0" + text.encode())
            keys.append(digest.hexdigest())
            chars += len(text)
            tokens.append(chars // 4)
        floor = min_cacheable_tokens(model)
        points = [i for i, (_, ttl) in enumerate(blocks) if ttl and tokens[i] >= floor]
        hit = -1
        for point in points:
            for j in range(point, max(-1, point - CACHE_LOOKBACK_BLOCKS - 1), -1):
                if tokens[j] < floor or j <= hit:
                    break
                if keys[j] in self.entries:
                    hit = j
                    break
        read = tokens[hit] if hit >= 0 else 0
        if hit >= 0:  # a read refreshes the entry for its TTL
            ttl = self.entries[keys[hit]][1]
            self.entries[keys[hit]] = (now + CACHE_TTLS[ttl], ttl)
        written = {"5m": 0, "1h": 0}
        start = read
        for point in points:
            ttl = blocks[point][1] or "5m"
            if point > hit:
                written[ttl] += tokens[point] - start
                start = tokens[point]
            elif keys[point] not in self.entries:
                continue  # a shorter prefix than the one read, not cached: stays so
            self.entries[keys[point]] = (now + CACHE_TTLS[ttl], ttl)
        return CacheUsage(read, written["5m"], written["1h"])


class FakeAnthropic:
    """State and behaviour of the fake; build it with ``run_fake_anthropic``."""

    def __init__(
        self, api_key: str = DEFAULT_API_KEY, models: Mapping[str, int] | None = DEFAULT_MODELS
    ) -> None:
        self.api_key = api_key
        self.models = None if models is None else dict(models)
        self.base_url = ""  # http://127.0.0.1:<port> once serving (the SDK adds /v1/messages)
        self.requests: list[RecordedRequest] = []
        self.default_text = "Hello from the fake Claude."
        #: answers a request when nothing is queued (None: fall through to ``default_text``)
        self.responder: Callable[[Mapping[str, Any]], Reply | None] | None = None
        self._replies: deque[Reply] = deque()
        self._failures: deque[Failure] = deque()
        self._request_ids = itertools.count(1)
        self.cache = PromptCache()
        #: pacing of every answer (streamed or not); the latency bench sets 0.8 s and 60/s
        self.timing = StreamTiming()
        #: what images the model takes (``images.supported = False``: a text-only model)
        self.images = ImageRules()
        self.app = self._build_app()

    # --- scripting and inspection --------------------------------------------------------------

    def queue_reply(self, reply: Reply) -> None:
        """The next successful request is answered with ``reply`` (FIFO; then default text)."""
        self._replies.append(reply)

    def queue_text(
        self,
        text: str,
        *,
        stop_reason: str = "end_turn",
        input_tokens: int | None = None,
        output_tokens: int | None = None,
    ) -> None:
        """A plain text answer."""
        self.queue_reply(
            Reply(({"type": "text", "text": text},), stop_reason, input_tokens, output_tokens)
        )

    def queue_tool_uses(
        self,
        calls: Sequence[tuple[str, Mapping[str, Any]]],
        *,
        text: str | None = None,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
    ) -> list[str]:
        """An answer calling the tools ``calls`` ((name, input) pairs); their tool_use ids."""
        ids = [new_id("toolu_01") for _ in calls]
        content: list[Mapping[str, Any]] = [{"type": "text", "text": text}] if text else []
        content += [
            {"type": "tool_use", "id": tid, "name": name, "input": dict(args)}
            for tid, (name, args) in zip(ids, calls, strict=True)
        ]
        self.queue_reply(Reply(tuple(content), "tool_use", input_tokens, output_tokens))
        return ids

    def queue_tool_use(
        self, name: str, input: Mapping[str, Any], *, text: str | None = None, **tokens: int
    ) -> str:
        """An answer calling one tool; its tool_use id."""
        return self.queue_tool_uses([(name, input)], text=text, **tokens)[0]

    def fail_next(self, failure: Failure, times: int = 1) -> None:
        """The next ``times`` valid, authorized requests get ``failure``."""
        self._failures.extend([failure] * times)

    @property
    def clock(self) -> Callable[[], float]:
        """The prompt cache's clock (seconds; ``time.monotonic`` unless set)."""
        return self.cache.clock

    @clock.setter
    def clock(self, clock: Callable[[], float]) -> None:
        self.cache.clock = clock

    @property
    def pending_replies(self) -> int:
        return len(self._replies)

    @property
    def answered(self) -> list[RecordedRequest]:
        """The requests answered 200."""
        return [r for r in self.requests if r.status == 200]

    def client(self, *, api_key: str | None = None, **options: Any) -> anthropic.AsyncAnthropic:
        """An SDK client for this fake (no SDK retries unless given); close it when done."""
        options.setdefault("max_retries", 0)
        return anthropic.AsyncAnthropic(
            api_key=api_key or self.api_key, base_url=self.base_url, **options
        )

    # --- serving -------------------------------------------------------------------------------

    def _build_app(self) -> QuartTrio:
        app = QuartTrio("fake-anthropic")
        app.config["MAX_CONTENT_LENGTH"] = MAX_REQUEST_BYTES

        @app.route("/v1/messages", methods=["POST"])
        async def messages() -> Response:
            return await self._serve()

        @app.errorhandler(HTTPException)
        async def http_error(exc: HTTPException) -> Response:
            with suppress(HTTPException):
                await request.get_data()
            return self._finish(error_response(self._from_http_exception(exc)))

        return app

    @staticmethod
    def _from_http_exception(exc: HTTPException) -> AnthropicHttpError:
        status = exc.code or 500
        if status == 413:
            return AnthropicHttpError(
                413,
                "Request exceeds the maximum allowed number of bytes.",
                type="request_too_large",
            )
        if status in (404, 405):
            return AnthropicHttpError(404, "Not Found", type="not_found_error")
        return AnthropicHttpError(status, exc.description or "Bad request")

    def _finish(self, response: Response) -> Response:
        response.headers["request-id"] = f"req_011C{next(self._request_ids):06d}{new_id('')[:12]}"
        return response

    async def _serve(self) -> Response:
        headers = {
            k.lower(): v
            for k, v in request.headers.items()
            if k.lower() not in ("x-api-key", "authorization")
        }
        call = RecordedRequest(request.method, request.path, trio.current_time(), headers)
        self.requests.append(call)
        try:
            # Read the whole body before answering, so the keep-alive connection stays usable.
            call.raw = await request.get_data(True, False, False)
            self._authorize(call)
            response = await self._messages(call)
        except HTTPException as exc:
            err = self._from_http_exception(exc)
            call.error_type, call.error = err.type, err.message
            response = error_response(err)
        except AnthropicHttpError as err:
            call.error_type, call.error = err.type, err.message
            response = error_response(err)
        call.status = response.status_code
        return self._finish(response)

    def _authorize(self, call: RecordedRequest) -> None:
        """401 unless ``x-api-key`` or ``Authorization: Bearer`` (the 2.x SDK) is the key."""
        key = request.headers.get("x-api-key")
        wrong = "invalid x-api-key"
        if key is None:
            scheme, _, token = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                key, wrong = token.strip(), "invalid bearer token"
        if not key:
            raise AnthropicHttpError(
                401, "x-api-key header is required", type="authentication_error"
            )
        if not secrets.compare_digest(key.encode(), self.api_key.encode()):
            raise AnthropicHttpError(401, wrong, type="authentication_error")
        call.authorized = True
        version = request.headers.get("anthropic-version")
        if not version:
            raise _bad("anthropic-version: header is required")
        if version not in API_VERSIONS:
            raise _bad(f"anthropic-version: invalid version '{version}'")

    async def _messages(self, call: RecordedRequest) -> Response:
        ctype = request.headers.get("content-type", "")
        if not ctype.lower().startswith("application/json"):
            raise _bad(f"Invalid content type: {ctype or 'none'}; expected application/json")
        try:
            call.body = json.loads(call.raw)
        except ValueError as exc:
            raise _bad(f"There was an error parsing the body of your request: {exc}") from None
        names = check_body(call.body, self.models)
        try:
            self.images.check_anthropic(call.body["messages"])
        except ImageRejected as exc:
            raise _bad(exc.message) from None
        streamed = call.body.get("stream") is True
        failure = self._failures.popleft() if self._failures else None
        fault = failure.fault if failure is not None else None
        if fault is not None and not streamed:
            raise AnthropicHttpError(500, "fake: a stream failure for a request without stream")
        if failure is not None and failure.kind == "slow":
            await trio.sleep(failure.delay)
        elif failure is not None and failure.kind != "stream":
            headers = {}
            if failure.retry_after is not None:
                headers["retry-after"] = f"{failure.retry_after:g}"
            raise AnthropicHttpError(
                failure.status, failure.message, type=failure.type, headers=headers
            )
        reply = self._replies.popleft() if self._replies else None
        if reply is None and self.responder is not None:
            reply = self.responder(call.body)
        if reply is None:
            reply = Reply(({"type": "text", "text": self.default_text},))
        for block in reply.content:
            if block["type"] == "tool_use" and block["name"] not in (names or ()):
                raise AnthropicHttpError(
                    500,
                    f"fake: scripted tool_use {block['name']!r} is not among the request's "
                    f"tools {names}",
                    type="api_error",
                )
        body = call.body
        prompt_tokens = reply.input_tokens  # scripted: the whole prompt, cached parts included
        if prompt_tokens is None:
            prompt_tokens = _estimate_tokens(
                [body.get("system"), body["messages"], body.get("tools")]
            )
        cached = self.cache.use(self.api_key, body["model"], body)
        read = min(cached.read, prompt_tokens)
        write_1h = min(cached.write_1h, prompt_tokens - read)
        write_5m = min(cached.write_5m, prompt_tokens - read - write_1h)
        call.cache = CacheUsage(read, write_5m, write_1h)
        input_tokens = prompt_tokens - read - write_5m - write_1h
        output_tokens = reply.output_tokens
        if output_tokens is None:
            output_tokens = _estimate_tokens(list(reply.content))
        usage = {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": write_5m + write_1h,
            "cache_read_input_tokens": read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": write_5m,
                "ephemeral_1h_input_tokens": write_1h,
            },
            "service_tier": "standard",
        }
        call.usage = usage
        payload = {
            "id": new_id("msg_01"),
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": [dict(b) for b in reply.content],
            "stop_reason": reply.stop_reason,
            "stop_sequence": None,
            "usage": usage,
        }
        items = stream_body(payload, fault)
        if streamed:
            return Response(
                send_stream(call, items, self.timing),
                content_type="text/event-stream; charset=utf-8",
            )
        await trio.sleep_until(self.timing.at(call.time, pieces_in(items)))
        return Response(json.dumps(payload), content_type="application/json")


@asynccontextmanager
async def run_fake_anthropic(
    api_key: str = DEFAULT_API_KEY,
    models: Mapping[str, int] | None = DEFAULT_MODELS,
    *,
    fake: FakeAnthropic | None = None,
) -> AsyncIterator[FakeAnthropic]:
    """Serve a fresh FakeAnthropic (or ``fake``, e.g. a subclass) on 127.0.0.1 (free port)
    for the duration of the block.

    ``models`` maps the accepted models to their output caps (None: any model, no cap).
    """
    fake = fake if fake is not None else FakeAnthropic(api_key, models)
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 0.5
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(partial(hypercorn.trio.serve, fake.app, config))
        fake.base_url = binds[0]
        try:
            yield fake
        finally:
            nursery.cancel_scope.cancel()
