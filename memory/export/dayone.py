"""A chat's journal written back as a Day One JSON export (``{"metadata": {"version": "1.0"},
"entries": [...]}``), which ``engram journal import`` (:mod:`memory.journal.dayone`) reads back
into the same rows: uuid, creation and modification dates, time zone, text, tags, location and
weather (as imported), and one ``photos``/``videos``/``audios`` item per counted attachment
(Day One's ``orderInEntry`` only: the files themselves were never imported).

Day One fields engram does not keep (``starred``, the device...) are not invented.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from runtime.db import Queries

DAYONE_VERSION = "1.0"

_ENTRIES = """
SELECT uuid, created_at, modified_at, timezone, text, tags, city, country, place_name,
       latitude, longitude, location, weather, photo_count, video_count, audio_count
FROM entries WHERE chat_id = $1 ORDER BY created_at, uuid
"""


def dayone_date(value: datetime) -> str:
    """Day One's UTC form (``2019-06-14T07:30:00Z``), with microseconds only when there are."""
    spec = "seconds" if value.microsecond == 0 else "microseconds"
    return value.astimezone(UTC).isoformat(timespec=spec).replace("+00:00", "Z")


def _location(row: Any) -> dict[str, Any] | None:
    if row["location"] is not None:
        return json.loads(row["location"])  # type: ignore[no-any-return]
    built = {
        "localityName": row["city"],
        "country": row["country"],
        "placeName": row["place_name"],
        "latitude": row["latitude"],
        "longitude": row["longitude"],
    }
    built = {k: v for k, v in built.items() if v is not None}
    return built or None


def entry_json(row: Any) -> dict[str, Any]:
    """One ``entries`` row as a Day One entry."""
    entry: dict[str, Any] = {"uuid": row["uuid"], "creationDate": dayone_date(row["created_at"])}
    if row["modified_at"] is not None:
        entry["modifiedDate"] = dayone_date(row["modified_at"])
    if row["timezone"] is not None:
        entry["timeZone"] = row["timezone"]
    entry["text"] = row["text"]
    entry["tags"] = list(row["tags"])
    location = _location(row)
    if location is not None:
        entry["location"] = location
    if row["weather"] is not None:
        entry["weather"] = json.loads(row["weather"])
    for key, count in (
        ("photos", row["photo_count"]),
        ("videos", row["video_count"]),
        ("audios", row["audio_count"]),
    ):
        if count:
            entry[key] = [{"orderInEntry": i} for i in range(count)]
    return entry


async def export_dayone(db: Queries, chat_id: int) -> dict[str, Any]:
    """``chat_id``'s journal as a Day One export document."""
    rows = await db.fetch(_ENTRIES, chat_id)
    return {"metadata": {"version": DAYONE_VERSION}, "entries": [entry_json(r) for r in rows]}
