"""Import of a Day One JSON export into ``entries`` (the journal tools live elsewhere).

``import_dayone`` reads ``{"entries": [...]}`` (a ``.json`` file, a Day One ``.zip`` export, or
the parsed object), maps each entry onto a row — uuid, creationDate, modifiedDate, timeZone,
text, tags, location (city/country/place/coordinates), weather, photo/video/audio counts,
word count — and upserts it by uuid into the journal of one chat (each chat owns its journal;
a uuid is unique per chat), in batches of one transaction each:

* new uuid -> ``imported``;
* known uuid with a later ``modifiedDate`` -> ``updated`` (its vectors are dropped when the
  text changed, so it is embedded again);
* otherwise -> ``unchanged`` (re-importing the same export, or an older one, changes nothing).

A malformed entry is reported by uuid (or index) in ``skipped`` and the rest imports. After
each batch the entries lacking a vector for the embedder's model are embedded; an embedding
failure never fails the import: the entries stay without vectors for the backfill job
(:class:`memory.embeddings.store.EmbeddingBackfill`) and the report says why.
"""

from __future__ import annotations

import json
import math
import os
import re
import zipfile
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, available_timezones

import attrs

from memory.embeddings.providers import PURPOSE, Embedder
from memory.embeddings.store import store_vectors
from memory.errors import JournalFormatError, MalformedEntry
from runtime.db import Database, Queries
from runtime.logs import get_logger
from runtime.progress import Progress

log = get_logger(__name__)

BATCH = 100
MAX_UUID_CHARS = 200
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")  # PostgreSQL rejects NUL and lone surrogates
_MOMENT = re.compile(r"!\[[^\]]*\]\(dayone-moment:[^)]*\)")  # inline photo references
_WORD = re.compile(r"[^\W_]+(?:['’\-][^\W_]+)*")


@attrs.define
class ImportReport:
    """What an import did; ``skipped`` holds (uuid or index, reason) per malformed entry."""

    total: int = 0
    imported: int = 0
    updated: int = 0
    unchanged: int = 0
    skipped: list[tuple[str | int, str]] = attrs.Factory(list)
    embedded: int = 0
    #: why embedding stopped (the entries left without vectors await the backfill job)
    embedding_error: str | None = None


@attrs.frozen
class JournalEntry:
    """One Day One entry, validated and mapped onto the ``entries`` columns."""

    uuid: str
    created_at: datetime
    modified_at: datetime | None
    timezone: str | None
    text: str
    tags: tuple[str, ...]
    city: str | None
    country: str | None
    place_name: str | None
    latitude: float | None
    longitude: float | None
    location: dict[str, Any] | None
    weather: dict[str, Any] | None
    photo_count: int
    video_count: int
    audio_count: int
    word_count: int


# --- reading and parsing -----------------------------------------------------------------------


def word_count(text: str) -> int:
    """Words in Day One markdown (inline photo references are not words)."""
    return len(_WORD.findall(_MOMENT.sub(" ", text.replace("\\", ""))))


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return _UNSTORABLE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_clean(str(k)): _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _read_json(data: bytes, source: str) -> Any:
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise JournalFormatError(f"{source} is not JSON ({exc})") from None


def read_export(path_or_obj: str | os.PathLike[str] | Mapping[str, Any]) -> list[Any]:
    """The raw entries of an export: a JSON file, a Day One ``.zip``, or a parsed object."""
    if isinstance(path_or_obj, Mapping):
        doc: Any = path_or_obj
        source = "the export"
    else:
        path = Path(path_or_obj)
        source = str(path)
        try:
            if zipfile.is_zipfile(path):
                with zipfile.ZipFile(path) as archive:
                    names = [n for n in archive.namelist() if n.lower().endswith(".json")]
                    if not names:
                        raise JournalFormatError(f"{source} holds no .json journal")
                    docs = [_read_json(archive.read(n), f"{source}:{n}") for n in sorted(names)]
                entries: list[Any] = []
                for name, part in zip(sorted(names), docs, strict=True):
                    entries.extend(_entries_of(part, f"{source}:{name}"))
                return entries
            doc = _read_json(path.read_bytes(), source)
        except (OSError, zipfile.BadZipFile) as exc:
            raise JournalFormatError(f"cannot read {source}: {exc}") from None
    return _entries_of(doc, source)


def _entries_of(doc: Any, source: str) -> list[Any]:
    if not isinstance(doc, Mapping) or not isinstance(doc.get("entries"), list):
        raise JournalFormatError(f'{source} is not a Day One export (no "entries" list)')
    return list(doc["entries"])


