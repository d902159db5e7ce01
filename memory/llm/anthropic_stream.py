"""A Messages API call streamed through the SDK's ``messages.stream`` (used by
:class:`memory.llm.anthropic_provider.AnthropicLLM` when ``on_event`` is given).

The SDK accumulates the events into the same ``Message`` a non-streamed call returns (text,
``tool_use`` input from its ``input_json_delta`` pieces, stop reason, usage), so the provider
parses both alike. Text pieces become :class:`TextDelta` events, each ``tool_use`` block's start a
:class:`ToolStarted`; the :class:`StreamTally` keeps the usage of ``message_start`` and what was
generated, for a call cancelled or broken mid-stream. An ``error`` event surfaces as the SDK's
status error (status 200); a stream that ends without ``message_stop`` as
:class:`StreamIncomplete`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
from anthropic.types import Message as ApiMessage

from memory.llm.protocol import TextDelta, TokenUsage, ToolStarted
from memory.llm.streaming import StreamIncomplete, StreamTally


async def stream_message(
    client: anthropic.AsyncAnthropic,
    params: dict[str, Any],
    tally: StreamTally,
    usage_of: Callable[[ApiMessage], TokenUsage],
) -> ApiMessage:
    """Stream one Messages call, feeding ``tally``; the accumulated final message."""
    finished = False
    async with client.messages.stream(**params) as stream:
        async for event in stream:
            tally.started = True
            if event.type == "message_start":
                tally.reported = usage_of(event.message)
                tally.reported_output = event.message.usage.output_tokens
            elif event.type == "content_block_start":
                if event.content_block.type == "tool_use":
                    tally.emit(ToolStarted(event.content_block.name))
            elif event.type == "content_block_delta":
                if event.delta.type == "text_delta":
                    tally.generated(event.delta.text)
                    tally.emit(TextDelta(event.delta.text))
                elif event.delta.type == "input_json_delta":
                    tally.generated(event.delta.partial_json)
            elif event.type == "message_delta":
                tally.reported_output = event.usage.output_tokens
            elif event.type == "message_stop":
                finished = True
        if not finished:
            raise StreamIncomplete("no message_stop event")
        return await stream.get_final_message()
