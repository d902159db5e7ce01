"""How the fake model servers stream: the pace of a model writing (the first text after
``first_token_delay`` seconds, then ``tokens_per_second``, a token being ~4 characters) and the
pieces an answer is streamed in (a word and the space after it; a tool's JSON in three)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

import attrs
import trio

CHARS_PER_TOKEN = 4


@attrs.frozen
class Pace:
    """How fast the fake model writes (0 and None: at once)."""

    first_token_delay: float = 0.0
    tokens_per_second: float | None = None

    async def wait_for(self, text: str) -> None:
        if self.tokens_per_second:
            await trio.sleep(math.ceil(len(text) / CHARS_PER_TOKEN) / self.tokens_per_second)


def text_pieces(text: str) -> list[str]:
    """The text in the pieces a model streams: a word and the space after it."""
    return re.findall(r"\S+\s*|\s+", text) or [text]


def json_pieces(value: Mapping[str, Any]) -> list[str]:
    raw = json.dumps(dict(value))
    step = max(1, math.ceil(len(raw) / 3))
    return [raw[i : i + step] for i in range(0, len(raw), step)]
