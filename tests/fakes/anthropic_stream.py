"""The fake Anthropic API's streamed answer: a finished Messages payload as the server-sent
events the real API sends for ``stream: true`` (``message_start`` with the input usage and
``output_tokens`` 1, per block ``content_block_start``, ``content_block_delta`` pieces
(``text_delta``; ``input_json_delta`` beginning with an empty one), ``content_block_stop``, a
``ping`` after the first block starts, ``message_delta`` with ``stop_reason`` and the output
usage, ``message_stop``); an ``error`` event where a scripted fault says."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fakes.sse import Items, StreamFault, cut, event, json_pieces, text_pieces


def stream_body(payload: Mapping[str, Any], fault: StreamFault | None = None) -> Items:
    """The events of ``payload`` (a full Messages answer), broken by ``fault``."""
    usage = dict(payload["usage"])
    start_usage = {**usage, "output_tokens": 1}
    message = {**payload, "content": [], "stop_reason": None, "usage": start_usage}
    items: Items = [(False, "message_start", _ev("message_start", message=message))]
    for index, block in enumerate(payload["content"]):
        if block["type"] == "text":
            start: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in text_pieces(block["text"])]
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": ""}]
            deltas += [
                {"type": "input_json_delta", "partial_json": p} for p in json_pieces(block["input"])
            ]
        items.append(
            (
                False,
                "content_block_start",
                _ev("content_block_start", index=index, content_block=start),
            )
        )
        if index == 0:
            items.append((False, "ping", _ev("ping")))
        for delta in deltas:
            items.append(
                (True, "content_block_delta", _ev("content_block_delta", index=index, delta=delta))
            )
        items.append((False, "content_block_stop", _ev("content_block_stop", index=index)))
    ending: dict[str, Any] = {"stop_reason": payload["stop_reason"], "stop_sequence": None}
    items.append(
        (
            False,
            "message_delta",
            _ev("message_delta", delta=ending, usage={"output_tokens": usage["output_tokens"]}),
        )
    )
    items.append((False, "message_stop", _ev("message_stop")))
    error = {"type": "error", "error": {"type": "", "message": ""}}
    if fault is not None:
        error["error"] = {"type": fault.error_type, "message": fault.message}
    return cut(items, fault, event("error", error))


def _ev(name: str, **fields: Any) -> bytes:
    return event(name, {"type": name, **fields})
