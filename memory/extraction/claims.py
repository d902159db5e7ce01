"""What an extraction is made of: the chunk and known patterns the model is shown, and the
claims it answers with (new patterns, reinforcements, contradictions, supersedes, meta patterns,
the episode summary), parsed strictly from its JSON by :func:`parse_extraction`.

Kinds: the seven tendencies of seed 000 plus ``fact`` (a stable fact about the person) and
``event`` (something on a date). An event must carry ``occurs_on`` ("YYYY-MM-DD", the day
resolved by the model against the local time of the message that says it) and may carry
``occurs_at`` ("HH:MM", local); no other kind has either. ``core: true`` proposes a core tenet
(seed 000 "Core tenets"), honoured only for a belief or a fact at confidence
>= :data:`CORE_MIN_CONFIDENCE` (:attr:`NewPattern.pinned`).

Pure; the prompt (:mod:`memory.extraction.prompt`), the guardrails
(:mod:`memory.extraction.guardrails`) and the call (:mod:`memory.extraction.extractor`) build on it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from datetime import date, datetime, time
from typing import Any

import attrs

from memory.errors import ExtractionInvalid
from memory.llm.json_reply import load_json_object

KINDS = (
    "behavior",
    "emotion",
    "belief",
    "goal",
    "preference",
    "temporal",
    "causal",
    "fact",
    "event",
)
EVENT = "event"  # the one kind with a day
CORE_KINDS = ("belief", "fact")  # what the extractor may make a core tenet ...
CORE_MIN_CONFIDENCE = 0.9  # ... and from which confidence
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
    occurs_on: date | None = None  # an event's day
    occurs_at: time | None = None


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
    occurs_on: date | None = None  # an event's day
    occurs_at: time | None = None  # an event's local time of day
    core: bool = False  # proposed as a core tenet (see pinned)

    @property
    def pinned(self) -> bool:
        """Whether to store it as a core tenet: proposed, a belief or a fact, confidence
        at least :data:`CORE_MIN_CONFIDENCE`."""
        return pinned(self.core, self.kind, self.confidence)


def pinned(core: bool, kind: str, confidence: float) -> bool:
    """The extractor's ``core`` flag honoured: a belief or fact at confidence >= 0.9."""
    return core and kind in CORE_KINDS and confidence >= CORE_MIN_CONFIDENCE


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
    occurs_on: date | None = None
    occurs_at: time | None = None
    core: bool = False

    @property
    def pinned(self) -> bool:
        """See :attr:`NewPattern.pinned`."""
        return pinned(self.core, self.kind, self.confidence)


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


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIME = re.compile(r"\d{2}:\d{2}")


def _day(obj: dict[str, Any], key: str, where: str) -> date | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not _DATE.fullmatch(value):
        raise ExtractionInvalid(f'{where}.{key}: expected a date "YYYY-MM-DD"')
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise ExtractionInvalid(f"{where}.{key}: {value!r} is not a date") from None


def _clock(obj: dict[str, Any], key: str, where: str) -> time | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not _TIME.fullmatch(value):
        raise ExtractionInvalid(f'{where}.{key}: expected a local time "HH:MM"')
    try:
        return time.fromisoformat(value)
    except ValueError:
        raise ExtractionInvalid(f"{where}.{key}: {value!r} is not a time of day") from None


def _flag(obj: dict[str, Any], key: str, where: str) -> bool:
    value = obj.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ExtractionInvalid(f"{where}.{key}: expected true or false")
    return value


def _check_day(item: Any, where: str) -> None:
    """An event has its day; no other kind has a day or a time."""
    kind, day = getattr(item, "kind", None), getattr(item, "occurs_on", None)
    if kind == EVENT and day is None:
        raise ExtractionInvalid(f'{where}.occurs_on: required for an event ("YYYY-MM-DD")')
    if kind != EVENT and (day is not None or getattr(item, "occurs_at", None) is not None):
        raise ExtractionInvalid(f"{where}.occurs_on: only an event has a day or a time")


Reader = Callable[[dict[str, Any], str, str], Any]
_EVIDENCE: tuple[tuple[str, Reader], ...] = (
    ("signal", _signal),
    ("evidence_message_ids", _id_list),
)
_DATED: tuple[tuple[str, Reader], ...] = (
    ("occurs_on", _day),
    ("occurs_at", _clock),
    ("core", _flag),
)
#: each list of the answer: its item class and the readers of the item's fields, in order
SCHEMA: dict[str, tuple[type, tuple[tuple[str, Reader], ...]]] = {
    "new_patterns": (
        NewPattern,
        (
            ("content", _text),
            ("kind", _kind),
            ("confidence", _number),
            *_EVIDENCE,
            ("entry_uuids", _str_list),
            ("temporal", _temporal),
            *_DATED,
        ),
    ),
    "reinforcements": (
        Reinforcement,
        (("pattern_id", _int), ("confidence", _number), *_EVIDENCE, ("entry_uuids", _str_list)),
    ),
    "contradictions": (Contradiction, (("pattern_id", _int), ("reason", _text), *_EVIDENCE)),
    "supersedes": (
        Supersede,
        (
            ("old_pattern_id", _int),
            ("reason", _text),
            ("new_pattern_content", _text),
            ("kind", _kind),
            ("confidence", _number),
            *_EVIDENCE,
            ("entry_uuids", _str_list),
            *_DATED,
        ),
    ),
    "meta_patterns": (
        MetaPattern,
        (
            ("content", _text),
            ("kind", _kind),
            ("confidence", _number),
            ("child_pattern_ids", _id_list),
        ),
    ),
}


def _items(data: dict[str, Any], key: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for i, item in enumerate(_list(data, key, "")):
        if not isinstance(item, dict):
            raise ExtractionInvalid(f"{key}[{i}]: expected an object")
        out.append((f"{key}[{i}]", item))
    return out


def parse_extraction(text: str) -> Extraction:
    """The validated extraction in the model's answer (raises :class:`ExtractionInvalid`).

    Missing lists are empty, ``entry_uuids``, ``temporal``, ``occurs_at`` and ``core``
    optional, ``occurs_on`` required for an event and refused for any other kind, every other
    field required; unknown keys are ignored."""
    data = load_json_object(text)
    if not any(key in data for key in (*SCHEMA, "episode_summary")):
        raise ExtractionInvalid("not an extraction object (none of its keys present)")
    lists: dict[str, tuple[Any, ...]] = {}
    for key, (cls, fields) in SCHEMA.items():
        items = []
        for where, obj in _items(data, key):
            item = cls(**{name: read(obj, name, where) for name, read in fields})
            _check_day(item, where)
            items.append(item)
        lists[key] = tuple(items)
    return Extraction(**lists, episode_summary=_text(data, "episode_summary", "extraction"))
