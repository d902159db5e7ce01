"""A snapshot back into a chat: :func:`import_snapshot`.

First the whole document is checked without touching the database — the JSON Schema
(:func:`memory.export.schema.check`), then what a schema cannot say (:func:`prepare`): ids unique
per section, references to rows that exist, dates that exist, vectors of the stated size. The
first problem raises :class:`~memory.errors.SnapshotError` naming its JSON path.

Then one transaction writes every section in order (a chat-level advisory lock keeps two imports
of one chat apart). Ids are remapped (new ids from the tables' sequences, in the file's order);
a row the chat already holds is kept, not doubled — patterns by canonical hash (recomputed from
the content), the others by their natural key (:attr:`Section.key`) — so importing into an empty
chat restores it, importing into a used one merges, and importing twice adds nothing the second
time. References to purged messages are dropped; an audit row of a forgotten pattern keeps a
fresh id no pattern will ever get (so a second import of the same file into another database
adds those rows again: nothing else tells them apart).

Vectors in the file for the target model are stored with their rows; after the commit, the new
rows still lacking one are embedded (an embedding failure leaves them to the backfill job and is
reported; it never undoes the import).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from memory.embeddings.providers import PURPOSE, Embedder
from memory.embeddings.store import ensure_vector_index, store_vectors
from memory.embeddings.tables import vector_table
from memory.errors import SnapshotError
from memory.export.document import from_json
from memory.export.schema import check
from memory.export.sections import INTS, JSON, SECTIONS, TEXT, TEXTS, Section
from memory.patterns.canonical import canonical_hash, lock_key
from runtime.db import Connection, Database
from runtime.errors import IntegrityViolation, QueryError
from runtime.logs import get_logger

log = get_logger(__name__)
EMBED_BATCH = 64


@attrs.define
class ImportReport:
    """What an import did, per section: rows ``added``, rows ``kept`` (already in the chat)."""

    chat_id: int
    added: dict[str, int] = attrs.Factory(dict)
    kept: dict[str, int] = attrs.Factory(dict)
    vectors_stored: int = 0
    #: rows whose vectors were of another model than the target's (embedded again)
    vectors_other_model: int = 0
    embedded: int = 0
    embedding_error: str | None = None


@attrs.define
class Prepared:
    """The checked document: each section's rows as database values (refs still the file's)."""

    rows: dict[str, list[dict[str, Any]]]
    vectors_model: str | None
    source_chat: int


def parse(data: bytes) -> Any:
    """The JSON of a snapshot file; a :class:`SnapshotError` at ``$`` when it is not JSON (a
    truncated file is the common case)."""
    try:
        return json.loads(data)
    except UnicodeDecodeError as exc:
        raise SnapshotError("$", f"not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        # an unterminated string runs to the end of the file
        ends_early = exc.pos >= len(data.rstrip()) or exc.msg.startswith("Unterminated string")
        end = "; the file ends early (truncated?)" if ends_early else ""
        raise SnapshotError(
            "$", f"not JSON ({exc.msg}: line {exc.lineno} column {exc.colno}){end}"
        ) from None


UNSTORABLE = "holds a NUL character or a lone surrogate, which PostgreSQL cannot store"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _unstorable(value: Any) -> bool:
    """Does a text, or any text in a JSON value (keys too), hold what PostgreSQL refuses?"""
    if isinstance(value, str):
        return _UNSTORABLE.search(value) is not None
    if isinstance(value, dict):
        return any(_unstorable(k) or _unstorable(v) for k, v in value.items())
    return isinstance(value, list) and any(_unstorable(v) for v in value)


def _refs_exist(section: Section, col: str, ref: str) -> bool:
    """Must a reference of ``col`` name a row of the file? (No: purged messages, forgotten
    patterns in the audit, deleted jobs.)"""
    return ref == "patterns" and section.name != "audit"


def prepare(doc: Any) -> Prepared:
    """Check ``doc`` (schema, then ids, references, values) and convert it; raises
    :class:`SnapshotError` at the first problem."""
    check(doc)
    vectors = doc["vectors"]
    dims = vectors["dims"] if vectors else 0
    ids: dict[str, dict[int, int]] = {}
    out: dict[str, list[dict[str, Any]]] = {}
    for section in SECTIONS:
        seen: dict[int, int] = {}
        rows: list[dict[str, Any]] = []
        for i, raw in enumerate(doc[section.name]):
            where = f"$.{section.name}[{i}]"
            if section.has_id:
                if raw["id"] in seen:
                    raise SnapshotError(
                        f"{where}.id",
                        f"duplicate id {raw['id']} (first at $.{section.name}[{seen[raw['id']]}])",
                    )
                seen[raw["id"]] = i
            row: dict[str, Any] = {"id": raw["id"]} if section.has_id else {}
            for col in section.cols:
                value = raw[col.name]
                if (
                    col.ref is not None
                    and _refs_exist(section, col.name, col.ref)
                    and value is not None
                    and value not in ids[col.ref]
                ):
                    raise SnapshotError(
                        f"{where}.{col.name}",
                        f"refers to {col.ref} id {value}, which is not in $.{col.ref}",
                    )
                try:
                    row[col.name] = from_json(col.kind, value)
                except ValueError as exc:
                    raise SnapshotError(f"{where}.{col.name}", str(exc)) from None
                if col.kind in (TEXT, TEXTS, JSON) and _unstorable(value):
                    raise SnapshotError(f"{where}.{col.name}", UNSTORABLE)
            if "embedding" in raw:
                if not vectors:
                    raise SnapshotError(f"{where}.embedding", "a vector, but $.vectors is null")
                if len(raw["embedding"]) != dims:
                    raise SnapshotError(
                        f"{where}.embedding",
                        f"{len(raw['embedding'])} numbers, $.vectors.dims says {dims}",
                    )
                row["embedding"] = raw["embedding"]
            rows.append(row)
        ids[section.name] = seen
        out[section.name] = rows
    return Prepared(out, vectors["model"] if vectors else None, doc["chat_id"])


# --- writing -----------------------------------------------------------------------------------


def _key(section: Section, row: Mapping[str, Any]) -> tuple[Any, ...]:
    if section.name == "messages" and row["external_message_id"] is not None:
        return ("update", row["external_message_id"])  # unique per chat
    if section.name == "patterns":
        return (canonical_hash(row["content"]),)
    return tuple(row[k] for k in section.key)


async def _existing(conn: Connection, section: Section, chat_id: int) -> dict[tuple[Any, ...], Any]:
    """The chat's rows of ``section`` by key (their id, or True)."""
    cols = list(dict.fromkeys((("id",) if section.has_id else ()) + section.key)) or ["1"]
    rows = await conn.fetch(
        f"SELECT {', '.join(cols)} FROM {section.table} WHERE chat_id = $1", chat_id
    )
    found: dict[tuple[Any, ...], Any] = {}
    for r in rows:
        if section.name == "patterns":  # stored already canonical
            key: tuple[Any, ...] = (r["canonical_hash"],)
        else:
            key = _key(section, r)
        found.setdefault(key, r["id"] if section.has_id else True)
    return found


