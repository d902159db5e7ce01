"""The fake OpenAI API's streamed chat completions: an answer as the ``chat.completion.chunk``
objects the real API sends for ``"stream": true`` — the role first, the content in pieces, each
tool call's id, type and name in its first chunk and its arguments in pieces after, the
``finish_reason`` in the last choice chunk, then (only with ``stream_options.include_usage``)
a chunk with no choices and the usage, every earlier chunk carrying ``"usage": null``; then
``data: [DONE]``. Paced like a model (:mod:`fakes.stream_pace`)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import trio

from fakes.stream_pace import Pace, text_pieces


def _data(chunk: Mapping[str, Any]) -> bytes:
    return f"data: {json.dumps(chunk)}\n\n".encode()


async def chunk_events(
    payload: Mapping[str, Any], pace: Pace, include_usage: bool, on_done: Any = None
) -> AsyncIterator[bytes]:
    """The chunks of one answer ``payload`` (a non-streamed ``chat.completion`` body)."""
    complete = False
    try:
        choice = payload["choices"][0]
        message = choice["message"]
        head = {k: payload[k] for k in ("id", "created", "model", "system_fingerprint")}
        head["object"] = "chat.completion.chunk"
        if include_usage:
            head["usage"] = None

        def chunk(delta: Mapping[str, Any], finish: str | None = None) -> bytes:
            body = {
                **head,
                "choices": [
                    {"index": 0, "delta": dict(delta), "logprobs": None, "finish_reason": finish}
                ],
            }
            return _data(body)

        yield chunk({"role": "assistant", "content": "", "refusal": None})
        await trio.sleep(pace.first_token_delay)
        for piece in text_pieces(message["content"]) if message.get("content") else ():
            await pace.wait_for(piece)
            yield chunk({"content": piece})
        for index, call in enumerate(message.get("tool_calls") or ()):
            function = call["function"]
            yield chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": function["name"], "arguments": ""},
                        }
                    ]
                }
            )
            arguments = function["arguments"]
            step = max(1, len(arguments) // 3)
            for start in range(0, len(arguments), step):
                piece = arguments[start : start + step]
                await pace.wait_for(piece)
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        yield chunk({}, choice["finish_reason"])
        if include_usage:
            yield _data({**head, "choices": [], "usage": payload["usage"]})
        yield b"data: [DONE]\n\n"
        complete = True
    finally:
        if on_done is not None:
            on_done(complete)
