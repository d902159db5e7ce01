"""The snapshot's published JSON Schema and the check of a document against it.

The schema is generated from :data:`memory.export.sections.SECTIONS` (:func:`snapshot_schema`)
and shipped as ``memory/export/schemas/snapshot-v1.schema.json`` (a test keeps the two equal),
so a reader outside engram can validate a snapshot without engram. :func:`check` raises
:class:`~memory.errors.SnapshotError` naming the JSON path of the first problem.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator

from memory.errors import SnapshotError
from memory.export.sections import (
    BOOL,
    DATE,
    FLOAT,
    INT,
    INTS,
    JSON,
    SECTIONS,
    TEXT,
    TEXTS,
    TIME,
    TS,
    Col,
    Section,
)

FORMAT = "engram-snapshot"
SCHEMA_VERSION = 1
SCHEMA_FILE = f"snapshot-v{SCHEMA_VERSION}.schema.json"
SCHEMA_ID = f"https://engram.invalid/schemas/{SCHEMA_FILE}"
TS_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?([+-]\d{2}:\d{2}|Z)$"
DATE_PATTERN = r"^\d{4}-\d{2}-\d{2}$"
TIME_PATTERN = r"^\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?$"

_BASE: dict[str, dict[str, Any]] = {
    TEXT: {"type": "string"},
    INT: {"type": "integer"},
    FLOAT: {"type": "number"},
    BOOL: {"type": "boolean"},
    TS: {"type": "string", "pattern": TS_PATTERN},
    DATE: {"type": "string", "pattern": DATE_PATTERN},
    TIME: {"type": "string", "pattern": TIME_PATTERN},
    JSON: {},
    TEXTS: {"type": "array", "items": {"type": "string"}},
    INTS: {"type": "array", "items": {"type": "integer"}},
}


INT4 = (-(2**31), 2**31 - 1)  # an INT column's range
INT8 = (-(2**63), 2**63 - 1)  # a BIGINT's: ids and references


def _column(col: Col) -> dict[str, Any]:
    spec = dict(_BASE[col.kind])
    if col.enum:
        spec["enum"] = list(col.enum)
    low, high = INT8 if col.ref is not None else INT4
    if col.kind == INTS:
        spec["items"] = {**spec["items"], "minimum": low, "maximum": high}
    minimum = col.minimum if col.minimum is not None else (low if col.kind == INT else None)
    maximum = col.maximum if col.maximum is not None else (high if col.kind == INT else None)
    if minimum is not None:
        spec["minimum"] = max(minimum, low) if col.kind == INT else minimum
    if maximum is not None:
        spec["maximum"] = min(maximum, high) if col.kind == INT else maximum
    if col.null and col.kind != JSON:
        spec["type"] = [spec["type"], "null"]
        if "enum" in spec:
            spec["enum"] = [*spec["enum"], None]
    return spec


def _row(section: Section) -> dict[str, Any]:
    props: dict[str, Any] = {}
    if section.has_id:
        props["id"] = {"type": "integer", "minimum": INT8[0], "maximum": INT8[1]}
    props.update({c.name: _column(c) for c in section.cols})
    required = list(props)
    if section.vectors is not None:
        props["embedding"] = {"type": "array", "items": {"type": "number"}, "minItems": 1}
    return {
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": False,
    }


def snapshot_schema() -> dict[str, Any]:
    """The JSON Schema (2020-12) of a snapshot document, from the sections."""
    sections: dict[str, Any] = {}
    for s in SECTIONS:
        sections[s.name] = {"type": "array", "items": {"$ref": f"#/$defs/{s.name}"}}
        if s.max_rows is not None:
            sections[s.name]["maxItems"] = s.max_rows
    header: dict[str, Any] = {
        "format": {"const": FORMAT},
        "schema_version": {"const": SCHEMA_VERSION},
        "engram_version": {"type": "string"},
        "exported_at": {"type": "string", "pattern": TS_PATTERN},
        "chat_id": {"type": "integer"},
        "embedding_model": {"type": ["string", "null"]},
        "vectors": {
            "oneOf": [
                {"type": "null"},
                {
                    "type": "object",
                    "properties": {
                        "model": {"type": "string", "minLength": 1},
                        "dims": {"type": "integer", "minimum": 1},
                    },
                    "required": ["model", "dims"],
                    "additionalProperties": False,
                },
            ]
        },
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "engram memory snapshot",
        "description": (
            "One chat's memory as exported by `engram memory export` and read back by "
            "`engram memory import`. Ids are the exporting database's; an import remaps them. "
            "Times are ISO 8601 with an offset. `embedding` (in rows of sections with vectors) is "
            "present only in an export made with --with-vectors, for the model in `vectors`."
        ),
        "type": "object",
        "properties": {**header, **sections},
        "required": list(header) + list(sections),
        "additionalProperties": False,
        "$defs": {s.name: _row(s) for s in SECTIONS},
    }


@cache
def shipped_schema() -> dict[str, Any]:
    """The schema file shipped in the package."""
    text = resources.files("memory.export").joinpath("schemas", SCHEMA_FILE).read_text("utf-8")
    return json.loads(text)  # type: ignore[no-any-return]


@cache
def _validator() -> Draft202012Validator:
    return Draft202012Validator(shipped_schema())


def json_path(parts: Any) -> str:
    """``$.patterns[3].confidence`` for the path parts ``("patterns", 3, "confidence")``."""
    out = "$"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


#: the keywords of a row's schema: what :func:`first_problem` reads (a test keeps them in step)
ROW_KEYWORDS = frozenset(
    {"type", "properties", "required", "additionalProperties", "enum", "minimum", "maximum"}
    | {"pattern", "items", "minItems"}
)
_PY: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "array": list,
    "object": dict,
    "null": type(None),
}


def _is(value: Any, name: str) -> bool:
    if isinstance(value, bool) and name in ("integer", "number"):
        return False
    if name == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _PY[name])


def first_problem(schema: dict[str, Any], value: Any, path: tuple[Any, ...]) -> Any:
    """The first ``(path, message)`` where ``value`` breaks ``schema`` (the :data:`ROW_KEYWORDS`
    subset of JSON Schema, in jsonschema's order and words), or None. jsonschema itself takes
    ~30 µs a row; a snapshot of 150,000 rows is checked in a second this way."""
    kind = schema.get("type")
    if kind is not None:
        names = [kind] if isinstance(kind, str) else kind
        if not any(_is(value, n) for n in names):
            return path, f"{value!r} is not of type {', '.join(repr(n) for n in names)}"
    if "enum" in schema and value not in schema["enum"]:
        return path, f"{value!r} is not one of {schema['enum']!r}"
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            return path, f"{value!r} is less than the minimum of {schema['minimum']!r}"
        if "maximum" in schema and value > schema["maximum"]:
            return path, f"{value!r} is greater than the maximum of {schema['maximum']!r}"
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        return path, f"{value!r} does not match {schema['pattern']!r}"
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            return path, f"{value!r} should be non-empty"
        items = schema.get("items")
        if items is not None:
            for i, item in enumerate(value):
                found = first_problem(items, item, (*path, i))
                if found is not None:
                    return found
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for name, sub in props.items():
            if name in value:
                found = first_problem(sub, value[name], (*path, name))
                if found is not None:
                    return found
        for name in schema.get("required", ()):
            if name not in value:
                return path, f"{name!r} is a required property"
        if schema.get("additionalProperties") is False:
            extra = [k for k in value if k not in props]
            if extra:
                verb = "was" if len(extra) == 1 else "were"
                listed = ", ".join(repr(k) for k in extra)
                return path, f"Additional properties are not allowed ({listed} {verb} unexpected)"
    return None


def _raise(path: Any, message: str) -> None:
    if len(message) > 300:
        message = message[:300] + "…"
    raise SnapshotError(json_path(path), message)


def check(doc: Any) -> None:
    """Raise :class:`SnapshotError` at the first problem of ``doc`` against the schema. A
    snapshot of another schema version says so first (its other differences would follow).

    The header and the sections' shape go through jsonschema; the rows through
    :func:`first_problem` with their ``$defs`` schema (the same schema, read faster)."""
    if isinstance(doc, dict):
        version = doc.get("schema_version")
        if doc.get("format") == FORMAT and version != SCHEMA_VERSION:
            raise SnapshotError(
                "$.schema_version",
                f"schema version {version!r} is not one this engram reads "
                f"(it reads {SCHEMA_VERSION}); import it with the engram that wrote it",
            )
    names = [s.name for s in SECTIONS]
    if not isinstance(doc, dict) or not all(isinstance(doc.get(n), list) for n in names):
        skeleton = doc  # a section missing or of the wrong type: jsonschema says so
    else:
        skeleton = {k: (v[:0] if k in names else v) for k, v in doc.items()}
    error = next(iter(_validator().iter_errors(skeleton)), None)
    if error is not None:
        _raise(error.absolute_path, error.message)
    schema = shipped_schema()
    for section in SECTIONS:
        rows = doc[section.name]
        if section.max_rows is not None and len(rows) > section.max_rows:
            _raise((section.name,), f"{rows!r} is too long")
        row_schema = schema["$defs"][section.name]
        for i, row in enumerate(rows):
            found = first_problem(row_schema, row, (section.name, i))
            if found is not None:
                _raise(*found)