def _date(raw: Mapping[str, Any], key: str, required: bool) -> datetime | None:
    value = raw.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise MalformedEntry(f"{key}: expected an ISO 8601 date, got {value!r}"[:200])
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        raise MalformedEntry(f"{key}: not an ISO 8601 date: {value!r}"[:200]) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _opt(mapping: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    value = mapping.get(key)
    if value is None:
        return None
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise MalformedEntry(f"{where}{key}: expected a number, got {value!r}"[:200])
        if not math.isfinite(value):
            raise MalformedEntry(f"{where}{key}: not a finite number")
        return float(value)
    if not isinstance(value, kind):
        raise MalformedEntry(f"{where}{key}: expected {kind.__name__}, got {value!r}"[:200])
    return value


@cache
def _known_zones() -> frozenset[str]:
    return frozenset(available_timezones()) - {"localtime"}  # the host's, not a zone name


def known_timezone(name: str | None) -> str | None:
    """``name`` when it is an IANA time zone, else None (the entry's dates then use the
    reader's zone). Checked once here, so reads need not check (see migration 002)."""
    if not name:
        return None
    zones = _known_zones()
    if zones:
        return name if name in zones else None
    try:  # no zone list (no tzdata directory): ask zoneinfo itself
        ZoneInfo(name)
    except (KeyError, ValueError, OSError):  # not found (a KeyError), malformed, unreadable
        return None
    return name


def _count(raw: Mapping[str, Any], key: str) -> int:
    items = raw.get(key)
    if items is None:
        return 0
    if not isinstance(items, list):
        raise MalformedEntry(f"{key}: expected a list")
    return len(items)


def parse_entry(raw: Any) -> JournalEntry:
    """Validate one Day One entry (``MalformedEntry`` says what is wrong)."""
    if not isinstance(raw, Mapping):
        raise MalformedEntry(f"not an object ({type(raw).__name__})")
    uuid = raw.get("uuid")
    if not isinstance(uuid, str) or not uuid.strip() or len(uuid) > MAX_UUID_CHARS:
        raise MalformedEntry("uuid: missing or not a string")
    created = _date(raw, "creationDate", True)
    assert created is not None
    text = _opt(raw, "text", str, "") or ""
    tags = raw.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise MalformedEntry("tags: expected a list of strings")
    location = _opt(raw, "location", dict, "")
    loc: Mapping[str, Any] = location or {}
    latitude = _opt(loc, "latitude", float, "location.")
    longitude = _opt(loc, "longitude", float, "location.")
    if latitude is not None and not -90 <= latitude <= 90:
        raise MalformedEntry(f"location.latitude out of range: {latitude}")
    if longitude is not None and not -180 <= longitude <= 180:
        raise MalformedEntry(f"location.longitude out of range: {longitude}")
    text = _clean(text)
    return JournalEntry(
        uuid=_clean(uuid.strip()),
        created_at=created,
        modified_at=_date(raw, "modifiedDate", False),
        timezone=known_timezone(_clean(_opt(raw, "timeZone", str, ""))),
        text=text,
        tags=tuple(dict.fromkeys(_clean(t).strip() for t in tags if t.strip())),
        city=_clean(_opt(loc, "localityName", str, "location.")),
        country=_clean(_opt(loc, "country", str, "location.")),
        place_name=_clean(_opt(loc, "placeName", str, "location.")),
        latitude=latitude,
        longitude=longitude,
        location=_clean(dict(location)) if location is not None else None,
        weather=_clean(dict(w)) if (w := _opt(raw, "weather", dict, "")) is not None else None,
        photo_count=_count(raw, "photos"),
        video_count=_count(raw, "videos"),
        audio_count=_count(raw, "audios"),
        word_count=word_count(text),
    )


# --- storing -----------------------------------------------------------------------------------

_UPSERT = """
WITH old AS (SELECT id, text FROM entries WHERE chat_id = $18 AND uuid = $1),
up AS (
    INSERT INTO entries (uuid, created_at, modified_at, timezone, text, tags, city, country,
                         place_name, latitude, longitude, location, weather, photo_count,
                         video_count, audio_count, word_count, chat_id)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::jsonb, $13::jsonb, $14, $15,
            $16, $17, $18)
    ON CONFLICT (chat_id, uuid) DO UPDATE SET
        created_at = EXCLUDED.created_at, modified_at = EXCLUDED.modified_at,
        timezone = EXCLUDED.timezone, text = EXCLUDED.text, tags = EXCLUDED.tags,
        city = EXCLUDED.city, country = EXCLUDED.country, place_name = EXCLUDED.place_name,
        latitude = EXCLUDED.latitude, longitude = EXCLUDED.longitude,
        location = EXCLUDED.location, weather = EXCLUDED.weather,
        photo_count = EXCLUDED.photo_count, video_count = EXCLUDED.video_count,
        audio_count = EXCLUDED.audio_count, word_count = EXCLUDED.word_count, imported_at = now()
    WHERE EXCLUDED.modified_at > entries.modified_at
       OR (entries.modified_at IS NULL AND EXCLUDED.modified_at IS NOT NULL)
    RETURNING id, (xmax = 0) AS inserted, text
),
stale AS (
    DELETE FROM entry_embeddings v USING up, old
    WHERE v.chat_id = $18 AND v.entry_id = up.id AND NOT up.inserted
      AND old.text IS DISTINCT FROM up.text
)
SELECT id, inserted FROM up
"""

_UNEMBEDDED = """
SELECT e.id, e.text FROM entries e
WHERE e.chat_id = $3 AND e.uuid = ANY($1::text[])
  AND NOT EXISTS (SELECT 1 FROM entry_embeddings v
                  WHERE v.chat_id = e.chat_id AND v.entry_id = e.id AND v.model = $2)
ORDER BY e.id
"""


def _jsonb(value: dict[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, allow_nan=False)


def _args(e: JournalEntry) -> tuple[Any, ...]:
    return (
        e.uuid,
        e.created_at,
        e.modified_at,
        e.timezone,
        e.text,
        list(e.tags),
        e.city,
        e.country,
        e.place_name,
        e.latitude,
        e.longitude,
        _jsonb(e.location),
        _jsonb(e.weather),
        e.photo_count,
        e.video_count,
        e.audio_count,
        e.word_count,
    )


async def _upsert_batch(
    db: Database, chat_id: int, batch: list[JournalEntry], report: ImportReport
) -> None:
    async with db.transaction() as conn:
        for entry in batch:
            row = await conn.fetchrow(_UPSERT, *_args(entry), chat_id)
            if row is None:
                report.unchanged += 1
            elif row["inserted"]:
                report.imported += 1
            else:
                report.updated += 1


async def embed_entries(db: Queries, embedder: Embedder, chat_id: int, uuids: Sequence[str]) -> int:
    """Embed the chat's entries of ``uuids`` lacking a vector for the embedder's model; the
    count stored (the vectors carry the chat)."""
    rows = await db.fetch(_UNEMBEDDED, list(uuids), embedder.model, chat_id)
    if not rows:
        return 0
    texts = [str(r["text"]) for r in rows]
    vectors = await embedder.embed(texts, purpose=PURPOSE, chat_id=chat_id)  # the chat's cost
    pairs = [(int(r["id"]), v, chat_id) for r, v in zip(rows, vectors, strict=True)]
    return await store_vectors(db, "entry_embeddings", "entry_id", pairs, embedder.model)


async def import_dayone(
    db: Database,
    path_or_obj: str | os.PathLike[str] | Mapping[str, Any],
    *,
    chat_id: int,
    embedder: Embedder | None = None,
    progress: Progress | None = None,
    batch_size: int = BATCH,
) -> ImportReport:
    """Import a Day One export into ``chat_id``'s journal (see the module doc);
    ``JournalFormatError`` if unreadable."""
    raw_entries = read_export(path_or_obj)
    report = ImportReport(total=len(raw_entries))
    if progress is not None:
        progress.start(len(raw_entries))
    valid: list[JournalEntry] = []
    seen: set[str] = set()
    for index, raw in enumerate(raw_entries):
        try:
            entry = parse_entry(raw)
            if entry.uuid in seen:
                raise MalformedEntry("duplicate uuid in this export")
        except MalformedEntry as exc:
            uuid = raw.get("uuid") if isinstance(raw, Mapping) else None
            key: str | int = uuid.strip() if isinstance(uuid, str) and uuid.strip() else index
            report.skipped.append((key, str(exc)))
            log.warning("journal.entry_skipped", entry=key, index=index, reason=str(exc))
            if progress is not None:
                progress.advance()
            continue
        seen.add(entry.uuid)
        valid.append(entry)
    for start in range(0, len(valid), batch_size):
        batch = valid[start : start + batch_size]
        await _upsert_batch(db, chat_id, batch, report)
        if embedder is not None and report.embedding_error is None:
            try:  # new, changed, and earlier-imported entries still lacking a vector
                report.embedded += await embed_entries(
                    db, embedder, chat_id, [e.uuid for e in batch]
                )
            except Exception as exc:  # the entries are committed; the backfill embeds them
                report.embedding_error = f"{type(exc).__name__}: {exc}"
                log.warning("journal.embedding_failed", model=embedder.model, error=str(exc))
        if progress is not None:
            progress.advance(len(batch))
    if progress is not None:
        progress.finish()
    return report
