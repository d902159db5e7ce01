"""Errors of the bot's actors (the Telegram protocol's own are in :mod:`actors.telegram.errors`)."""

from __future__ import annotations

from runtime.errors import EngramError


class NotCollectable(EngramError):
    """A persist hook did more than ``execute`` single INSERT/UPDATE/DELETE statements."""
