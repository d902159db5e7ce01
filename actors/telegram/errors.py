"""Errors of the actors package: the Telegram edge (Bot API, updates, HTML chunking).

``classify_exception`` is the network-error rule used by the sender's retry policy: it walks
``__cause__``/``__context__`` chains and exception-group members and decides whether a failed
request certainly never reached Telegram (``PreConnectError``: safe to resend) or may have been
delivered (``MaybeDeliveredError``: a resend may duplicate the message).
"""

from __future__ import annotations

import errno
import socket
import ssl
from collections import deque
from collections.abc import Mapping

import h11
import httpcore
import httpx
import trio

from runtime.errors import EngramError, SettingsError


class TelegramError(EngramError):
    """Base class of every error of the Telegram edge (downloads and voice too)."""


class ApiError(TelegramError):
    """Telegram answered ``{"ok": false, ...}`` (or a non-JSON error status)."""

    def __init__(
        self,
        method: str,
        status: int,
        error_code: int,
        description: str,
        *,
        retry_after: float | None = None,
        migrate_to_chat_id: int | None = None,
    ) -> None:
        super().__init__(f"{method}: {error_code} {description}")
        self.method, self.status, self.error_code = method, status, error_code
        self.description, self.retry_after = description, retry_after
        self.migrate_to_chat_id = migrate_to_chat_id


class BadRequest(ApiError):
    """400: the request is wrong (bad parameter, chat not found, malformed entities...)."""

    @property
    def is_parse_error(self) -> bool:
        """True for "can't parse entities": resend the text without ``parse_mode``."""
        return "can't parse entities" in self.description.lower()

    @property
    def is_not_modified(self) -> bool:
        """True for "message is not modified": an edit found the message already so."""
        return "message is not modified" in self.description.lower()


class Unauthorized(ApiError):
    """401: the bot token is wrong or revoked."""


class Forbidden(ApiError):
    """403: the bot may not write there (blocked by the user, kicked from the group)."""


class NotFound(ApiError):
    """404: unknown method, or a malformed token, or an unknown file path."""


class UnsupportedMethod(NotFound):
    """404 or 501 for a method (not a file): the Bot API server does not know the method — a
    local Bot API server or an emulator that lacks it. The message names the method."""

    def __str__(self) -> str:
        return (
            f"{self.method}: this Bot API server does not support {self.method} "
            f"({self.error_code} {self.description})"
        )


class Conflict(ApiError):
    """409: a webhook is set while polling, or another getUpdates request is running."""


class RateLimited(ApiError):
    """429: flood control; wait ``retry_after`` seconds before the next request."""


class ServerError(ApiError):
    """5xx: Telegram (or a proxy in front of it) failed; usually transient."""


_API_ERROR_CLASSES: Mapping[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    429: RateLimited,
}


def api_error_class(code: int) -> type[ApiError]:
    """The ApiError subclass for a Telegram ``error_code`` (or HTTP status)."""
    if code >= 500:
        return ServerError
    return _API_ERROR_CLASSES.get(code, ApiError)


# --- the request may or may not have been sent -------------------------------------------------


class NetworkError(TelegramError):
    """The request failed below HTTP: no Bot API answer was received.

    ``detail`` is a token-free description of the underlying exception, ``cause_type`` its
    class name; the original exception is deliberately not chained (it holds the URL).
    """

    may_have_been_delivered: bool = True

    def __init__(self, method: str, detail: str, *, cause_type: str = "") -> None:
        super().__init__(f"{method}: {cause_type or 'network error'}: {detail}")
        self.method = method
        self.detail = detail
        self.cause_type = cause_type


class PreConnectError(NetworkError):
    """The request never reached Telegram (refused, DNS, unreachable, connect timeout).

    Resending is safe: Telegram cannot have acted on it.
    """

    may_have_been_delivered = False


class MaybeDeliveredError(NetworkError):
    """The request was (possibly) sent but no answer came (reset, read timeout, disconnect).

    Telegram may have acted on it; resending a message may duplicate it.
    """

    may_have_been_delivered = True


# --- other edge errors -------------------------------------------------------------------------


