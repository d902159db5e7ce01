"""Telegram Bot API client on httpx (runs under trio): one request per call, no retries.

Retries, backoff, chunking and the HTML fallback belong to the sender; this client only maps
every failure onto ``actors.telegram.errors``: ``ApiError`` subclasses for ``ok: false``
answers, ``PreConnectError``/``MaybeDeliveredError`` for network failures.

The token is part of every URL, so it must never leak: network errors are re-raised without
chaining the httpx exception (which carries the request URL), messages are scrubbed, the
``httpx`` logger gets a redacting filter while a client is open
(:mod:`actors.telegram.redaction`), and ``repr`` hides it.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any

import httpx

from actors.telegram.capped import read_capped
from actors.telegram.errors import (
    FileTooLarge,
    NetworkError,
    UnexpectedResponse,
    UnsupportedMethod,
    api_error_class,
    classify_exception,
)
from actors.telegram.keyboards import (
    BotCommand,
    InlineKeyboard,
    commands_json,
    parse_bot_commands,
)
from actors.telegram.redaction import REDACTED, RedactToken
from actors.telegram.settings import BOT_TOKEN_RE
from actors.telegram.types import (
    BotUser,
    FileInfo,
    WebhookInfo,
    parse_bot_user,
    parse_file_info,
    parse_sent_message_id,
    parse_webhook_info,
)
from actors.telegram.update_batch import UpdateBatch, parse_update_batch
from runtime.concurrency import AsyncClosing

DEFAULT_BASE_URL = "https://api.telegram.org"
_JSON = {"content-type": "application/json"}
MAX_UPLOAD_BYTES = 50 * 1000 * 1000  # sendDocument: "files of any type of up to 50 MB"
_FILE_PATH_RE = re.compile(r"[A-Za-z0-9_.\-/]{1,512}")
#: How Bot API servers and emulators say they lack a method (Telegram itself: 404 "Not Found").
_NO_SUCH_METHOD = re.compile(
    r"method not found|unknown method|not implemented|no such method", re.IGNORECASE
)


def _phrase(status: int) -> str:
    """The standard reason phrase of ``status`` (HTTP/2 answers carry none)."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "error"


def _params(**values: object) -> dict[str, object]:
    return {k: v for k, v in values.items() if v is not None}


Markup = InlineKeyboard | Mapping[str, object]


def _markup(markup: Markup | None) -> dict[str, object] | None:
    """``reply_markup`` as JSON: an :class:`InlineKeyboard` or an already built object."""
    if markup is None:
        return None
    return markup.to_json() if isinstance(markup, InlineKeyboard) else dict(markup)


