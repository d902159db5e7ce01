"""The snapshot of one chat: every section's rows as JSON (:func:`build_snapshot`), and the
values' conversions both ways (:func:`to_json`, :func:`from_json`), one home for each kind.

Rows are ordered (by id, or by their natural key) so two exports of the same memory are equal
but for ids and the export time. Vectors are included only when asked (``with_vectors``), for
one model: the rows of that model's side tables, as ``embedding`` in each owning row.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, time
from typing import Any

from memory.embeddings.tables import vector_table
from memory.export.schema import FORMAT, SCHEMA_VERSION
from memory.export.sections import DATE, FLOAT, INTS, JSON, SECTIONS, TEXTS, TIME, TS, Section
from runtime.db import Queries


def to_json(kind: str, value: Any) -> Any:
    """A database value of ``kind`` as JSON."""
    if value is None:
        return None
    if kind == TS:
        return value.astimezone(UTC).isoformat()
    if kind in (DATE, TIME):
        return value.isoformat()
    if kind == JSON:
        return json.loads(value) if isinstance(value, str) else value
    if kind == FLOAT:
        return float(value)
    if kind in (TEXTS, INTS):
        return list(value)
    return value


def from_json(kind: str, value: Any) -> Any:
    """A JSON value of ``kind`` (already checked by the schema) for the database; ValueError
    when a date or time does not exist (``2026-02-30``)."""
    if value is None:
        return None
    if kind == TS:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    if kind == DATE:
        return date.fromisoformat(value)
    if kind == TIME:
        return time.fromisoformat(value)
    if kind == JSON:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    if kind == FLOAT:
        return float(value)
    return value


async def _rows(db: Queries, section: Section, chat_id: int) -> list[dict[str, Any]]:
    names = [c.name for c in section.cols]
    columns = ", ".join((["id"] if section.has_id else []) + names)
    rows = await db.fetch(
        f"SELECT {columns} FROM {section.table} WHERE chat_id = $1 ORDER BY {section.order}",
        chat_id,
    )
    out = []
    for row in rows:
        item: dict[str, Any] = {"id": int(row["id"])} if section.has_id else {}
        for col in section.cols:
            item[col.name] = to_json(col.kind, row[col.name])
        out.append(item)
    return out


async def _attach_vectors(
    db: Queries, section: Section, rows: list[dict[str, Any]], chat_id: int, model: str
) -> int:
    """Put each row's ``model`` vector in it as ``embedding``; the dims (0: none)."""
    assert section.vectors is not None
    spec = vector_table(section.vectors)
    found = await db.fetch(
        f"SELECT {spec.owner_col} AS owner, dims, embedding FROM {spec.name} "
        "WHERE chat_id = $1 AND model = $2",
        chat_id,
        model,
    )
    vectors = {int(r["owner"]): r for r in found}
    dims = 0
    for row in rows:
        hit = vectors.get(row["id"])
        if hit is not None:
            to_numpy = getattr(hit["embedding"], "to_numpy", None)
            vector = to_numpy() if to_numpy is not None else hit["embedding"]
            row["embedding"] = [float(x) for x in vector]
            dims = int(hit["dims"])
    return dims


async def build_snapshot(
    db: Queries,
    chat_id: int,
    *,
    engram_version: str,
    embedding_model: str | None,
    with_vectors: bool = False,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The snapshot document of ``chat_id`` (see the module doc)."""
    doc: dict[str, Any] = {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "engram_version": engram_version,
        "exported_at": (now or datetime.now(UTC)).astimezone(UTC).isoformat(),
        "chat_id": chat_id,
        "embedding_model": embedding_model,
        "vectors": None,
    }
    dims = 0
    for section in SECTIONS:
        rows = await _rows(db, section, chat_id)
        if with_vectors and embedding_model and section.vectors is not None:
            dims = max(dims, await _attach_vectors(db, section, rows, chat_id, embedding_model))
        doc[section.name] = rows
    if dims:
        doc["vectors"] = {"model": embedding_model, "dims": dims}
    return doc


def dump(doc: dict[str, Any]) -> bytes:
    """The document as UTF-8 JSON, one section row per line (readable, diffable, compact)."""
    parts = []
    for key, value in doc.items():
        if isinstance(value, list):
            rows = ",\n".join("  " + json.dumps(r, ensure_ascii=False) for r in value)
            body = f"[\n{rows}\n ]" if value else "[]"
        else:
            body = json.dumps(value, ensure_ascii=False)
        parts.append(f" {json.dumps(key)}: {body}")
    return ("{\n" + ",\n".join(parts) + "\n}\n").encode("utf-8")
