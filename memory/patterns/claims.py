"""What an extraction is made of: the chunk and known patterns the model is shown, and the
claims it answers with (new patterns, reinforcements, contradictions, supersedes, meta patterns,
the episode summary), parsed strictly from its JSON by :func:`parse_extraction`.

Pure; the prompt (:mod:`memory.patterns.extraction_prompt`), the guardrails
(:mod:`memory.patterns.guardrails`) and the call (:mod:`memory.patterns.extraction`) build on it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

import attrs

from memory.errors import ExtractionInvalid

KINDS = ("behavior", "emotion", "belief", "goal", "preference", "temporal", "causal")
SIGNALS = ("explicit", "implicit")
# --- inputs ------------------------------------------------------------------------------------


@attrs.frozen
class ChunkMessage:
    """One ``chat_messages`` row of the span being compacted."""

    id: int
    role: str  # user | assistant | tool_result
    content: str
    created_at: datetime
    tool_name: str | None = None


@attrs.frozen
class KnownPattern:
    """An existing pattern shown to the extractor (it may reinforce/contradict/supersede it)."""

    id: int
    content: str
    kind: str
    strength: float
    confidence: float


# --- the extraction ----------------------------------------------------------------------------


def _ints(value: Iterable[int]) -> tuple[int, ...]:
    return tuple(value)


def _strs(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


@attrs.frozen
class NewPattern:
    content: str
    kind: str
    confidence: float
    signal: str
    evidence_message_ids: tuple[int, ...] = attrs.field(converter=_ints)
    entry_uuids: tuple[str, ...] = attrs.field(converter=_strs, default=())
    temporal: dict[str, Any] | None = None


@attrs.frozen
class Reinforcement:
    pattern_id: int
    confidence: float
    signal: str
    evidence_message_ids: tuple[int, ...] = attrs.field(converter=_ints)
    entry_uuids: tuple[str, ...] = attrs.field(converter=_strs, default=())


@attrs.frozen
class Contradiction:
    pattern_id: int
    reason: str
    signal: str
    evidence_message_ids: tuple[int, ...] = attrs.field(converter=_ints)


@attrs.frozen
class Supersede:
    """A paradigm shift: ``old_pattern_id`` becomes ``superseded`` by a new pattern."""

    old_pattern_id: int
    reason: str
    new_pattern_content: str
    kind: str
    confidence: float
    signal: str
    evidence_message_ids: tuple[int, ...] = attrs.field(converter=_ints)
    entry_uuids: tuple[str, ...] = attrs.field(converter=_strs, default=())


@attrs.frozen
class MetaPattern:
    """A theme over existing atomic patterns (``parent_of`` each child)."""

    content: str
    kind: str
    confidence: float
    child_pattern_ids: tuple[int, ...] = attrs.field(converter=_ints)


@attrs.frozen
class Extraction:
    new_patterns: tuple[NewPattern, ...] = ()
    reinforcements: tuple[Reinforcement, ...] = ()
    contradictions: tuple[Contradiction, ...] = ()
    supersedes: tuple[Supersede, ...] = ()
    meta_patterns: tuple[MetaPattern, ...] = ()
    episode_summary: str = ""


# --- parsing -----------------------------------------------------------------------------------

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


def _get(obj: dict[str, Any], key: str, where: str) -> Any:
    if key not in obj or obj[key] is None:
        raise ExtractionInvalid(f"{where}.{key}: required")
    return obj[key]


def _text(obj: dict[str, Any], key: str, where: str) -> str:
    value = _get(obj, key, where)
    if not isinstance(value, str) or not value.strip():
        raise ExtractionInvalid(f"{where}.{key}: expected a non-empty string")
    return " ".join(value.split())


def _number(obj: dict[str, Any], key: str, where: str) -> float:
    value = _get(obj, key, where)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ExtractionInvalid(f"{where}.{key}: expected a number")
    if not 0.0 <= value <= 1.0:
        raise ExtractionInvalid(f"{where}.{key}: {value} is outside [0, 1]")
    return float(value)


def _choice(obj: dict[str, Any], key: str, where: str, allowed: Sequence[str]) -> str:
    value = _get(obj, key, where)
    if value not in allowed:
        raise ExtractionInvalid(f"{where}.{key}: {str(value)[:40]!r} is not one of {allowed}")
    return str(value)


def _list(obj: dict[str, Any], key: str, where: str) -> list[Any]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ExtractionInvalid(f"{where}{key}: expected a list")
    return value


def _id_list(obj: dict[str, Any], key: str, where: str) -> tuple[int, ...]:
    values = _list(obj, key, f"{where}.")
    if any(isinstance(v, bool) or not isinstance(v, int) for v in values):
        raise ExtractionInvalid(f"{where}.{key}: expected a list of integer ids")
    return tuple(values)


def _str_list(obj: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    values = _list(obj, key, f"{where}.")
    if any(not isinstance(v, str) or not v for v in values):
        raise ExtractionInvalid(f"{where}.{key}: expected a list of strings")
    return tuple(values)


def _int(obj: dict[str, Any], key: str, where: str) -> int:
    value = _get(obj, key, where)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ExtractionInvalid(f"{where}.{key}: expected an integer id")
    return value


def _kind(obj: dict[str, Any], key: str, where: str) -> str:
    return _choice(obj, key, where, KINDS)


def _signal(obj: dict[str, Any], key: str, where: str) -> str:
    return _choice(obj, key, where, SIGNALS)


def _temporal(obj: dict[str, Any], key: str, where: str) -> dict[str, Any] | None:
    value = obj.get(key)
    if value is None or value == {}:
        return None
    scalar = str | int | float | bool
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and (v is None or isinstance(v, scalar)) for k, v in value.items()
    ):
        raise ExtractionInvalid(f"{where}.{key}: expected an object of simple values")
    return dict(value)


Reader = Callable[[dict[str, Any], str, str], Any]
_EVIDENCE: tuple[tuple[str, Reader], ...] = (
    ("signal", _signal),
    ("evidence_message_ids", _id_list),
)
#: each list of the answer: its item class and the readers of the item's fields, in order
SCHEMA: dict[str, tuple[type, tuple[tuple[str, Reader], ...]]] = {
    "new_patterns": (NewPattern, (("content", _text), ("kind", _kind), ("confidence", _number),
                                  *_EVIDENCE, ("entry_uuids", _str_list), ("temporal", _temporal))),
    "reinforcements": (Reinforcement, (("pattern_id", _int), ("confidence", _number), *_EVIDENCE,
                                       ("entry_uuids", _str_list))),
    "contradictions": (Contradiction, (("pattern_id", _int), ("reason", _text), *_EVIDENCE)),
    "supersedes": (Supersede, (("old_pattern_id", _int), ("reason", _text),
                               ("new_pattern_content", _text), ("kind", _kind),
                               ("confidence", _number), *_EVIDENCE, ("entry_uuids", _str_list))),
    "meta_patterns": (MetaPattern, (("content", _text), ("kind", _kind), ("confidence", _number),
                                    ("child_pattern_ids", _id_list))),
}  # fmt: skip


def _items(data: dict[str, Any], key: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for i, item in enumerate(_list(data, key, "")):
        if not isinstance(item, dict):
            raise ExtractionInvalid(f"{key}[{i}]: expected an object")
        out.append((f"{key}[{i}]", item))
    return out


def parse_extraction(text: str) -> Extraction:
    """The validated extraction in the model's answer (raises :class:`ExtractionInvalid`).

    Missing lists are empty, ``entry_uuids`` and ``temporal`` optional, every other field
    required; unknown keys are ignored."""
    data = load_json_object(text)
    if not any(key in data for key in (*SCHEMA, "episode_summary")):
        raise ExtractionInvalid("not an extraction object (none of its keys present)")
    lists = {
        key: tuple(cls(**{name: read(o, name, w) for name, read in fields})
                   for w, o in _items(data, key))
        for key, (cls, fields) in SCHEMA.items()
    }  # fmt: skip
    return Extraction(**lists, episode_summary=_text(data, "episode_summary", "extraction"))