class BotApiClient(AsyncClosing):
    """Async Bot API client; use ``async with BotApiClient(token) as bot:`` or call ``aclose``."""

    def __init__(
        self,
        token: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        timeout: float = 30.0,
        connect_timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not BOT_TOKEN_RE.fullmatch(token):
            raise ValueError("bot token has an invalid format (expected <digits>:<secret>)")
        self._token = token
        self._secret = token.split(":", 1)[1]
        self._base = base_url.rstrip("/")
        self._connect_timeout = connect_timeout
        self._timeout_s = timeout
        self._timeout = httpx.Timeout(timeout, connect=connect_timeout)
        self._http = httpx.AsyncClient(timeout=self._timeout, transport=transport)
        self._filter = RedactToken(self.scrub)
        logging.getLogger("httpx").addFilter(self._filter)
        #: the last call Telegram answered, the last one failed on its side (unreachable, 5xx,
        #: token refused): the heartbeat's view of the Bot API, from every caller
        self.last_ok: datetime | None = None
        self.last_failure: datetime | None = None

    def __repr__(self) -> str:
        return f"BotApiClient(base_url={self._base!r}, token={REDACTED!r})"

    async def aclose(self) -> None:
        """Close the connection pool."""
        logging.getLogger("httpx").removeFilter(self._filter)
        await self._http.aclose()

    def scrub(self, text: str) -> str:
        """``text`` with the bot token (and its secret part) replaced by ``<redacted>``."""
        return text.replace(self._token, REDACTED).replace(self._secret, REDACTED)

    # --- transport -----------------------------------------------------------------------------

    def _network_error(self, method: str, exc: BaseException) -> NetworkError:
        kind = classify_exception(exc) or NetworkError
        detail = self.scrub(str(exc) or repr(exc))
        return kind(method, detail, cause_type=type(exc).__name__)

    def _api_error(self, method: str, response: httpx.Response) -> Exception:
        """The error for an answer that is not ``200 {"ok": true, ...}``: Telegram's own
        ``description`` when it sent one; otherwise the HTTP status with the start of the body,
        said to be no Bot API answer. A method the server does not know (404 or 501, or a
        description saying so) is :class:`UnsupportedMethod`, naming it."""
        try:
            body: object = response.json()
        except (ValueError, UnicodeDecodeError):
            body = None
        description: object = None
        if not isinstance(body, Mapping) or body.get("ok") is not False:
            if response.is_success:
                return UnexpectedResponse(f"{method}: HTTP {response.status_code}: no Bot API body")
            text = " ".join(response.text.split())[:200] if response.content else ""
            reason = response.reason_phrase or _phrase(response.status_code)
            description = f"{reason} (not a Bot API answer{': ' + text if text else ''})"
            body = {}
        code = body.get("error_code")
        if not isinstance(code, int) or isinstance(code, bool):
            code = response.status_code
        if description is None:
            description = body.get("description")
        if not isinstance(description, str):
            description = response.reason_phrase or _phrase(response.status_code)
        retry_after: float | None = None
        migrate: int | None = None
        params = body.get("parameters")
        if isinstance(params, Mapping):
            value = params.get("retry_after")
            if isinstance(value, int | float) and not isinstance(value, bool):
                retry_after = float(value)
            value = params.get("migrate_to_chat_id")
            if isinstance(value, int) and not isinstance(value, bool):
                migrate = value
        kind = api_error_class(code)
        if method != "downloadFile" and (
            code in (404, 501) or _NO_SUCH_METHOD.search(description) is not None
        ):
            kind = UnsupportedMethod
        return kind(
            method,
            response.status_code,
            code,
            self.scrub(description)[:500],
            retry_after=retry_after,
            migrate_to_chat_id=migrate,
        )

    async def call(
        self,
        method: str,
        params: Mapping[str, object] | None = None,
        *,
        read_timeout: float | None = None,
        files: Mapping[str, tuple[str, bytes, str]] | None = None,
    ) -> object:
        """POST ``params`` to ``method`` (JSON; with ``files``, an upload as multipart/form-data)
        and return its ``result``; raises TelegramError."""
        timeout = self._timeout
        if read_timeout is not None:
            timeout = httpx.Timeout(
                self._timeout_s, connect=self._connect_timeout, read=read_timeout
            )
        # ASCII-escaped JSON: a stray lone surrogate in a reply cannot break the encoding
        content = json.dumps(dict(params or {}), separators=(",", ":"), ensure_ascii=True)
        request: dict[str, Any] = {"content": content.encode("ascii"), "headers": _JSON}
        if files is not None:  # an upload
            request = {"data": {k: str(v) for k, v in (params or {}).items()}, "files": files}
        error: Exception
        try:
            url = f"{self._base}/bot{self._token}/{method}"
            response = await self._http.post(url, timeout=timeout, **request)
        except (httpx.HTTPError, httpx.InvalidURL, OSError) as exc:
            error = self._network_error(method, exc)
            self.last_failure = datetime.now(UTC)
        else:
            try:
                body: object = response.json()
            except (ValueError, UnicodeDecodeError):
                body = None
            if response.is_success and isinstance(body, Mapping) and body.get("ok") is True:
                self.last_ok = datetime.now(UTC)
                return body.get("result")
            error = self._api_error(method, response)
            if response.status_code >= 500 or response.status_code == 401:
                self.last_failure = datetime.now(UTC)
            else:  # Telegram answered: a refusal about this call (400, 403, 429) is no outage
                self.last_ok = datetime.now(UTC)
        raise error  # raised outside the except block: no __context__ holding the URL

    # --- methods -------------------------------------------------------------------------------

    async def get_me(self) -> BotUser:
        """getMe: the bot's own user."""
        return parse_bot_user(await self.call("getMe"))

    async def get_updates(
        self,
        offset: int | None = None,
        timeout: int = 0,  # noqa: ASYNC109 - the Bot API long-poll parameter
        allowed_updates: Sequence[str] | None = None,
        *,
        limit: int | None = None,
    ) -> UpdateBatch:
        """getUpdates as a long poll (read timeout = ``timeout`` + 10 s)."""
        params = _params(
            offset=offset,
            timeout=timeout,
            limit=limit,
            allowed_updates=None if allowed_updates is None else list(allowed_updates),
        )
        result = await self.call("getUpdates", params, read_timeout=timeout + 10.0)
        return parse_update_batch(result)

    async def send_message(
        self,
        chat_id: int | str,
        text: str,
        parse_mode: str | None = None,
        *,
        reply_to_message_id: int | None = None,
        disable_link_preview: bool = False,
        disable_notification: bool = False,
        reply_markup: Markup | None = None,
    ) -> int:
        """sendMessage; returns the new message's id. Replies survive a deleted target."""
        params = _params(
            chat_id=chat_id,
            text=text,
            parse_mode=parse_mode,
            reply_parameters=None
            if reply_to_message_id is None
            else {"message_id": reply_to_message_id, "allow_sending_without_reply": True},
            link_preview_options={"is_disabled": True} if disable_link_preview else None,
            disable_notification=True if disable_notification else None,
            reply_markup=_markup(reply_markup),
        )
        return parse_sent_message_id(await self.call("sendMessage", params))

    async def edit_message_text(
        self,
        chat_id: int | str,
        message_id: int,
        text: str,
        parse_mode: str | None = None,
        *,
        reply_markup: Markup | None = None,
        disable_link_preview: bool = False,
    ) -> None:
        """editMessageText of a message the bot sent; without ``reply_markup`` its inline
        keyboard is removed. 400 "message is not modified" when nothing would change."""
        params = _params(
            chat_id=chat_id,
            message_id=message_id,
            text=text,
            parse_mode=parse_mode,
            link_preview_options={"is_disabled": True} if disable_link_preview else None,
            reply_markup=_markup(reply_markup),
        )
        await self.call("editMessageText", params)

    async def edit_message_reply_markup(
        self, chat_id: int | str, message_id: int, reply_markup: Markup | None = None
    ) -> None:
        """editMessageReplyMarkup: replace the message's inline keyboard (None removes it)."""
        params = _params(chat_id=chat_id, message_id=message_id, reply_markup=_markup(reply_markup))
        await self.call("editMessageReplyMarkup", params)

    async def set_my_commands(
        self, commands: Sequence[BotCommand], *, language_code: str | None = None
    ) -> None:
        """setMyCommands (default scope): the menu Telegram shows for ``/``."""
        params = _params(commands=commands_json(commands), language_code=language_code)
        await self.call("setMyCommands", params)

    async def get_my_commands(self, *, language_code: str | None = None) -> tuple[BotCommand, ...]:
        """getMyCommands (default scope)."""
        result = await self.call("getMyCommands", _params(language_code=language_code))
        return parse_bot_commands(result)

    async def send_chat_action(self, chat_id: int | str, action: str = "typing") -> None:
        """sendChatAction (shown for 5 s or until the next message)."""
        await self.call("sendChatAction", {"chat_id": chat_id, "action": action})

    async def answer_callback_query(
        self, callback_query_id: str, text: str | None = None, *, show_alert: bool = False
    ) -> None:
        """answerCallbackQuery: stop the button's spinner (optionally with a notification)."""
        params = _params(
            callback_query_id=callback_query_id, text=text, show_alert=show_alert or None
        )
        await self.call("answerCallbackQuery", params)

    async def send_document(
        self, chat_id: int | str, name: str, data: bytes, *, mime_type: str = "application/json"
    ) -> int:
        """sendDocument: ``data`` uploaded as the file ``name`` (a bot may send up to
        :data:`MAX_UPLOAD_BYTES`); the new message's id."""
        files = {"document": (name, data, mime_type)}
        result = await self.call(
            "sendDocument", {"chat_id": chat_id}, files=files, read_timeout=300
        )
        return parse_sent_message_id(result)

    async def get_file(self, file_id: str) -> FileInfo:
        """getFile: the file's path for ``download_file`` (valid for at least an hour)."""
        return parse_file_info(await self.call("getFile", {"file_id": file_id}))

    async def download_file(self, file_path: str, max_bytes: int) -> bytes:
        """Download a file by its getFile path; ``FileTooLarge`` past ``max_bytes``.

        Refuses on a too large Content-Length before reading the body, and stops reading
        as soon as a body without (or with a lying) Content-Length passes the limit.
        """
        if not _FILE_PATH_RE.fullmatch(file_path) or ".." in file_path or file_path.startswith("/"):
            raise ValueError(f"refusing suspicious file path {file_path!r}")
        url = f"{self._base}/file/bot{self._token}/{file_path}"
        method = "downloadFile"
        error: Exception
        try:
            async with self._http.stream("GET", url) as response:
                if not response.is_success:
                    await response.aread()
                    error = self._api_error(method, response)
                else:
                    declared = response.headers.get("content-length")
                    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
                        raise FileTooLarge(int(declared), max_bytes)
                    return await read_capped(response, max_bytes)
        except (httpx.HTTPError, httpx.InvalidURL, OSError) as exc:
            error = self._network_error(method, exc)
        raise error

    async def set_webhook(
        self,
        url: str,
        secret_token: str,
        allowed_updates: Sequence[str] | None = None,
        *,
        drop_pending_updates: bool = False,
        max_connections: int | None = None,
    ) -> None:
        """setWebhook; Telegram then sends ``secret_token`` in X-Telegram-Bot-Api-Secret-Token."""
        params = _params(
            url=url,
            secret_token=secret_token,
            allowed_updates=None if allowed_updates is None else list(allowed_updates),
            drop_pending_updates=drop_pending_updates,
            max_connections=max_connections,
        )
        await self.call("setWebhook", params)

    async def delete_webhook(self, drop_pending_updates: bool = False) -> None:
        """deleteWebhook (needed before getUpdates can be used)."""
        await self.call("deleteWebhook", {"drop_pending_updates": drop_pending_updates})

    async def get_webhook_info(self) -> WebhookInfo:
        """getWebhookInfo."""
        return parse_webhook_info(await self.call("getWebhookInfo"))
