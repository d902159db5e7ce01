"""The snapshot's published JSON Schema and the check of a document against it.

The schema is generated from :data:`memory.export.sections.SECTIONS` (:func:`snapshot_schema`)
and shipped as ``memory/export/schemas/snapshot-v1.schema.json`` (a test keeps the two equal),
so a reader outside engram can validate a snapshot without engram. :func:`check` raises
:class:`~memory.errors.SnapshotError` naming the JSON path of the first problem.
"""

from __future__ import annotations

import json
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


def _column(col: Col) -> dict[str, Any]:
    spec = dict(_BASE[col.kind])
    if col.enum:
        spec["enum"] = list(col.enum)
    if col.minimum is not None:
        spec["minimum"] = col.minimum
    if col.maximum is not None:
        spec["maximum"] = col.maximum
    if col.null and col.kind != JSON:
        spec["type"] = [spec["type"], "null"]
        if "enum" in spec:
            spec["enum"] = [*spec["enum"], None]
    return spec


def _row(section: Section) -> dict[str, Any]:
    props: dict[str, Any] = {}
    if section.has_id:
        props["id"] = {"type": "integer"}
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


def check(doc: Any) -> None:
    """Raise :class:`SnapshotError` at the first problem of ``doc`` against the schema. A
    snapshot of another schema version says so first (its other differences would follow)."""
    if isinstance(doc, dict):
        version = doc.get("schema_version")
        if doc.get("format") == FORMAT and version != SCHEMA_VERSION:
            raise SnapshotError(
                "$.schema_version",
                f"schema version {version!r} is not one this engram reads "
                f"(it reads {SCHEMA_VERSION}); import it with the engram that wrote it",
            )
    error = next(iter(_validator().iter_errors(doc)), None)
    if error is not None:
        message = error.message
        if len(message) > 300:
            message = message[:300] + "…"
        raise SnapshotError(json_path(error.absolute_path), message)