async def _new_ids(conn: Connection, table: str, n: int) -> list[int]:
    if n == 0:
        return []
    rows = await conn.fetch(
        "SELECT nextval(pg_get_serial_sequence($1, 'id')) AS id FROM generate_series(1, $2)",
        table,
        n,
    )
    return [int(r["id"]) for r in rows]


def _remap(
    section: Section, row: dict[str, Any], maps: dict[str, dict[int, int]], phantoms: list[int]
) -> None:
    """Replace the file's ids in ``row``'s reference columns by the database's."""
    for col in section.cols:
        if col.ref is None or row[col.name] is None:
            continue
        target = maps[col.ref]
        if col.kind == INTS:
            row[col.name] = [target[v] for v in row[col.name] if v in target]
        elif row[col.name] in target:
            row[col.name] = target[row[col.name]]
        elif section.name == "audit":  # a forgotten pattern: a fresh id, the same for its rows
            phantoms.append(row[col.name])
        else:
            row[col.name] = None  # a purged message, a deleted job


async def _write_section(
    conn: Connection,
    section: Section,
    rows: list[dict[str, Any]],
    chat_id: int,
    maps: dict[str, dict[int, int]],
    report: ImportReport,
) -> list[tuple[int, dict[str, Any]]]:
    """Insert the section's new rows; fills ``maps[section.name]``; returns (new id, row)."""
    existing = await _existing(conn, section, chat_id)
    ids: dict[int, int] = {}
    maps[section.name] = ids
    phantoms: list[int] = []
    fresh: list[dict[str, Any]] = []
    first_of: dict[tuple[Any, ...], dict[str, Any]] = {}
    same: list[tuple[dict[str, Any], dict[str, Any]]] = []  # (row, its twin earlier in the file)
    for row in rows:
        _remap(section, row, maps, phantoms)
        key = _key(section, row)
        if key in existing:
            if section.has_id:
                ids[row["id"]] = existing[key]
            continue
        if key in first_of:  # twice in the file: once in the chat
            if section.has_id:
                same.append((row, first_of[key]))
            continue
        first_of[key] = row
        fresh.append(row)
    if phantoms:
        unknown = list(dict.fromkeys(p for p in phantoms if p not in maps["patterns"]))
        for old, new in zip(unknown, await _new_ids(conn, "patterns", len(unknown)), strict=True):
            maps["patterns"][old] = new
        for row in fresh:
            for name in ("pattern_id", "other_pattern_id"):
                if row[name] is not None and row[name] in unknown:
                    row[name] = maps["patterns"][row[name]]
    new_rows = fresh
    if section.has_id:
        new_ids = await _new_ids(conn, section.table, len(new_rows))
        for row, new in zip(new_rows, new_ids, strict=True):
            ids[row["id"]] = new
        for row, twin in same:
            ids[row["id"]] = ids[twin["id"]]
    names = [c.name for c in section.cols]
    records = [
        ((ids[r["id"]],) if section.has_id else ())
        + (chat_id,)
        + tuple(canonical_hash(r["content"]) if n == "canonical_hash" else r[n] for n in names)
        for r in new_rows
    ]
    if records:
        columns = (["id"] if section.has_id else []) + ["chat_id", *names]
        await conn.copy_records(section.table, records, columns)
    report.added[section.name] = len(new_rows)
    report.kept[section.name] = len(rows) - len(new_rows)
    return [(ids[r["id"]], r) for r in new_rows] if section.has_id else []


