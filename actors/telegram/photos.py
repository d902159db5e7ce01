"""Photos -> image content for the model (issue 23 item 4).

:func:`choose_size` picks the largest size of a photo under the cap (``PHOTO_MAX_BYTES`` and the
chat model's own image limit); a size without ``file_size`` counts as fitting (the download is
capped anyway), and one found over the cap when fetched gives way to the next smaller size.
:func:`download_photos` fetches each photo of a message or an album through
:func:`actors.telegram.files.fetch_file` (the voice download's path) and returns
``ImageBlock``s, the type read from the bytes (:func:`image_type`: JPEG, PNG, GIF, WebP — what
the model APIs take). Every failure is a :class:`~actors.telegram.errors.PhotoError` whose
``str()`` is the reply for the person.
"""

from __future__ import annotations

from collections.abc import Sequence

from actors.telegram.errors import DownloadFailed, FileTooLarge, PhotoError, human_size
from actors.telegram.files import TelegramFiles, fetch_file
from actors.telegram.media import PhotoSize
from memory.llm.protocol import ImageBlock

DEFAULT_MAX_BYTES = 10 * 1024 * 1024
DOWNLOAD_FAILED = "I couldn't download that photo from Telegram. Please try sending it again."
NOT_AN_IMAGE = "I couldn't read that photo (not an image format I know)."
TOO_LARGE = "That photo is too large for me to look at (over {limit})."


def fitting_sizes(sizes: Sequence[PhotoSize], max_bytes: int) -> list[PhotoSize]:
    """The sizes whose known ``file_size`` is within ``max_bytes``, largest (by pixels) first."""
    fitting = [s for s in sizes if s.file_size is None or s.file_size <= max_bytes]
    return sorted(fitting, key=lambda s: (s.width * s.height, s.file_size or 0), reverse=True)


def choose_size(sizes: Sequence[PhotoSize], max_bytes: int) -> PhotoSize | None:
    """The largest size (by pixels) whose known ``file_size`` is within ``max_bytes``."""
    return next(iter(fitting_sizes(sizes, max_bytes)), None)


def image_type(data: bytes) -> str | None:
    """The MIME type of an image the model APIs take, from its first bytes; None otherwise."""
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


async def download_photo(
    bot: TelegramFiles, sizes: Sequence[PhotoSize], max_bytes: int = DEFAULT_MAX_BYTES
) -> ImageBlock:
    """One photo's best size under the cap, as an image block: a size whose ``file_size`` the
    update left out and that turns out over the cap gives way to the next smaller one."""
    for size in fitting_sizes(sizes, max_bytes):
        try:
            _, data = await fetch_file(bot, size.file_id, max_bytes, size.file_size)
        except FileTooLarge:
            continue
        except DownloadFailed as exc:
            raise PhotoError(DOWNLOAD_FAILED, detail=exc.detail) from exc
        break
    else:
        raise PhotoError(TOO_LARGE.format(limit=human_size(max_bytes)))
    media_type = image_type(data)
    if media_type is None:
        raise PhotoError(NOT_AN_IMAGE, detail=f"unknown image bytes {data[:8]!r}")
    return ImageBlock(media_type, data)


async def download_photos(
    bot: TelegramFiles,
    photos: Sequence[Sequence[PhotoSize]],
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> tuple[ImageBlock, ...]:
    """Every photo (an album's, in order) as image blocks; the first failure raises."""
    return tuple([await download_photo(bot, sizes, max_bytes) for sizes in photos])
