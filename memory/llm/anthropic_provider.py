"""Claude through the Anthropic Messages API (the ``anthropic`` SDK, which runs under trio).

    llm = AnthropicLLM(api_key=key, db=db)
    completion = await llm.complete(system=..., messages=[Message.user("hi")], tools=[...],
                                    max_tokens=1024, purpose="agent", chat_id=42)
    await llm.aclose()

SDK retries are off (``max_retries=0``): failures surface at once as :mod:`memory.errors`
classes and the caller owns the retry policy. One ``api_usage`` row per call.

Prompt caching: the neutral ``cache`` marks (:mod:`memory.llm.protocol`) become ``cache_control``
breakpoints (``{"type": "ephemeral"}``, with ``"ttl": "1h"`` for the hour) on the tool, the
system block or the message's last content block; the usage's cache reads and writes (split by
TTL) are recorded and priced.
"""

from __future__ import annotations

import base64
import re
import warnings
from collections.abc import Sequence
from typing import Any, cast

import anthropic
import anthropic.resources.messages.messages as sdk_messages
import httpx2
from anthropic.types import Message as ApiMessage

from memory.errors import LLMError
from memory.llm.anthropic_stream import stream_message
from memory.llm.cost import DEFAULT_RATES, RateTable
from memory.llm.protocol import (
    Block,
    CacheTTL,
    Completion,
    ImageBlock,
    Message,
    OnEvent,
    StopReason,
    System,
    TextBlock,
    TokenUsage,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
)
from memory.llm.provider_calls import (
    CallContext,
    SdkErrors,
    call_and_record,
    classify_sdk_error,
    invalid_response,
    status_error,
    stream_error,
)
from memory.llm.streaming import StreamTally
from runtime.concurrency import AsyncClosing
from runtime.db import Queries
from runtime.logs import get_logger

log = get_logger(__name__)

DEFAULT_MODEL = "claude-sonnet-4-6"
PROVIDER = "anthropic"
_STOP_REASONS: dict[str | None, StopReason] = {
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
}


_DATE_SUFFIX = re.compile(r"-\d{8}$")


def end_of_life(model: str) -> str | None:
    """When the SDK says ``model`` (or its undated name) reaches its end of life; None if it
    lists no date."""
    listed: dict[str, str] = getattr(sdk_messages, "DEPRECATED_MODELS", {})
    return listed.get(model) or listed.get(_DATE_SUFFIX.sub("", model))


def cache_control(ttl: CacheTTL) -> dict[str, str]:
    """A breakpoint's ``cache_control`` (the API's default TTL is 5 minutes)."""
    return {"type": "ephemeral"} if ttl == "5m" else {"type": "ephemeral", "ttl": ttl}


def block_param(block: Block) -> dict[str, Any]:
    """One neutral block as a Messages API content block."""
    if isinstance(block, TextBlock):
        text: dict[str, Any] = {"type": "text", "text": block.text}
        if block.cache is not None:
            text["cache_control"] = cache_control(block.cache)
        return text
    if isinstance(block, ToolUseBlock):
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": dict(block.input)}
    if isinstance(block, ImageBlock):
        data = base64.b64encode(block.data).decode("ascii")
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": block.media_type, "data": data},
        }
    param: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": block.tool_use_id,
        "content": block.content,
    }
    if block.is_error:
        param["is_error"] = True
    return param


