"""What the fake model servers share for streaming (``stream: true``): server-sent events,
the pacing knobs and scripted faults.

``StreamTiming(first_token_delay=0.8, tokens_per_second=60)`` plays a Sonnet-like model: the
first content piece is sent ``first_token_delay`` seconds after the request, then one piece
(one fake token: a word with its leading space, or a few characters of tool JSON) every
``1/tokens_per_second`` seconds, on an absolute schedule (no drift). A non-streamed answer
waits as long as its stream would have taken. ``StreamFault``: after ``after`` content pieces,
an error event (``kind="error"``) or a dropped connection (``kind="drop"``).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any, Protocol

import attrs
import trio

_TOKEN = re.compile(r"\s*\S+|\s+")
JSON_PIECE = 8


@attrs.frozen
class StreamTiming:
    """Seconds before the first piece, then pieces per second (None: as fast as possible)."""

    first_token_delay: float = 0.0
    tokens_per_second: float | None = None

    def at(self, start: float, piece: int) -> float:
        """When piece number ``piece`` (from 0) is due."""
        rate = self.tokens_per_second
        return start + self.first_token_delay + (piece / rate if rate else 0.0)


@attrs.frozen
class StreamFault:
    """A streamed answer that breaks after ``after`` content pieces: ``error`` sends the API's
    error event (``error_type``, ``message``), ``drop`` closes the connection."""

    kind: str  # "error" | "drop"
    after: int = 0
    error_type: str = "overloaded_error"
    message: str = "Overloaded"


class DroppedStream(Exception):
    """Raised inside a response body to abort the connection (a scripted drop)."""


def text_pieces(text: str) -> list[str]:
    """``text`` as fake tokens (words with their leading whitespace)."""
    return _TOKEN.findall(text) or [text]


def json_pieces(value: Any) -> list[str]:
    """A tool input as the API streams it: its JSON in short pieces."""
    raw = json.dumps(value, ensure_ascii=False)
    return [raw[i : i + JSON_PIECE] for i in range(0, len(raw), JSON_PIECE)]


def event(name: str | None, data: Any) -> bytes:
    """One server-sent event (``event:`` line when named, then its JSON ``data:``)."""
    head = f"event: {name}\n" if name else ""
    body = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"{head}data: {body}\n\n".encode()


#: a streamed body as the fakes build it: (is it a content piece?, event name, bytes); an item
#: named ``drop`` is where the connection is dropped
Items = list[tuple[bool, str, bytes]]


def pieces_in(items: Items) -> int:
    """The content pieces of a body (what the pacing counts)."""
    return sum(1 for is_piece, _, _ in items if is_piece)


def cut(items: Items, fault: StreamFault | None, error: bytes) -> Items:
    """``items`` broken by ``fault`` after its content pieces: ended by ``error`` (an error
    event) or by a drop."""
    if fault is None:
        return items
    out: Items = []
    pieces = 0
    for item in items:
        if item[0]:
            if pieces == fault.after:
                break
            pieces += 1
        out.append(item)
    out.append((False, "error", error) if fault.kind == "error" else (False, "drop", b""))
    return out


class StreamedCall(Protocol):
    """What a fake records of a streamed request (its arrival, the events sent, how it ended)."""

    time: float
    events: list[str]
    stream_end: str | None


async def send_stream(
    call: StreamedCall, items: Items, timing: StreamTiming
) -> AsyncIterator[bytes]:
    """A streamed answer's body: ``items`` paced by ``timing`` (a piece at its due time), the
    events recorded on ``call``, a scripted drop raised, how it ended kept in ``stream_end``
    (complete, error, drop, or client_gone when the client went away first)."""
    call.stream_end = "client_gone"
    piece = 0
    try:
        for is_piece, name, data in items:
            if is_piece:
                await trio.sleep_until(timing.at(call.time, piece))
                piece += 1
            if name == "drop":
                call.stream_end = "drop"
                raise DroppedStream("scripted drop")
            call.events.append(name)
            yield data
        call.stream_end = "error" if call.events[-1:] == ["error"] else "complete"
    except trio.Cancelled:
        call.stream_end = "client_gone"
        raise