class UnexpectedResponse(TelegramError):
    """Telegram answered ``ok: true`` with a result of an unexpected shape."""


class FileTooLarge(TelegramError):
    """A file download was refused because it is larger than the caller's limit."""

    def __init__(self, size: int | None, limit: int) -> None:
        shown = "unknown size" if size is None else f"{size} bytes"
        super().__init__(f"file too large: {shown} exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class DownloadFailed(TelegramError):
    """getFile or the download failed (not for size); ``retryable`` if a retry may help."""

    def __init__(self, detail: str, *, status: int | None = None, retryable: bool = False) -> None:
        super().__init__(detail)
        self.detail, self.status, self.retryable = detail, status, retryable


class MalformedUpdate(TelegramError):
    """A JSON value is not a Telegram update we can read.

    ``update_id`` is set when it could be read, so a poller can still advance its offset.
    """

    def __init__(self, reason: str, *, update_id: int | None = None) -> None:
        super().__init__(f"malformed update: {reason}")
        self.reason = reason
        self.update_id = update_id


class InvalidKeyboard(TelegramError, ValueError):
    """An inline keyboard Telegram would refuse (empty text, callback_data over 64 bytes, no
    or two actions on a button, over 100 buttons); raised when it is built, not when sent."""


class InvalidBotCommand(TelegramError, ValueError):
    """A command-menu entry Telegram would refuse (name not 1-32 of a-z0-9_, description not
    1-256 characters, over 100 entries)."""


class MalformedHtml(TelegramError, ValueError):
    """Text is not valid Telegram HTML (unsupported or unbalanced tag, stray ``<``)."""

    def __init__(self, reason: str, *, offset: int) -> None:
        super().__init__(f"malformed HTML at offset {offset}: {reason}")
        self.reason = reason
        self.offset = offset


# --- classification ----------------------------------------------------------------------------

NetworkErrorClass = type[PreConnectError] | type[MaybeDeliveredError]

_PRE_CONNECT_TYPES: tuple[type[BaseException], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.ProxyError,
    httpx.UnsupportedProtocol,
    httpx.LocalProtocolError,
    httpcore.ConnectError,
    httpcore.ConnectTimeout,
    httpcore.PoolTimeout,
    httpcore.ProxyError,
    httpcore.UnsupportedProtocol,
    httpcore.LocalProtocolError,
    socket.gaierror,
    ConnectionRefusedError,
    ssl.SSLCertVerificationError,
    PreConnectError,
)
# Write errors are counted as "maybe delivered": conservative, the phase is not certain.
_MAYBE_DELIVERED_TYPES: tuple[type[BaseException], ...] = (
    httpx.ReadTimeout,
    httpx.WriteTimeout,
    httpx.ReadError,
    httpx.WriteError,
    httpx.CloseError,
    httpx.RemoteProtocolError,
    httpcore.ReadTimeout,
    httpcore.WriteTimeout,
    httpcore.ReadError,
    httpcore.WriteError,
    httpcore.RemoteProtocolError,
    h11.RemoteProtocolError,
    ConnectionResetError,
    ConnectionAbortedError,
    BrokenPipeError,
    TimeoutError,
    trio.BrokenResourceError,
    MaybeDeliveredError,
    # generic transport failures whose phase is unknown
    httpx.TransportError,
    httpcore.NetworkError,
    httpcore.TimeoutException,
)
_PRE_CONNECT_ERRNOS = frozenset(
    {
        errno.ECONNREFUSED,
        errno.ENETUNREACH,
        errno.EHOSTUNREACH,
        errno.ENETDOWN,
        errno.EHOSTDOWN,
        errno.EADDRNOTAVAIL,
    }
)
_MAYBE_DELIVERED_ERRNOS = frozenset(
    {errno.ECONNRESET, errno.ECONNABORTED, errno.EPIPE, errno.ETIMEDOUT}
)
_MAX_NODES = 1000


def _classify_one(exc: BaseException) -> NetworkErrorClass | None:
    if isinstance(exc, _PRE_CONNECT_TYPES):
        return PreConnectError
    if isinstance(exc, _MAYBE_DELIVERED_TYPES):
        return MaybeDeliveredError
    if isinstance(exc, OSError) and exc.errno is not None:
        if exc.errno in _PRE_CONNECT_ERRNOS:
            return PreConnectError
        if exc.errno in _MAYBE_DELIVERED_ERRNOS:
            return MaybeDeliveredError
    return None


def _linked(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    if isinstance(exc, BaseExceptionGroup):
        out.extend(exc.exceptions)
    if exc.__cause__ is not None:
        out.append(exc.__cause__)
    elif exc.__context__ is not None and not exc.__suppress_context__:
        out.append(exc.__context__)
    return out


def classify_exception(exc: BaseException) -> NetworkErrorClass | None:
    """``PreConnectError``/``MaybeDeliveredError`` (the class) for a network failure, else None.

    Breadth first over the exception, its cause/context and exception-group members: the
    shallowest classified exceptions decide, because the outer layer (httpx's ``ConnectError``
    around a reset during the TLS handshake) knows the request phase best. Within one depth a
    single "maybe delivered" outweighs any number of "pre-connect" findings.
    """
    seen: set[int] = set()
    level: deque[BaseException] = deque([exc])
    while level and len(seen) < _MAX_NODES:
        found: set[NetworkErrorClass] = set()
        following: deque[BaseException] = deque()
        for item in level:
            if id(item) in seen:
                continue
            seen.add(id(item))
            kind = _classify_one(item)
            if kind is not None:
                found.add(kind)
            following.extend(_linked(item))
        if MaybeDeliveredError in found:
            return MaybeDeliveredError
        if PreConnectError in found:
            return PreConnectError
        level = following
    return None


def is_transient(exc: BaseException) -> bool:
    """True when a later retry may succeed: network failures, 429, 5xx (and 409 is not)."""
    if isinstance(exc, RateLimited | ServerError):
        return True
    return classify_exception(exc) is not None


class VoiceError(EngramError):
    """Base class of voice failures; ``str(exc)`` is a user-facing reply, ``detail`` the why."""

    def __init__(self, user_message: str, *, detail: str = "") -> None:
        super().__init__(user_message)
        self.user_message = user_message
        self.detail = detail or user_message


class VoiceTooLarge(VoiceError):
    """The voice message is over the size limit; it was not (fully) downloaded."""

    def __init__(self, size: int | None, limit: int) -> None:
        super().__init__(
            f"That voice message is too large for me to transcribe (over {human_size(limit)}).",
            detail=f"voice of {'unknown size' if size is None else f'{size} bytes'} "
            f"exceeds {limit} bytes",
        )
        self.size, self.limit = size, limit


class PhotoError(VoiceError):
    """A photo could not be read (too large, not downloaded, no image); ``str()``: the reply."""


class TranscriptionFailed(VoiceError):
    """Download or transcription failed; ``retryable`` if a later attempt may succeed."""

    def __init__(
        self,
        user_message: str,
        *,
        detail: str = "",
        status: int | None = None,
        retryable: bool = False,
    ) -> None:
        super().__init__(user_message, detail=detail)
        self.status = status
        self.retryable = retryable


def human_size(limit: int) -> str:
    mib = 1024 * 1024
    if limit >= mib:
        return f"{limit / mib:g} MB"
    return f"{max(1, limit // 1024)} KB"


CONFLICT_HELP = (
    "Telegram refused getUpdates (409 Conflict): {detail}. Long polling cannot run while a "
    "webhook is set or another instance is polling: run `engram telegram delete-webhook` "
    "(or use webhook mode), or stop the other engram instance, then start again."
)


class TokenRejected(SettingsError):
    """Telegram answered 401 to the bot token: the same configuration error (exit code 2) from
    every command that talks to Telegram, ``serve`` included."""

    def __init__(self) -> None:
        super().__init__("TELEGRAM_BOT_TOKEN", "Telegram rejected the token")


class PollingConflict(EngramError):
    """getUpdates answered 409: a webhook is set, or another poller uses the same token."""

    def __init__(self, detail: str) -> None:
        super().__init__(CONFLICT_HELP.format(detail=detail.rstrip(". ")))
        self.detail = detail