def message_params(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Neutral messages as Messages API messages.

    Blank text blocks are dropped (the API rejects them) and a user message's tool results
    are put first (the API requires them before any text).
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        blocks = [
            b for b in message.blocks if not (isinstance(b, TextBlock) and not b.text.strip())
        ]
        results = [b for b in blocks if isinstance(b, ToolResultBlock)]
        ordered = results + [b for b in blocks if not isinstance(b, ToolResultBlock)]
        content = [block_param(b) for b in ordered]
        if message.cache is not None and content:
            content[-1]["cache_control"] = cache_control(message.cache)
        out.append({"role": message.role, "content": content})
    return out


def system_param(system: System) -> str | list[dict[str, Any]]:
    """The system prompt: a string as is, blocks as text blocks (blank ones dropped; a blank
    block's breakpoint moves to the block before it)."""
    if isinstance(system, str):
        return system
    out: list[dict[str, Any]] = []
    for block in system:
        if block.text.strip():
            out.append(block_param(block))
        elif block.cache is not None and out and "cache_control" not in out[-1]:
            out[-1]["cache_control"] = cache_control(block.cache)
    return out


def tool_params(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Neutral tool specs as Messages API tools (``input_schema``)."""
    out: list[dict[str, Any]] = []
    for t in tools:
        tool: dict[str, Any] = {
            "name": t.name,
            "description": t.description,
            "input_schema": dict(t.input_schema),
        }
        if t.cache is not None:
            tool["cache_control"] = cache_control(t.cache)
        out.append(tool)
    return out


def _usage(raw: ApiMessage) -> TokenUsage:
    """Every prompt token as input (uncached, cache writes and reads), the cached parts, and
    the output tokens."""
    usage = raw.usage
    written = usage.cache_creation_input_tokens or 0
    read = usage.cache_read_input_tokens or 0
    split = usage.cache_creation
    written_1h = min(written, split.ephemeral_1h_input_tokens) if split is not None else 0
    return TokenUsage(
        input_tokens=usage.input_tokens + written + read,
        output_tokens=usage.output_tokens,
        cache_read_tokens=read,
        cache_write_tokens=written,
        cache_write_1h_tokens=written_1h,
    )


_SDK_ERRORS = SdkErrors(
    timeout=anthropic.APITimeoutError,
    connection=anthropic.APIConnectionError,
    validation=anthropic.APIResponseValidationError,
    base=anthropic.AnthropicError,
    # a stream's body is read outside the SDK's wrapping: a dropped connection is raw
    raw_timeout=(httpx2.TimeoutException,),
    raw_transport=(httpx2.TransportError,),
)


class AnthropicLLM(AsyncClosing):
    """:class:`memory.llm.protocol.LLM` for Claude; owns its SDK client (close it with
    ``aclose``)."""

    def __init__(
        self,
        *,
        api_key: str,
        db: Queries,
        model: str = DEFAULT_MODEL,
        base_url: str | None = None,
        timeout: float = 120.0,
        rates: RateTable = DEFAULT_RATES,
        provider: str = PROVIDER,
    ) -> None:
        if not api_key:
            raise ValueError("AnthropicLLM needs an API key")
        self.model = model
        self._db = db
        self._rates = rates
        self._ctx = CallContext(provider, model, (api_key,))
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0
        )
        ends = end_of_life(model)
        if ends:
            log.warning("llm.model_deprecated", model=model, end_of_life=ends)
        self._deprecation = re.escape(f"The model '{model}' is deprecated")

    async def complete(
        self,
        *,
        system: System,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        max_tokens: int,
        purpose: str,
        chat_id: int | None,
        on_event: OnEvent | None = None,
    ) -> Completion:
        """One Messages API call (streamed when ``on_event`` is given); raises a
        :class:`memory.errors.LLMError` subclass on failure."""
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens,
            "messages": message_params(messages),
        }
        system_value = system_param(system)
        if system_value:
            params["system"] = system_value
        if tools:
            params["tools"] = tool_params(tools)

        tally = StreamTally(on_event)

        async def send() -> ApiMessage:
            # messages.create warns (DeprecationWarning) on every call with a model it lists
            # as deprecated; we log that once, above. The filter is inserted per call (no
            # await in between): a test run's warning filters are reset per test phase.
            warnings.filterwarnings("ignore", self._deprecation, DeprecationWarning)
            if on_event is not None:
                return await stream_message(self._client, params, tally, _usage)
            return cast(ApiMessage, await self._client.messages.create(**params))

        return await call_and_record(
            self._db,
            self._ctx,
            purpose=purpose,
            chat_id=chat_id,
            rates=self._rates,
            send=send,
            classify=self._classify,
            usage=_usage,
            parse=self._parse,
            partial=tally.so_far if on_event is not None else None,
        )

    def _classify(self, exc: Exception) -> LLMError | None:
        ctx = self._ctx
        if isinstance(exc, anthropic.APIStatusError) and exc.status_code < 400:
            return stream_error(  # an ``error`` event inside a 200 stream
                ctx,
                error_type=exc.type,
                message=exc.api_message or exc.message,
                request_id=exc.request_id,
            )
        if isinstance(exc, anthropic.APIStatusError):
            return status_error(
                ctx,
                exc.status_code,
                error_type=exc.type,
                message=exc.api_message or exc.message,
                request_id=exc.request_id,
                headers=exc.response.headers,
            )
        return classify_sdk_error(ctx, exc, _SDK_ERRORS)

    def _parse(self, raw: ApiMessage) -> Completion:
        blocks: list[Block] = []
        for block in raw.content:
            if block.type == "text":
                blocks.append(TextBlock(block.text))
            elif block.type == "tool_use":
                if not isinstance(block.input, dict):
                    raise invalid_response(self._ctx, f"tool_use {block.id} input is not an object")
                blocks.append(ToolUseBlock(block.id, block.name, block.input))
            else:  # thinking, server tools: never requested, so never expected
                log.warning("llm.unexpected_block", provider=self._ctx.provider, type=block.type)
        stop = _STOP_REASONS.get(raw.stop_reason, "end_turn")
        if stop == "tool_use" and not any(isinstance(b, ToolUseBlock) for b in blocks):
            raise invalid_response(self._ctx, "stop_reason tool_use without a tool_use block")
        tokens = _usage(raw)
        return Completion(
            blocks=tuple(blocks),
            stop_reason=stop,
            input_tokens=tokens.input_tokens,
            output_tokens=tokens.output_tokens,
            model=raw.model,
            cache_read_tokens=tokens.cache_read_tokens,
            cache_write_tokens=tokens.cache_write_tokens,
        )

    async def aclose(self) -> None:
        """Close the SDK client and its connections."""
        await self._client.close()
