"""A chat completions call streamed (``stream: true`` with ``stream_options.include_usage``)
and what both ways of calling parse: :class:`Answer`, the first choice's text, function calls,
finish reason, model and usage (used by :mod:`memory.llm.openai_provider`).

Chunks are accumulated as the API documents them: ``delta.content`` pieces appended, each
``delta.tool_calls`` entry keyed by ``index`` (``id`` and name in its first piece, arguments in
pieces), the ``finish_reason``, and the usage chunk (empty ``choices``) before ``data: [DONE]``.
Text pieces become :class:`TextDelta` events, a call's first piece a :class:`ToolStarted`. A
stream without a finish reason is :class:`StreamIncomplete`; without a usage chunk (a server
that ignores ``include_usage``, or refuses ``stream_options``: :func:`refuses_stream_options`)
the tokens are the tally's estimate.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import openai
from openai.types.chat import ChatCompletion

from memory.llm.protocol import TextDelta, TokenUsage, ToolStarted
from memory.llm.streaming import StreamIncomplete, StreamTally, estimate_tokens
from runtime.logs import get_logger

log = get_logger(__name__)


@attrs.define
class Call:
    """One function call of an answer (``arguments`` as the model wrote them)."""

    id: str = ""
    type: str = "function"
    name: str = ""
    arguments: str = ""


@attrs.define
class Answer:
    """The first choice of a chat completion, streamed or not."""

    model: str = ""
    text: str = ""
    calls: list[Call] = attrs.Factory(list)
    finish_reason: str | None = None
    has_choice: bool = False
    usage: TokenUsage = attrs.Factory(lambda: TokenUsage(0, 0))


def usage_of(usage: Any) -> TokenUsage:
    """A ``CompletionUsage`` (None: the server omitted it) as our counts."""
    if usage is None:
        return TokenUsage(0, 0)
    details = usage.prompt_tokens_details
    cached = (details.cached_tokens or 0) if details is not None else 0
    return TokenUsage(
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
        cache_read_tokens=min(cached, usage.prompt_tokens),
    )


def answer_of(raw: ChatCompletion) -> Answer:
    """A non-streamed completion's first choice."""
    answer = Answer(model=raw.model, usage=usage_of(raw.usage))
    if not raw.choices:
        return answer
    choice = raw.choices[0]
    answer.has_choice = True
    answer.text = choice.message.content or ""
    answer.finish_reason = choice.finish_reason
    for call in choice.message.tool_calls or ():
        if call.type == "function":
            name, arguments = call.function.name, call.function.arguments
        else:
            name, arguments = "", ""
        answer.calls.append(Call(call.id, call.type, name, arguments))
    return answer


#: what one image is estimated to cost as input (OpenAI: a 1024x1024 image at high detail)
IMAGE_TOKENS = 765


def prompt_estimate(params: dict[str, Any]) -> int:
    """Input tokens estimated from the request's messages and tools, an image counted as
    :data:`IMAGE_TOKENS` (its URL left out)."""
    images = 0
    messages = []
    for message in params.get("messages") or ():
        content = message.get("content")
        if isinstance(content, list):
            images += sum(1 for part in content if part.get("type") == "image_url")
            content = [part for part in content if part.get("type") != "image_url"]
        messages.append({**message, "content": content})
    text = json.dumps([messages, params.get("tools")], ensure_ascii=False)
    return estimate_tokens(len(text)) + images * IMAGE_TOKENS


def refuses_stream_options(exc: Exception) -> bool:
    """A 400 about the ``stream_options`` field itself (a server that does not know it)."""
    return isinstance(exc, openai.BadRequestError) and "stream_options" in str(exc.message)


async def stream_answer(
    client: openai.AsyncOpenAI, params: dict[str, Any], tally: StreamTally, *, options: bool = True
) -> Answer:
    """Stream one chat completion, feeding ``tally``; the accumulated answer. ``options``:
    ask for the usage chunk (``stream_options.include_usage``), which some servers refuse."""
    answer = Answer(model=str(params["model"]))
    got_usage = False
    stream = await client.chat.completions.create(
        **params,
        stream=True,
        stream_options={"include_usage": True} if options else openai.omit,
    )
    async with stream:
        async for chunk in stream:
            tally.started = True
            answer.model = chunk.model or answer.model
            if chunk.usage is not None:
                answer.usage = usage_of(chunk.usage)
                got_usage = True
            for choice in chunk.choices:
                if choice.index != 0:
                    continue
                answer.has_choice = True
                delta = choice.delta
                if delta.content:
                    answer.text += delta.content
                    tally.generated(delta.content)
                    tally.emit(TextDelta(delta.content))
                for piece in delta.tool_calls or ():
                    while len(answer.calls) <= piece.index:
                        answer.calls.append(Call())
                    call = answer.calls[piece.index]
                    call.id = piece.id or call.id
                    call.type = piece.type or call.type
                    function = piece.function
                    if function is not None and function.name:
                        if not call.name:
                            tally.emit(ToolStarted(function.name))
                        call.name += function.name
                    if function is not None and function.arguments:
                        call.arguments += function.arguments
                        tally.generated(function.arguments)
                if choice.finish_reason is not None:
                    answer.finish_reason = choice.finish_reason
    if answer.finish_reason is None:
        raise StreamIncomplete("no finish_reason")
    if not got_usage:
        log.warning("llm.stream_usage_missing", model=answer.model)
        answer.usage = tally.so_far() or TokenUsage(tally.prompt_estimate, 0)
    return answer
