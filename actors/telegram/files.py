"""Downloading a file a message carries: getFile, then a capped download (voice notes and
photos use it; each maps the two errors to its own reply).

``fetch_file`` refuses before downloading when a size is known to be over ``max_bytes`` (the
message's, then getFile's; getFile itself refuses files over 20 MB with "file is too big") and
stops a download that passes the cap: :class:`FileTooLarge`. Any other failure is a
:class:`DownloadFailed` (``retryable`` for network errors, 429 and 5xx).
"""

from __future__ import annotations

from typing import Protocol

from actors.telegram.errors import (
    BadRequest,
    DownloadFailed,
    FileTooLarge,
    TelegramError,
    is_transient,
)
from actors.telegram.types import FileInfo


class TelegramFiles(Protocol):
    """What downloading needs of ``actors.telegram.client.BotApiClient``."""

    async def get_file(self, file_id: str) -> FileInfo: ...

    async def download_file(self, file_path: str, max_bytes: int) -> bytes: ...


async def fetch_file(
    bot: TelegramFiles, file_id: str, max_bytes: int, declared_size: int | None = None
) -> tuple[str, bytes]:
    """The file's getFile path and its bytes (never empty)."""
    if declared_size is not None and declared_size > max_bytes:
        raise FileTooLarge(declared_size, max_bytes)
    try:
        info = await bot.get_file(file_id)
        if info.file_size is not None and info.file_size > max_bytes:
            raise FileTooLarge(info.file_size, max_bytes)
        if info.file_path is None:
            raise DownloadFailed("getFile returned no file_path")
        data = await bot.download_file(info.file_path, max_bytes)
    except (FileTooLarge, DownloadFailed):
        raise
    # Telegram errors are token-free by construction, so they are safe to chain.
    except BadRequest as exc:
        if "too big" in exc.description.lower():  # getFile refuses files over 20 MB
            raise FileTooLarge(declared_size, max_bytes) from exc
        raise DownloadFailed(str(exc), status=exc.status) from exc
    except TelegramError as exc:
        raise DownloadFailed(str(exc), retryable=is_transient(exc)) from exc
    if not data:
        raise DownloadFailed("the downloaded file is empty")
    return info.file_path, data
