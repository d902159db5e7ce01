"""Errors of the bot's actors (the Telegram protocol's own are in :mod:`actors.telegram.errors`)."""

from __future__ import annotations

from runtime.errors import EngramError


class NotCollectable(EngramError):
    """A persist hook did more than ``execute`` single INSERT/UPDATE/DELETE statements."""


class ModelUnavailable(EngramError):
    """The model stayed unreachable (connection, timeout, 429, 5xx, 529) through a turn's
    retries: the turn is postponed, not answered. ``cause``: the last model error."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(f"model unavailable: {type(cause).__name__}: {cause}")
        self.cause = cause


class ChatErased(EngramError):
    """The chat was erased (``/forget everything``) while its actor held some of it: the actor
    forgets what it holds in memory and reads its inbox afresh."""


class Unreachable(EngramError):
    """A chat's own transport (a local chat's socket, :mod:`actors.local`) has no one to deliver
    to now: the sender leaves the row open until the transport wakes it again."""
