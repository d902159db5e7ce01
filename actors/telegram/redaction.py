"""Keeping the bot token out of logs: the token is part of every Bot API URL, and httpx logs each
request's URL. While a :class:`~actors.telegram.client.BotApiClient` is open, a
:class:`RedactToken` filter on the ``httpx`` logger rewrites those lines with the client's
``scrub`` (the token and its secret part replaced by :data:`REDACTED`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

REDACTED = "<redacted>"


class RedactToken(logging.Filter):
    """Rewrites httpx's "HTTP Request: POST https://.../bot<token>/..." log lines."""

    def __init__(self, scrub: Callable[[str], str]) -> None:
        super().__init__()
        self._scrub = scrub

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken record is not ours to fix
            return True
        record.msg, record.args = self._scrub(message), None
        return True
