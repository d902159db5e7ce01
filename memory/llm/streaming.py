"""What the providers share when a call streams (``on_event``): handing the events on without
letting the listener break the call, and the tokens used so far — a stream stopped part way
(the person pressed Stop) is billed for what was generated, so its ``api_usage`` row carries
them (:class:`StreamTally`)."""

from __future__ import annotations

import math

import attrs

from memory.llm.protocol import OnEvent, StreamEvent, TokenUsage
from runtime.logs import get_logger

log = get_logger(__name__)

#: characters per token for what a stopped stream generated (the usage at its end never came)
CHARS_PER_TOKEN = 4


@attrs.define
class StreamTally:
    """A streamed call's tokens so far: the prompt's as the stream reported them when it
    started (or an estimate, for a provider that reports usage only at the end), and the output
    estimated from the characters received."""

    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cache_write_1h_tokens: int = 0
    output_chars: int = 0
    #: the output tokens the stream itself reported so far (0: none yet)
    output_tokens: int = 0

    def usage(self) -> TokenUsage:
        """The tokens to bill a stream that ended early."""
        estimated = math.ceil(self.output_chars / CHARS_PER_TOKEN)
        return TokenUsage(
            input_tokens=self.input_tokens,
            output_tokens=max(self.output_tokens, estimated),
            cache_read_tokens=self.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens,
            cache_write_1h_tokens=self.cache_write_1h_tokens,
        )


def emit(on_event: OnEvent, event: StreamEvent) -> None:
    """Give ``event`` to the listener; a listener that fails is logged, never the call's end."""
    try:
        on_event(event)
    except Exception as exc:
        log.error("llm.stream_listener_failed", error=f"{type(exc).__name__}: {exc}")
