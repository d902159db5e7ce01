"""The fake OpenAI API's streamed chat completion: a finished ``chat.completion`` payload as the
``chat.completion.chunk`` events the real API sends for ``stream: true`` (the first delta with
the role, ``content`` pieces, each tool call's ``index``, ``id``, ``type`` and name first and
its ``arguments`` in pieces, a last choice chunk with the ``finish_reason``, the usage chunk
with empty ``choices`` only when ``stream_options.include_usage`` (every other chunk then has
``"usage": null``), an ``obfuscation`` field unless ``include_obfuscation`` is false, then
``data: [DONE]``); an ``{"error": ...}`` chunk where a scripted fault says. ``usage_on_finish``:
the last choice chunk carries the usage unasked, as llama.cpp's server does."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

from fakes.sse import JSON_PIECE, Items, StreamFault, cut, event, text_pieces


def stream_body(
    payload: Mapping[str, Any],
    options: Mapping[str, Any],
    fault: StreamFault | None = None,
    *,
    usage_on_finish: bool = False,
) -> Items:
    """The chunks of ``payload`` (a full answer) under ``options`` (``stream_options``)."""
    include_usage = options.get("include_usage") is True
    obfuscate = options.get("include_obfuscation", True) is not False
    base = {k: payload[k] for k in ("id", "created", "model", "service_tier", "system_fingerprint")}
    choice, message = payload["choices"][0], payload["choices"][0]["message"]

    def chunk(delta: Mapping[str, Any], finish: str | None = None) -> bytes:
        last = usage_on_finish and finish is not None
        body: dict[str, Any] = {
            **base,
            "object": "chat.completion.chunk",
            "choices": [
                {"index": 0, "delta": dict(delta), "logprobs": None, "finish_reason": finish}
            ],
        }
        if include_usage or last:
            body["usage"] = payload["usage"] if last else None
        if obfuscate:
            body["obfuscation"] = secrets.token_urlsafe(6)
        return event(None, body)

    calls = message.get("tool_calls") or []
    items: Items = [(False, "chunk", chunk({"role": "assistant", "content": "", "refusal": None}))]
    for piece in text_pieces(message["content"]) if message["content"] else ():
        items.append((True, "chunk", chunk({"content": piece})))
    for index, call in enumerate(calls):
        head = {"index": index, "id": call["id"], "type": "function"}
        head["function"] = {"name": call["function"]["name"], "arguments": ""}
        items.append((True, "chunk", chunk({"tool_calls": [head]})))
        arguments = call["function"]["arguments"]
        for start in range(0, len(arguments), JSON_PIECE):
            part = {
                "index": index,
                "function": {"arguments": arguments[start : start + JSON_PIECE]},
            }
            items.append((True, "chunk", chunk({"tool_calls": [part]})))
    items.append((False, "chunk", chunk({}, choice["finish_reason"])))
    if include_usage:
        usage = {
            **base,
            "object": "chat.completion.chunk",
            "choices": [],
            "usage": payload["usage"],
        }
        if obfuscate:
            usage["obfuscation"] = secrets.token_urlsafe(6)
        items.append((False, "usage", event(None, usage)))
    items.append((False, "done", event(None, "[DONE]")))
    error = {"error": {"message": "", "type": "", "param": None, "code": None}}
    if fault is not None:
        error["error"].update(message=fault.message, type=fault.error_type)
    return cut(items, fault, event(None, error))
