"""The fake Anthropic API's streamed answers: a Messages response as the server-sent events the
real API sends for ``"stream": true`` (``message_start`` with the prompt's usage,
``content_block_start``, ``ping``, ``content_block_delta`` with ``text_delta`` or
``input_json_delta`` pieces, ``content_block_stop``, ``message_delta`` with the stop reason and
the final usage, ``message_stop``), paced like a model: the first text after
``first_token_delay`` seconds, then ``tokens_per_second`` (a token being ~4 characters). An
``error`` event part way (``error_after`` deltas) plays an overload mid-stream."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import attrs
import trio

from fakes.stream_pace import Pace, json_pieces, text_pieces


@attrs.frozen
class StreamError:
    """An ``error`` event after ``after`` deltas (then the stream ends)."""

    after: int = 2
    type: str = "overloaded_error"
    message: str = "Overloaded"


def sse(event: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


async def message_events(
    payload: Mapping[str, Any],
    pace: Pace,
    error: StreamError | None = None,
    on_done: Any = None,
) -> AsyncIterator[bytes]:
    """The events of one answer ``payload`` (a non-streamed response body). ``on_done(bool)``:
    called with True when every event was sent, False when the client went away first."""
    complete = False
    try:
        usage = dict(payload["usage"])
        start = {**payload, "content": [], "stop_reason": None, "stop_sequence": None}
        start["usage"] = {**usage, "output_tokens": 1}
        yield sse("message_start", {"type": "message_start", "message": start})
        yield sse("ping", {"type": "ping"})
        await trio.sleep(pace.first_token_delay)
        sent = 0
        for index, block in enumerate(payload["content"]):
            if block["type"] == "text":
                yield sse(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
                pieces = [
                    (p, {"type": "text_delta", "text": p}) for p in text_pieces(block["text"])
                ]
            else:
                yield sse(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {**block, "input": {}},
                    },
                )
                pieces = [
                    (p, {"type": "input_json_delta", "partial_json": p})
                    for p in json_pieces(block["input"])
                ]
            for text, delta in pieces:
                if error is not None and sent >= error.after:
                    yield sse(
                        "error",
                        {"type": "error", "error": {"type": error.type, "message": error.message}},
                    )
                    complete = True
                    return
                await pace.wait_for(text)
                yield sse(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
                sent += 1
            yield sse("content_block_stop", {"type": "content_block_stop", "index": index})
        yield sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": payload["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        )
        yield sse("message_stop", {"type": "message_stop"})
        complete = True
    finally:
        if on_done is not None:
            on_done(complete)