async def _store_file_vectors(
    conn: Connection,
    section: Section,
    new: list[tuple[int, dict[str, Any]]],
    model: str,
    chat_id: int,
) -> int:
    assert section.vectors is not None
    spec = vector_table(section.vectors)
    pairs = [(i, np.asarray(r["embedding"], dtype=np.float32)) for i, r in new if "embedding" in r]
    if not pairs:
        return 0
    dims = int(pairs[0][1].shape[0])
    records = [(i, model, chat_id, dims, v) for i, v in pairs]
    await conn.copy_records(
        spec.name, records, [spec.owner_col, "model", "chat_id", "dims", "embedding"]
    )
    return len(records)


async def import_snapshot(
    db: Database, doc: Any, *, chat_id: int | None = None, embedder: Embedder | None = None
) -> ImportReport:
    """Import ``doc`` (parsed JSON, or already :func:`prepare` d) into ``chat_id`` (default: the
    chat it was exported from); see the module doc. Nothing is written unless the whole
    document is good."""
    plan = doc if isinstance(doc, Prepared) else prepare(doc)
    target = plan.source_chat if chat_id is None else chat_id
    report = ImportReport(chat_id=target)
    model = embedder.model if embedder is not None else plan.vectors_model
    use_file_vectors = plan.vectors_model is not None and plan.vectors_model == model
    new_owners: dict[str, list[int]] = {}
    dims = 0
    async with db.transaction() as conn:
        await conn.execute("SELECT pg_advisory_xact_lock($1)", lock_key("snapshot-import", target))
        maps: dict[str, dict[int, int]] = {}
        for section in SECTIONS:
            try:
                new = await _write_section(
                    conn, section, plan.rows[section.name], target, maps, report
                )
            except (IntegrityViolation, QueryError) as exc:  # a CHECK the schema cannot say
                raise SnapshotError(
                    f"$.{section.name}", f"the database refused these rows: {exc}"
                ) from None
            if section.vectors is None:
                continue
            new_owners[section.vectors] = [i for i, _ in new]
            with_vec = sum(1 for _, r in new if "embedding" in r)
            if use_file_vectors and model is not None:
                report.vectors_stored += await _store_file_vectors(
                    conn, section, new, model, target
                )
            else:
                report.vectors_other_model += with_vec
            dims = dims or (len(next((r["embedding"] for _, r in new if "embedding" in r), [])))
    if use_file_vectors and model is not None and dims:
        for table in new_owners:
            await ensure_vector_index(db, table, model, dims)
    if embedder is not None:
        await _embed_new(db, embedder, target, new_owners, report)
    log.info("snapshot.imported", chat_id=target, added=report.added, kept=report.kept)
    return report


async def _embed_new(
    db: Database,
    embedder: Embedder,
    chat_id: int,
    new_owners: dict[str, list[int]],
    report: ImportReport,
) -> None:
    """Embed the imported rows lacking a vector for the embedder's model (after the commit)."""
    try:
        for table, owners in new_owners.items():
            spec = vector_table(table)
            rows = await db.fetch(
                f"SELECT o.id, coalesce(o.{spec.text_col}, '') AS text FROM {spec.owner_table} o "
                f"WHERE o.chat_id = $3 AND o.id = ANY($1::bigint[]) AND NOT EXISTS "
                f"(SELECT 1 FROM {spec.name} v "
                f"WHERE v.{spec.owner_col} = o.id AND v.model = $2) ORDER BY o.id",
                owners,
                embedder.model,
                chat_id,
            )
            for start in range(0, len(rows), EMBED_BATCH):
                batch = rows[start : start + EMBED_BATCH]
                vectors = await embedder.embed(
                    [str(r["text"]) for r in batch], purpose=PURPOSE, chat_id=chat_id
                )
                pairs = [(int(r["id"]), v, chat_id) for r, v in zip(batch, vectors, strict=True)]
                report.embedded += await store_vectors(
                    db, spec.name, spec.owner_col, pairs, embedder.model
                )
    except Exception as exc:  # committed rows stay; the backfill job embeds them later
        report.embedding_error = f"{type(exc).__name__}: {exc}"
        log.warning("snapshot.embedding_failed", model=embedder.model, error=str(exc))
