"""Any OpenAI-compatible chat completions endpoint (OpenAI, vLLM, llama.cpp, Ollama...).

    llm = OpenAICompatibleLLM(base_url="http://localhost:11434/v1", api_key="unused",
                              model="qwen2.5:7b", db=db, provider="local")

Function calling maps to the neutral types: an assistant turn's ``tool_calls`` <->
:class:`ToolUseBlock` (arguments JSON-encoded), each :class:`ToolResultBlock` <-> one ``tool``
role message (sent before any user text of the same turn; ``is_error`` results are prefixed
``Error:``, the API having no such flag). SDK retries are off; one ``api_usage`` row per call.

Prompt caching: the neutral ``cache`` marks are ignored (OpenAI and most compatible servers
cache a repeated prompt prefix by themselves); ``prompt_tokens_details.cached_tokens``, when the
server reports it, is recorded as the prompt's cache reads.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any, Literal, cast

import openai
from openai.types.chat import ChatCompletion

from memory.errors import LLMError
from memory.llm.cost import DEFAULT_RATES, RateTable
from memory.llm.openai_stream import (
    Answer,
    answer_of,
    prompt_estimate,
    refuses_stream_options,
    stream_answer,
    usage_of,
)
from memory.llm.protocol import (
    Block,
    Completion,
    ImageBlock,
    Message,
    OnEvent,
    StopReason,
    System,
    TextBlock,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
    system_text,
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

PROVIDER = "openai"
ERROR_PREFIX = "Error: "
_STOP_REASONS: dict[str | None, StopReason] = {"tool_calls": "tool_use", "length": "max_tokens"}


def chat_messages(system: System, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The system prompt (blocks joined) and neutral messages as chat completions messages."""
    out: list[dict[str, Any]] = []
    text = system_text(system)
    if text:
        out.append({"role": "system", "content": text})
    for message in messages:
        text = message.text
        if message.role == "assistant":
            calls = [
                {
                    "id": b.id,
                    "type": "function",
                    "function": {"name": b.name, "arguments": json.dumps(dict(b.input))},
                }
                for b in message.blocks
                if isinstance(b, ToolUseBlock)
            ]
            turn: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
            if calls:
                turn["tool_calls"] = calls
            out.append(turn)
            continue
        for block in message.blocks:
            if isinstance(block, ToolResultBlock):
                content = ERROR_PREFIX + block.content if block.is_error else block.content
                out.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": content})
        images = [b for b in message.blocks if isinstance(b, ImageBlock)]
        if images:
            parts: list[dict[str, Any]] = [image_part(b) for b in images]
            if text:
                parts.append({"type": "text", "text": text})
            out.append({"role": "user", "content": parts})
        elif text or not any(isinstance(b, ToolResultBlock) for b in message.blocks):
            out.append({"role": "user", "content": text})
    return out


def image_part(block: ImageBlock) -> dict[str, Any]:
    """An image as an ``image_url`` content part (a base64 ``data:`` URL)."""
    data = base64.b64encode(block.data).decode("ascii")
    return {"type": "image_url", "image_url": {"url": f"data:{block.media_type};base64,{data}"}}


