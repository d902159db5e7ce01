"""Message contents beyond text and voice: a photo's sizes, and the kinds engram does not read."""

from __future__ import annotations

import attrs


@attrs.frozen
class PhotoSize:
    """One size of a photo (Telegram sends several, smallest first)."""

    file_id: str
    file_unique_id: str
    width: int
    height: int
    file_size: int | None = None


#: message kinds we do not read, named by their Message field (first present wins)
OTHER_KINDS: tuple[str, ...] = (
    "sticker",
    "document",
    "video_note",
    "video",
    "animation",
    "audio",
    "location",
    "venue",
    "contact",
    "poll",
    "dice",
    "game",
    "story",
)


def photo_sizes(value: object) -> tuple[PhotoSize, ...]:
    """A message's ``photo`` (a JSON list of PhotoSize); ValueError for a wrong shape."""
    if not isinstance(value, list):
        raise ValueError("is not a list")
    out = []
    for item in value:
        if not isinstance(item, dict):
            raise ValueError("a size is not an object")
        ids = (item.get("file_id"), item.get("file_unique_id"))
        dims = (item.get("width"), item.get("height"))
        size = item.get("file_size")
        if not all(isinstance(v, str) for v in ids) or not all(_is_int(v) for v in dims):
            raise ValueError("a size lacks file_id, file_unique_id, width or height")
        if size is not None and not _is_int(size):
            raise ValueError("file_size is not an integer")
        out.append(PhotoSize(str(ids[0]), str(ids[1]), int(dims[0]), int(dims[1]), size))  # type: ignore[arg-type]
    return tuple(out)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
