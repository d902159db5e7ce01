"""The errors of local chats."""

from __future__ import annotations

from runtime.errors import EngramError


class LocalChatError(EngramError):
    """Base of the local chat's errors."""


class TokenProblem(LocalChatError):
    """The local token file cannot be used (readable by others, empty); the message says why."""


class BadFrame(LocalChatError):
    """A frame that is not one of the protocol's (:mod:`actors.local.frames`)."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
