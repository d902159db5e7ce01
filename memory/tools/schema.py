"""Tool input schemas: JSON Schema derived from one typed ``attrs`` class, and validation.

Field types (``str``, ``int``, ``float``, ``bool``, ``list[X]``/``tuple[X, ...]``,
``Literal[...]``, ``X | None``) plus the constraints in each field's metadata (built with
:func:`spec`) give both the schema sent to the model and :func:`parse_input`, which turns what
the model sent into an instance or raises :class:`ToolError` naming the field.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import operator
import re
import types
import typing
from collections.abc import Callable, Mapping
from datetime import date
from typing import Any, Literal, TypeVar

import attrs

from memory.errors import ToolError

SCHEMA_META = "json_schema"
CHECK_META = "json_check"
DATE_PATTERN = r"^\d{4}-\d{2}-\d{2}$"

_SPEC_KEYWORDS = frozenset(
    {
        *("description", "format", "enum", "pattern", "items"),
        *("minimum", "maximum", "exclusive_minimum", "exclusive_maximum"),
        *("min_length", "max_length", "min_items", "max_items"),
    }
)


# --- schema ----------------------------------------------------------------------------------


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def spec(*, check: Callable[[Any], str | None] | None = None, **keywords: Any) -> dict[str, Any]:
    """Field metadata: JSON Schema keywords in snake_case (``min_length=1`` -> ``minLength``).

    Allowed: description, minimum, maximum, exclusive_minimum, exclusive_maximum, min_length,
    max_length, pattern (searched, so anchor it), format, enum, min_items, max_items and
    ``items`` (extra keywords for the elements of a list field). ``check`` (value -> problem
    or None) runs after the declarative constraints and is not part of the emitted schema.
    """
    unknown = set(keywords) - _SPEC_KEYWORDS
    if unknown:
        raise TypeError(f"unknown schema keywords: {', '.join(sorted(unknown))}")
    schema = {
        _camel(k): list(v) if k == "enum" else dict(v) if k == "items" else v
        for k, v in keywords.items()
        if v is not None
    }
    meta: dict[str, Any] = {SCHEMA_META: schema}
    if check is not None:
        meta[CHECK_META] = check
    return meta


def _check_date(value: Any) -> str | None:
    try:
        date.fromisoformat(value)
    except ValueError:
        return f"{value!r} is not a valid calendar date (YYYY-MM-DD)"
    return None


def date_spec(description: str) -> dict[str, Any]:
    """Metadata of a ``YYYY-MM-DD`` string field that must also be a real calendar date."""
    return spec(description=description, format="date", pattern=DATE_PATTERN, check=_check_date)


def optional_date(description: str) -> Any:
    """An optional ``YYYY-MM-DD`` field (default None)."""
    return attrs.field(default=None, metadata=date_spec(description))


def parse_day(value: str | None) -> date | None:
    """A validated ``YYYY-MM-DD`` field as a date (None stays None)."""
    return None if value is None else date.fromisoformat(value)


def date_range(date_from: str | None, date_to: str | None) -> tuple[date | None, date | None]:
    """Both ends as dates; a :class:`ToolError` naming ``date_from`` when they are reversed."""
    start, end = parse_day(date_from), parse_day(date_to)
    if start and end and start > end:
        raise ToolError("date_from must not be after date_to", "date_from")
    return start, end


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0], True
        raise TypeError(f"unsupported union {tp!r}: only X | None")
    return tp, False


def _type_schema(tp: Any) -> dict[str, Any]:
    tp, _ = _unwrap_optional(tp)
    simple = {str: "string", bool: "boolean", int: "integer", float: "number"}
    if tp in simple:
        return {"type": simple[tp]}
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is list and len(args) == 1:
        return {"type": "array", "items": _type_schema(args[0])}
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return {"type": "array", "items": _type_schema(args[0])}
    if origin is Literal:
        kinds = {type(a) for a in args}
        if len(kinds) != 1 or next(iter(kinds)) not in simple:
            raise TypeError(f"unsupported literal {tp!r}")
        return {"type": simple[next(iter(kinds))], "enum": list(args)}
    raise TypeError(f"unsupported tool input type {tp!r}")


@attrs.frozen
class _Field:
    name: str
    tp: Any
    optional: bool
    required: bool
    schema: dict[str, Any]
    check: Callable[[Any], str | None] | None


@functools.cache
def _fields(cls: type) -> tuple[_Field, ...]:
    if not attrs.has(cls):
        raise TypeError(f"{cls!r} is not an attrs class")
    hints = typing.get_type_hints(cls)
    out = []
    for a in attrs.fields(cls):
        tp = hints[a.name]
        base, optional = _unwrap_optional(tp)
        schema = _type_schema(base)
        extra = dict(a.metadata.get(SCHEMA_META, {}))
        if "items" in extra:
            schema["items"] = {**schema.get("items", {}), **extra.pop("items")}
        schema.update(extra)
        required = a.default is attrs.NOTHING
        factory = isinstance(a.default, attrs.Factory)  # type: ignore[arg-type]
        if not required and a.default is not None and not factory:
            schema["default"] = a.default
        out.append(_Field(a.name, base, optional, required, schema, a.metadata.get(CHECK_META)))
    return tuple(out)


def json_schema(cls: type) -> dict[str, Any]:
    """The JSON Schema (``type: object``) of a tool input class."""
    fields = _fields(cls)
    return {
        "type": "object",
        "properties": {f.name: copy.deepcopy(f.schema) for f in fields},
        "required": [f.name for f in fields if f.required],
        "additionalProperties": False,
    }


# --- validation ------------------------------------------------------------------------------


def _json_type(value: Any) -> str:
    """The JSON type name of a decoded value, with an article ("a string")."""
    if value is None:
        return "null"
    for cls, name in ((bool, "boolean"), (int | float, "number"), (str, "string")):
        if isinstance(value, cls):
            return f"a {name}"
    return "an array" if isinstance(value, list) else "an object"


def _type_ok(kind: str, value: Any) -> bool:
    if kind == "boolean" or isinstance(value, bool):
        return kind == "boolean" and isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if kind == "number":
        return isinstance(value, int | float) and math.isfinite(value)
    return isinstance(value, str if kind == "string" else list)


# keyword, violated when, message
_BOUNDS = (
    ("minimum", operator.lt, ">="),
    ("maximum", operator.gt, "<="),
    ("exclusiveMinimum", operator.le, ">"),
    ("exclusiveMaximum", operator.ge, "<"),
)
_SIZES = {
    "string": ("minLength", "maxLength", "characters"),
    "array": ("minItems", "maxItems", "items"),
}


def _coerce(value: Any, schema: Mapping[str, Any], tp: Any, path: str) -> Any:
    """Type-check and constrain one value against its schema; returns the Python value."""
    kind = schema["type"]
    if not _type_ok(kind, value):
        article = "an" if kind[0] in "aeiou" else "a"
        raise ToolError(f"{path} must be {article} {kind}, got {_json_type(value)}", path)
    value = int(value) if kind == "integer" else float(value) if kind == "number" else value
    if "enum" in schema and value not in schema["enum"]:
        choices = ", ".join(json.dumps(c) for c in schema["enum"])
        raise ToolError(f"{path} must be one of {choices}", path)
    for keyword, violated, relation in _BOUNDS:
        if keyword in schema and violated(value, schema[keyword]):
            raise ToolError(f"{path} must be {relation} {schema[keyword]}", path)
    if kind in _SIZES:
        low, high, unit = _SIZES[kind]
        if len(value) < schema.get(low, 0):
            raise ToolError(f"{path} must have at least {schema[low]} {unit}", path)
        if high in schema and len(value) > schema[high]:
            raise ToolError(f"{path} must have at most {schema[high]} {unit}", path)
    if "pattern" in schema and not re.search(schema["pattern"], value):
        raise ToolError(f"{path} must match the pattern {schema['pattern']}", path)
    if kind == "array":
        item_tp = typing.get_args(tp)[0]
        items = [_coerce(v, schema["items"], item_tp, f"{path}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if typing.get_origin(tp) is tuple else items
    return value


In = TypeVar("In")


def parse_input(cls: type[In], raw: object) -> In:
    """Validate ``raw`` (decoded JSON) against ``cls``; raises :class:`ToolError`.

    Unknown fields are rejected; ``null`` for an optional field means "not given".
    """
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ToolError(f"input must be a JSON object, got {_json_type(raw)}")
    fields = _fields(typing.cast(type, cls))
    known = {f.name for f in fields}
    for key in raw:
        if key not in known:
            allowed = ", ".join(sorted(known)) or "none"
            raise ToolError(f"unknown field {key!r} (allowed: {allowed})", str(key))
    values: dict[str, Any] = {}
    for f in fields:
        value = raw.get(f.name)
        if value is None:
            if f.name in raw and not f.optional:
                raise ToolError(f"{f.name} must not be null", f.name)
            if f.required:
                raise ToolError(f"missing required field {f.name!r}", f.name)
            continue
        value = _coerce(value, f.schema, f.tp, f.name)
        if f.check is not None and (problem := f.check(value)):
            raise ToolError(f"{f.name}: {problem}", f.name)
        values[f.name] = value
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:
        raise ToolError(f"invalid input: {exc}") from None
