"""The JSON object in a model's reply: the extractor's claims and the dedup adjudicator's verdict
are both read with :func:`load_json_object` (a ``` fence and prose around it tolerated). Pure."""

from __future__ import annotations

import json
import re
from typing import Any

from memory.errors import ExtractionInvalid

_FENCE = re.compile(r"```[A-Za-z]*[ \t]*\n?(.*?)```", re.DOTALL)


def load_json_object(text: str) -> dict[str, Any]:
    """The first JSON object in ``text`` (inside a ``` fence if there is one; prose around it
    is ignored); :class:`ExtractionInvalid` when there is none."""
    decoder = json.JSONDecoder()
    for candidate in [m.group(1) for m in _FENCE.finditer(text)] + [text]:
        start = candidate.find("{")
        while start != -1:
            try:
                value, _ = decoder.raw_decode(candidate, start)
            except ValueError:
                start = candidate.find("{", start + 1)
                continue
            if isinstance(value, dict):
                return value
            start = candidate.find("{", start + 1)
    raise ExtractionInvalid("the reply holds no JSON object")