def function_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Neutral tool specs as ``function`` tools (``parameters``)."""
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": dict(t.input_schema),
            },
        }
        for t in tools
    ]


_SDK_ERRORS = SdkErrors(
    timeout=openai.APITimeoutError,
    connection=openai.APIConnectionError,
    validation=openai.APIResponseValidationError,
    base=openai.OpenAIError,
)


class OpenAICompatibleLLM(AsyncClosing):
    """:class:`memory.llm.protocol.LLM` over chat completions; owns its SDK client (``aclose`` it).

    ``api_key`` may be a dummy for local servers; ``provider`` names the ``api_usage`` rows
    (``openai``, ``local``...). ``max_tokens_param`` is ``max_completion_tokens`` for OpenAI's
    reasoning models, ``max_tokens`` (the most widely supported) otherwise.
    """

    def __init__(
        self,
        *,
        api_key: str,
        model: str,
        db: Queries,
        base_url: str | None = None,
        timeout: float = 120.0,
        rates: RateTable = DEFAULT_RATES,
        provider: str = PROVIDER,
        max_tokens_param: Literal["max_tokens", "max_completion_tokens"] = "max_tokens",
    ) -> None:
        if not api_key:
            raise ValueError("OpenAICompatibleLLM needs an API key (any string for local servers)")
        self.model = model
        self._db = db
        self._rates = rates
        self._max_tokens_param = max_tokens_param
        self._options = True  # False once the server refused stream_options
        self._ctx = CallContext(provider, model, (api_key,))
        self._client = openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0
        )

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
        """One chat completions call (streamed when ``on_event`` is given); raises a
        :class:`memory.errors.LLMError` on failure."""
        params: dict[str, Any] = {
            "model": self.model,
            "messages": chat_messages(system, messages),
            self._max_tokens_param: max_tokens,
        }
        if tools:  # the API rejects an empty tools array
            params["tools"] = function_tools(tools)

        if on_event is not None:
            tally = StreamTally(on_event, prompt_estimate=prompt_estimate(params))

            async def stream() -> Answer:
                try:
                    return await stream_answer(self._client, params, tally, options=self._options)
                except openai.BadRequestError as exc:
                    if not (self._options and refuses_stream_options(exc)):
                        raise
                self._options = False  # for this client's lifetime: tokens estimated
                log.warning("llm.stream_options_refused", model=self.model)
                return await stream_answer(self._client, params, tally, options=False)

            return await call_and_record(
                self._db,
                self._ctx,
                purpose=purpose,
                chat_id=chat_id,
                rates=self._rates,
                send=stream,
                classify=self._classify,
                usage=lambda answer: answer.usage,
                parse=self._parse,
                partial=tally.so_far,
            )

        async def send() -> ChatCompletion:
            return cast(ChatCompletion, await self._client.chat.completions.create(**params))

        return await call_and_record(
            self._db,
            self._ctx,
            purpose=purpose,
            chat_id=chat_id,
            rates=self._rates,
            send=send,
            classify=self._classify,
            usage=lambda raw: usage_of(raw.usage),
            parse=lambda raw: self._parse(answer_of(raw)),
        )

    def _classify(self, exc: Exception) -> LLMError | None:
        ctx = self._ctx
        if isinstance(exc, openai.APIStatusError):
            body = exc.body if isinstance(exc.body, dict) else {}
            message = body.get("message")
            return status_error(
                ctx,
                exc.status_code,
                error_type=exc.code or exc.type,
                message=message if isinstance(message, str) else exc.message,
                request_id=exc.request_id,
                headers=exc.response.headers,
            )
        if type(exc) is openai.APIError and isinstance(exc.body, dict):
            # an error object inside a 200 stream (the SDK raises a bare APIError)
            kind = exc.body.get("type") or exc.body.get("code")
            return stream_error(
                ctx,
                error_type=kind if isinstance(kind, str) else None,
                message=exc.message,
                request_id=None,
            )
        return classify_sdk_error(ctx, exc, _SDK_ERRORS)

    def _parse(self, raw: Answer) -> Completion:
        if not raw.has_choice:
            raise invalid_response(self._ctx, "no choices")
        blocks: list[Block] = []
        if raw.text:
            blocks.append(TextBlock(raw.text))
        for call in raw.calls:
            if call.type != "function":
                raise invalid_response(self._ctx, f"tool call {call.id} of type {call.type}")
            try:
                arguments = json.loads(call.arguments or "{}")
            except ValueError:
                arguments = None
            if not isinstance(arguments, dict):
                raise invalid_response(
                    self._ctx, f"tool call {call.id} arguments are not a JSON object"
                )
            blocks.append(ToolUseBlock(call.id, call.name, arguments))
        # Some servers answer "stop" with tool calls: the calls decide.
        has_calls = any(isinstance(b, ToolUseBlock) for b in blocks)
        stop = "tool_use" if has_calls else _STOP_REASONS.get(raw.finish_reason, "end_turn")
        if stop == "tool_use" and not has_calls:
            raise invalid_response(self._ctx, "finish_reason tool_calls without tool calls")
        tokens = raw.usage
        return Completion(
            blocks=tuple(blocks),
            stop_reason=stop,
            input_tokens=tokens.input_tokens,
            output_tokens=tokens.output_tokens,
            model=raw.model,
            cache_read_tokens=tokens.cache_read_tokens,
        )

    async def aclose(self) -> None:
        """Close the SDK client and its connections."""
        await self._client.close()
