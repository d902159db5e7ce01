"""What the streamed calls of both providers share: :class:`StreamTally` (what a stream has
produced so far, so a call cancelled or broken mid-stream still records its tokens) and
:class:`StreamIncomplete` (the stream ended before the answer did).

Output tokens of a call that did not finish are estimated: the most of what the stream reported,
the content pieces received (a server sends about one token a piece) and the characters
generated divided by :data:`CHARS_PER_TOKEN`. Input tokens are what the stream reported
(Anthropic: ``message_start``), else estimated from the request's characters (OpenAI reports
usage only at the end).
"""

from __future__ import annotations

import math

import attrs

from memory.llm.protocol import OnEvent, StreamEvent, TokenUsage
from runtime.logs import get_logger

log = get_logger(__name__)

#: characters per token for estimates (English prose averages about four)
CHARS_PER_TOKEN = 4


class StreamIncomplete(Exception):
    """The stream ended (cleanly) before the answer was complete."""


def estimate_tokens(chars: int) -> int:
    """Tokens in ``chars`` characters of text (rounded up)."""
    return math.ceil(max(0, chars) / CHARS_PER_TOKEN)


@attrs.define
class StreamTally:
    """A streamed call's progress; ``on_event`` (may be None) sees each text piece and tool start.

    A failing ``on_event`` is logged once and then ignored: a progress display never breaks
    the call."""

    on_event: OnEvent | None
    #: input tokens estimated from the request, used when the stream reported none
    prompt_estimate: int = 0
    started: bool = False
    reported: TokenUsage | None = None
    reported_output: int = 0
    pieces: int = 0
    chars: int = 0
    _broken: bool = False

    def emit(self, event: StreamEvent) -> None:
        if self.on_event is None or self._broken:
            return
        try:
            self.on_event(event)
        except Exception as exc:
            self._broken = True
            log.warning("llm.on_event_failed", error=f"{type(exc).__name__}: {exc}")

    def generated(self, piece: str) -> None:
        """A piece of text or tool input arrived."""
        self.pieces += 1
        self.chars += len(piece)

    def so_far(self) -> TokenUsage | None:
        """The tokens used so far (None: the server never began answering)."""
        if not self.started:
            return None
        output = max(self.reported_output, self.pieces, estimate_tokens(self.chars))
        if self.reported is not None:
            return attrs.evolve(self.reported, output_tokens=output)
        return TokenUsage(self.prompt_estimate, output)
