"""A strict fake Telegram Bot API: real HTTP/1.1 (h11 on trio) on 127.0.0.1, a free port.

    async with run_fake_bot_api(token=TOKEN) as fake:
        client = BotApiClient(TOKEN, base_url=fake.base_url)
        fake.push_message(chat_id=42, text="hi")            # served by getUpdates
        fake.fail_next("sendMessage", Failure.rate_limited(3), times=2)
        fake.fail_while("sendMessage", Failure.server_error(502))   # an outage, until ...
        fake.stop_failing("sendMessage")
        ...
        assert fake.sent_texts(42) == ["hello"]

Strict like Telegram, and stricter where that catches our bugs: the token in the path, method
names (exact case), parameter presence and types, UNKNOWN PARAMETERS ARE REJECTED (Telegram
ignores them), text <= 4096 UTF-16 units after entity parsing, HTML parsed the way Telegram
does ("can't parse entities"), chat actions, secret_token, allowed_updates. MarkdownV2 is
accepted but not entity-checked. Every call is recorded in ``fake.calls``. Inline keyboards,
message edits, taps on buttons and the command menu: :mod:`fakes.bot_keyboards`.
"""

from __future__ import annotations

import itertools
import json
import re
import socket
import struct
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager, suppress
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import attrs
import h11
import trio

from fakes.bot_documents import (
    DOCUMENT_SPECS,
    DocumentFailure,
    DocumentMethods,
    Upload,
    parse_multipart,
)
from fakes.bot_drafts import DRAFT_SPECS, DraftFailure, DraftMethods
from fakes.bot_keyboards import KEYBOARD_SPECS, KeyboardFailure, KeyboardMethods, check_markup

DEFAULT_TOKEN = "123456789:AAHfakeTokenForTests_abcdefghijk-XYZ0"
KNOWN_UPDATE_KINDS = frozenset(
    {
        "message",
        "edited_message",
        "channel_post",
        "edited_channel_post",
        "business_connection",
        "business_message",
        "edited_business_message",
        "deleted_business_messages",
        "message_reaction",
        "message_reaction_count",
        "inline_query",
        "chosen_inline_result",
        "callback_query",
        "shipping_query",
        "pre_checkout_query",
        "purchased_paid_media",
        "poll",
        "poll_answer",
        "my_chat_member",
        "chat_member",
        "chat_join_request",
        "chat_boost",
        "removed_chat_boost",
        "stopped_message_generation",
    }
)
_DEFAULT_EXCLUDED = frozenset({"chat_member", "message_reaction", "message_reaction_count"})
CHAT_ACTIONS = frozenset(
    {
        "typing",
        "upload_photo",
        "record_video",
        "upload_video",
        "record_voice",
        "upload_voice",
        "upload_document",
        "choose_sticker",
        "find_location",
        "record_video_note",
        "upload_video_note",
    }
)
PARSE_MODES = frozenset({"HTML", "MarkdownV2", "Markdown"})
HTML_TAGS = frozenset(
    {
        "b",
        "strong",
        "i",
        "em",
        "u",
        "ins",
        "s",
        "strike",
        "del",
        "span",
        "tg-spoiler",
        "a",
        "code",
        "pre",
        "blockquote",
        "tg-emoji",
    }
)
MAX_FILE_BYTES = 20 * 1024 * 1024
_SECRET_RE = re.compile(r"[A-Za-z0-9_-]{1,256}")
_TOKEN_RE = re.compile(r"[0-9]+:[A-Za-z0-9_-]+")
_ATTRS_RE = re.compile(r"""(\s+[A-Za-z-]+\s*=\s*("[^"]*"|'[^']*'|[^\s"'>]+))*\s*""")
_ENTITY_RE = re.compile(r"&(#[0-9]+|#[xX][0-9a-fA-F]+|[A-Za-z]+);")
_UNKNOWN = {"x_fake_unknown_field": {"nested": [1, "two", None]}}
BLOCKED = "Forbidden: bot was blocked by the user"
PARSE_ERROR = (
    "Bad Request: can't parse entities: Can't find end of the entity starting at byte offset 0"
)


class ApiFailure(Exception):
    """An ``{"ok": false}`` answer (raised inside the fake)."""

    def __init__(self, status: int, description: str, retry_after: int | None = None) -> None:
        super().__init__(description)
        self.status, self.description, self.retry_after = status, description, retry_after


def _bad(text: str) -> ApiFailure:
    return ApiFailure(400, f"Bad Request: {text}")


@attrs.frozen
class Failure:
    """A scripted failure for ``fake.fail_next``; ``deliver`` performs the call before a drop."""

    kind: str
    status: int = 0
    description: str = ""
    retry_after: int | None = None
    deliver: bool = False

    @classmethod
    def rate_limited(cls, retry_after: int = 1) -> Failure:
        return cls(
            "rate_limited", 429, f"Too Many Requests: retry after {retry_after}", retry_after
        )

    @classmethod
    def parse_error(cls) -> Failure:
        return cls("parse_error", 400, PARSE_ERROR)

    @classmethod
    def bad_request(cls, description: str) -> Failure:
        return cls("bad_request", 400, f"Bad Request: {description}")

    @classmethod
    def blocked(cls) -> Failure:
        return cls("blocked", 403, BLOCKED)

    @classmethod
    def server_error(cls, status: int = 500, description: str = "Internal Server Error") -> Failure:
        return cls("server_error", status, description)

    @classmethod
    def conflict(cls) -> Failure:
        return cls(
            "conflict",
            409,
            "Conflict: terminated by other getUpdates request; "
            "make sure that only one bot instance is running",
        )

    @classmethod
    def reset(cls, *, deliver: bool = False) -> Failure:
        """Read the request, then reset the TCP connection (RST) without an answer."""
        return cls("reset", deliver=deliver)

    @classmethod
    def close(cls, *, deliver: bool = False) -> Failure:
        """Read the request, then close the connection cleanly without an answer."""
        return cls("close", deliver=deliver)


@attrs.define
class Call:
    """One request as received: ``status`` is the HTTP status (0 = dropped, None = running)."""

    method: str
    params: dict[str, Any]
    time: float
    status: int | None = None


@attrs.frozen
class SentMessage:
    chat_id: int | str
    message_id: int
    text: str
    parse_mode: str | None
    visible_text: str
    reply_to_message_id: int | None
    reply_markup: Any


@attrs.frozen
class StoredFile:
    file_id: str
    file_unique_id: str
    file_path: str
    data: bytes
    declared_size: int | None = None
    send_length: bool = True


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def telegram_html_text(text: str) -> str:
    """Visible text of ``parse_mode=HTML`` text, or ApiFailure "can't parse entities"."""

    def fail(what: str, at: int) -> ApiFailure:
        offset = len(text[:at].encode("utf-8"))
        return _bad(f"can't parse entities: {what} at byte offset {offset}")

    out: list[str] = []
    stack: list[tuple[str, int]] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "&" and (m := _ENTITY_RE.match(text, i)):
            body = m.group(1)
            if body[0] != "#":
                named = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}
                out.append(named.get(body, m.group(0)))
            else:
                code = int(body[2:], 16) if body[1] in "xX" else int(body[1:])
                if code == 0 or code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                    raise fail("Invalid character reference", i)
                out.append(chr(code))
            i = m.end()
        elif c != "<":
            out.append(c)
            i += 1
        else:
            end = text.find(">", i)
            if end < 0:
                raise fail("Unclosed start tag", i)
            inner = text[i + 1 : end]
            if inner.startswith("/"):
                name = inner[1:].strip().lower()
                if not stack:
                    raise fail(f'Unexpected end tag "{name}"', i)
                if stack[-1][0] != name:
                    raise fail(
                        f'Can\'t find end tag corresponding to start tag "{stack[-1][0]}"', i
                    )
                stack.pop()
            else:
                m2 = re.match(r"([A-Za-z][A-Za-z0-9-]*)(.*)", inner, re.S)
                name = m2.group(1).lower() if m2 else inner[:16]
                if m2 is None or name not in HTML_TAGS:
                    raise fail(f'Unsupported start tag "{name}"', i)
                if not _ATTRS_RE.fullmatch(m2.group(2)):
                    raise fail(f'Bad attributes of tag "{name}"', i)
                if name == "span" and not re.search(r"class\s*=\s*[\"']?tg-spoiler", m2.group(2)):
                    raise fail('Tag "span" must have class "tg-spoiler"', i)
                stack.append((name, i))
            i = end + 1
    if stack:
        raise fail(f'Can\'t find end tag corresponding to start tag "{stack[-1][0]}"', len(text))
    return "".join(out)


# --- parameter checking ------------------------------------------------------------------------

_TYPES: dict[str, tuple[type | tuple[type, ...], str]] = {
    "int": (int, "an Integer"),
    "str": (str, "a String"),
    "bool": (bool, "a Boolean"),
    "chat": ((int, str), "an Integer or String"),
    "obj": (dict, "an Object"),
    "list": (list, "an Array"),
    "file": ((str, Upload), "an InputFile or String"),
}
_SPECS: dict[str, dict[str, str]] = {
    "getMe": {},
    "getUpdates": {"offset": "int", "limit": "int", "timeout": "int", "allowed_updates": "list"},
    "sendMessage": {
        "chat_id": "chat!",
        "text": "str!",
        "parse_mode": "str",
        "entities": "list",
        "link_preview_options": "obj",
        "disable_web_page_preview": "bool",
        "disable_notification": "bool",
        "protect_content": "bool",
        "reply_parameters": "obj",
        "reply_to_message_id": "int",
        "allow_sending_without_reply": "bool",
        "reply_markup": "obj",
        "message_thread_id": "int",
        "business_connection_id": "str",
        "message_effect_id": "str",
        "allow_paid_broadcast": "bool",
    },
    "sendChatAction": {
        "chat_id": "chat!",
        "action": "str!",
        "message_thread_id": "int",
        "business_connection_id": "str",
    },
    "answerCallbackQuery": {
        "callback_query_id": "str!",
        "text": "str",
        "show_alert": "bool",
        "url": "str",
        "cache_time": "int",
    },
    "getFile": {"file_id": "str!"},
    "setWebhook": {
        "url": "str!",
        "ip_address": "str",
        "max_connections": "int",
        "allowed_updates": "list",
        "drop_pending_updates": "bool",
        "secret_token": "str",
    },
    "deleteWebhook": {"drop_pending_updates": "bool"},
    "getWebhookInfo": {},
    **KEYBOARD_SPECS,  # editMessageText, editMessageReplyMarkup, set/get/deleteMyCommands
    **DOCUMENT_SPECS,  # sendDocument (multipart uploads)
    **DRAFT_SPECS,  # sendMessageDraft, deleteMessage
}


def _coerce_form(kind: str, value: str) -> object:
    """A form/query-string value (always a string) as the JSON type Telegram would read."""
    if kind == "int" and re.fullmatch(r"-?[0-9]+", value):
        return int(value)
    if kind == "bool" and value in ("true", "false"):
        return value == "true"
    if kind in ("obj", "list"):
        try:
            return json.loads(value)
        except ValueError:
            return value
    if kind == "chat" and re.fullmatch(r"-?[0-9]+", value):
        return int(value)
    return value


def check_params(method: str, raw: Mapping[str, object], *, form: bool) -> dict[str, Any]:
    """Validate ``raw`` against the method's spec; None values count as absent."""
    spec = _SPECS[method]
    out: dict[str, Any] = {}
    for name, value in raw.items():
        if name not in spec:
            raise _bad(f'unknown parameter "{name}" (the fake rejects what Telegram ignores)')
        if value is None:
            continue
        kind = spec[name].rstrip("!")
        if form and isinstance(value, str):
            value = _coerce_form(kind, value)
        types, label = _TYPES[kind]
        if not isinstance(value, types) or (kind != "bool" and isinstance(value, bool)):
            raise _bad(f'parameter "{name}" must be {label}')
        out[name] = value
    for name, kind in spec.items():
        if kind.endswith("!") and name not in out:
            raise _bad(f"{name} is empty" if name != "text" else "message text is empty")
    return out


def _check_kinds(kinds: list[object]) -> list[str]:
    for kind in kinds:
        if not isinstance(kind, str) or kind not in KNOWN_UPDATE_KINDS:
            raise _bad(f"allowed_updates: unknown update type {kind!r}")
    return [str(k) for k in kinds]


def message_object(chat_id: int | str, message_id: int, **fields: Any) -> dict[str, Any]:
    """A Message JSON object as Telegram sends it (plus an unknown field, as Telegram may)."""
    chat_type = "private" if isinstance(chat_id, int) and chat_id > 0 else "supergroup"
    msg: dict[str, Any] = {
        "message_id": message_id,
        "date": int(time.time()),
        "chat": {"id": chat_id, "type": chat_type, "first_name": "Test"},
        **_UNKNOWN,
    }
    msg.update({k: v for k, v in fields.items() if v is not None})
    return msg


def _update_id(update: Mapping[str, Any]) -> int:
    """The update's id; a raw pushed update with a broken id counts as 0 (confirmed first)."""
    value = update.get("update_id")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@attrs.define
class _Drop:
    reset: bool


_Reply = tuple[int, bytes, str, bool]  # status, body, content type, send Content-Length


def _json_reply(status: int, payload: Mapping[str, Any]) -> _Reply:
    return status, json.dumps(payload).encode(), "application/json", True


def _failure_reply(f: ApiFailure) -> _Reply:
    body: dict[str, Any] = {"ok": False, "error_code": f.status, "description": f.description}
    if f.retry_after is not None:
        body["parameters"] = {"retry_after": f.retry_after}
    return _json_reply(f.status, body)


class FakeBotApi(KeyboardMethods, DocumentMethods, DraftMethods):
    """State and behaviour of the fake; see the module docstring. Build it with run_fake_bot_api.
    Keyboards, edits, taps and the command menu: :class:`fakes.bot_keyboards.KeyboardMethods`."""

    def __init__(self, token: str = DEFAULT_TOKEN, *, known_chats_only: bool = False) -> None:
        KeyboardMethods.__init__(self)
        DocumentMethods.__init__(self)
        DraftMethods.__init__(self)
        if not _TOKEN_RE.fullmatch(token):
            raise ValueError("fake bot token must look like <digits>:<secret>")
        self.token = token
        self.bot_id = int(token.split(":")[0])
        self.base_url = ""
        self.known_chats_only = known_chats_only
        self.calls: list[Call] = []
        self.sent: dict[int | str, list[SentMessage]] = {}
        self.downloads: list[str] = []
        self.blocked_chats: set[int | str] = set()
        self.answered_callbacks: dict[str, dict[str, Any]] = {}
        self.webhook: dict[str, Any] = {}
        self.allowed_updates: list[str] | None = None
        self._queue: deque[dict[str, Any]] = deque()
        self._failures: dict[str, deque[Failure]] = {}
        self._standing: dict[str, Failure] = {}
        self._files: dict[str, StoredFile] = {}
        self._messages: dict[int | str, set[int]] = {}
        self._next_message_id: dict[int | str, int] = {}
        self._callbacks: set[str] = set()
        self._update_ids = itertools.count(1)
        self._ids = itertools.count(1)
        self._changed = trio.Event()
        self._poll_generation = 0
        #: methods answered like a Bot API server or emulator that lacks them (``unsupport``)
        self._unsupported: dict[str, tuple[int, str]] = {}

    # --- scripting and inspection (for tests) --------------------------------------------------

    def fail_next(self, method: str, failure: Failure, times: int = 1) -> None:
        """The next ``times`` valid calls of ``method`` fail with ``failure``."""
        self._failures.setdefault(method, deque()).extend([failure] * times)

    def fail_while(self, method: str, failure: Failure) -> None:
        """Every valid call of ``method`` fails with ``failure`` until :meth:`stop_failing`
        (an outage or a rate limit that lasts; scripted ``fail_next`` failures come first)."""
        self._standing[method] = failure

    def stop_failing(self, method: str) -> None:
        """End :meth:`fail_while` for ``method``."""
        self._standing.pop(method, None)

    def unsupport(self, method: str, status: int = 404, body: str = "") -> None:
        """Answer every call of ``method`` with ``status`` and ``body`` (plain text; empty: the
        404 JSON Telegram gives an unknown method) — a server that does not have it."""
        self._unsupported[method] = (status, body)

    def block_chat(self, chat_id: int | str) -> None:
        """Every later send to ``chat_id`` gets 403 "Forbidden: bot was blocked by the user"."""
        self.blocked_chats.add(chat_id)

    def calls_to(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    def sent_texts(self, chat_id: int | str) -> list[str]:
        return [m.text for m in self.sent.get(chat_id, [])]

    @property
    def pending_updates(self) -> list[dict[str, Any]]:
        return list(self._queue)

    def push_update(self, update: Mapping[str, Any]) -> dict[str, Any]:
        """Queue an update for getUpdates (``update_id`` is assigned when missing)."""
        obj = dict(update)
        if "update_id" not in obj:
            obj["update_id"] = next(self._update_ids)
        elif isinstance(obj["update_id"], int):
            start = max(obj["update_id"] + 1, next(self._update_ids))
            self._update_ids = itertools.count(start)
        for key in ("message", "edited_message"):
            msg = obj.get(key)
            if isinstance(msg, dict) and isinstance(msg.get("chat"), dict):
                message_id = msg.get("message_id")
                if isinstance(message_id, int):
                    self._messages.setdefault(msg["chat"].get("id"), set()).add(message_id)
        callback = obj.get("callback_query")
        if isinstance(callback, dict) and isinstance(callback.get("id"), str):
            self._callbacks.add(callback["id"])
        self._queue.append(obj)
        self._wake()
        return obj

    def push_message(
        self, chat_id: int, text: str | None = None, *, user_id: int | None = None, **fields: Any
    ) -> dict[str, Any]:
        """Queue a message update from a user (extra Message fields go in ``fields``)."""
        sender = {
            "id": user_id or (chat_id if chat_id > 0 else 1000),
            "is_bot": False,
            "first_name": "Tester",
        }
        msg = message_object(chat_id, self._new_message_id(chat_id), text=text, **fields)
        return self.push_update({"message": {**msg, "from": sender}})

    def push_voice(self, chat_id: int, data: bytes, *, duration: int = 2) -> dict[str, Any]:
        """Queue a voice message whose file (``data``) can be fetched with getFile."""
        stored = self.add_file(data, file_path=f"voice/file_{next(self._ids)}.oga")
        voice = {
            "file_id": stored.file_id,
            "file_unique_id": stored.file_unique_id,
            "duration": duration,
            "mime_type": "audio/ogg",
            "file_size": len(data),
        }
        return self.push_message(chat_id, voice=voice)

    def push_callback(
        self, chat_id: int, data: str, *, message_id: int | None = None
    ) -> dict[str, Any]:
        """Queue an inline-button press on (by default) the last message sent to ``chat_id``."""
        if message_id is None:
            message_id = max(self._messages.get(chat_id, {1}))
        query = {
            "id": self.new_query_id(),
            "chat_instance": "ci",
            "data": data,
            "from": {
                "id": chat_id if chat_id > 0 else 1000,
                "is_bot": False,
                "first_name": "Tester",
            },
            "message": message_object(chat_id, message_id, text="(a button message)"),
        }
        return self.push_update({"callback_query": query})

    def add_file(
        self,
        data: bytes,
        *,
        file_path: str | None = None,
        declared_size: int | None = None,
        send_length: bool = True,
    ) -> StoredFile:
        """Register a downloadable file; ``send_length=False`` serves it chunked."""
        n = next(self._ids)
        stored = StoredFile(
            f"FILEID{n}",
            f"UNIQ{n}",
            file_path or f"documents/file_{n}.bin",
            data,
            declared_size,
            send_length,
        )
        self._files[stored.file_id] = stored
        return stored

    # --- Bot API methods -----------------------------------------------------------------------

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def _new_message_id(self, chat_id: int | str) -> int:
        message_id = self._next_message_id.get(chat_id, 1)
        self._next_message_id[chat_id] = message_id + 1
        self._messages.setdefault(chat_id, set()).add(message_id)
        return message_id

    def _chat(self, value: int | str) -> int | str:
        if isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value):
            value = int(value)
        if isinstance(value, str) and not re.fullmatch(r"@[A-Za-z][A-Za-z0-9_]{4,31}", value):
            raise _bad("chat not found")
        if value == 0 or (self.known_chats_only and value not in self._messages):
            raise _bad("chat not found")
        if value in self.blocked_chats:
            raise ApiFailure(403, BLOCKED)
        return value

    async def _get_me(self, p: dict[str, Any]) -> object:
        return {
            "id": self.bot_id,
            "is_bot": True,
            "first_name": "Engram Test",
            "username": "engram_test_bot",
            "can_join_groups": True,
            **_UNKNOWN,
        }

    async def _get_updates(self, p: dict[str, Any]) -> object:
        if self.webhook.get("url"):
            raise ApiFailure(
                409,
                "Conflict: can't use getUpdates method while webhook is "
                "active; use deleteWebhook to delete the webhook first",
            )
        if "allowed_updates" in p:
            self.allowed_updates = _check_kinds(p["allowed_updates"]) or None
        offset, limit = p.get("offset", 0), min(max(p.get("limit", 100), 1), 100)
        if offset < 0:
            while len(self._queue) > -offset:
                self._queue.popleft()
        while offset > 0 and self._queue and _update_id(self._queue[0]) < offset:
            self._queue.popleft()
        self._poll_generation += 1
        generation = self._poll_generation
        self._wake()  # terminates an older long poll with 409
        deadline = trio.current_time() + max(p.get("timeout", 0), 0)
        while True:
            allowed = set(self.allowed_updates or KNOWN_UPDATE_KINDS - _DEFAULT_EXCLUDED)
            self._queue = deque(
                u for u in self._queue if not (set(u) & KNOWN_UPDATE_KINDS) or set(u) & allowed
            )
            if self._queue or trio.current_time() >= deadline:
                return list(itertools.islice(self._queue, limit))
            with trio.move_on_at(deadline):
                await self._changed.wait()
            if self._poll_generation != generation:
                raise ApiFailure(409, Failure.conflict().description)

    def check_text(self, text: str, mode: str | None) -> str:
        """The visible text of a message's ``text`` (sendMessage, editMessageText), or 400."""
        if mode is not None and mode not in PARSE_MODES:
            raise _bad("unsupported parse_mode")
        visible = telegram_html_text(text) if mode == "HTML" else text
        if not visible.strip():
            raise _bad("message text is empty")
        if utf16_len(visible) > 4096:
            raise _bad("message is too long")
        return visible

    def chat(self, value: int | str) -> int | str:
        return self._chat(value)

    def new_message(self, chat_id: int | str) -> int:
        return self._new_message_id(chat_id)

    def message_json(self, chat_id: int | str, message_id: int, **fields: Any) -> dict[str, Any]:
        return message_object(
            chat_id, message_id, **{"from": {"id": self.bot_id, "is_bot": True}}, **fields
        )

    def new_query_id(self) -> str:
        return f"cb{next(self._ids)}"

    def is_user_message(self, chat_id: int | str, message_id: int) -> bool:
        return message_id in self._messages.get(chat_id, set())

    async def _send_message(self, p: dict[str, Any]) -> object:
        chat = self._chat(p["chat_id"])
        mode = p.get("parse_mode")
        visible = self.check_text(p["text"], mode)
        reply = p.get("reply_parameters", {})
        if "reply_to_message_id" in p:
            reply = {
                "message_id": p["reply_to_message_id"],
                "allow_sending_without_reply": p.get("allow_sending_without_reply"),
            }
        reply_to = reply.get("message_id")
        if reply and not isinstance(reply_to, int):
            raise _bad("can't parse reply parameters JSON object")
        known = self._messages.get(chat, set())
        if (
            reply_to is not None
            and reply_to not in known
            and not reply.get("allow_sending_without_reply")
        ):
            raise _bad("message to be replied not found")
        if "reply_markup" in p:
            check_markup(p["reply_markup"])
        message_id = self._new_message_id(chat)
        markup = p.get("reply_markup")
        sent = SentMessage(chat, message_id, p["text"], mode, visible, reply_to, markup)
        self.sent.setdefault(chat, []).append(sent)
        return message_object(
            chat, message_id, text=visible, **{"from": {"id": self.bot_id, "is_bot": True}}
        )

    async def _send_chat_action(self, p: dict[str, Any]) -> object:
        self._chat(p["chat_id"])
        if p["action"] not in CHAT_ACTIONS:
            raise _bad("wrong parameter action in request")
        return True

    async def _answer_callback_query(self, p: dict[str, Any]) -> object:
        query_id = p["callback_query_id"]
        if query_id not in self._callbacks or query_id in self.answered_callbacks:
            raise _bad("query is too old and response timeout expired or query ID is invalid")
        if len(p.get("text", "")) > 200:
            raise _bad("MESSAGE_TOO_LONG")
        self.answered_callbacks[query_id] = p
        return True

    async def _get_file(self, p: dict[str, Any]) -> object:
        stored = self._files.get(p["file_id"])
        if stored is None:
            raise _bad("invalid file_id")
        size = stored.declared_size or len(stored.data)
        if size > MAX_FILE_BYTES:
            raise _bad("file is too big")
        return {
            "file_id": stored.file_id,
            "file_unique_id": stored.file_unique_id,
            "file_size": size,
            "file_path": stored.file_path,
            **_UNKNOWN,
        }

    async def _set_webhook(self, p: dict[str, Any]) -> object:
        url = p["url"]
        if url:
            parts = urlsplit(url)
            if parts.scheme != "https" or not parts.hostname:
                raise _bad("bad webhook: An HTTPS URL must be provided for webhook")
            if parts.port not in (None, 80, 88, 443, 8443):
                raise _bad("bad webhook: Webhook can be set up only on ports 80, 88, 443 or 8443")
        if "secret_token" in p and not _SECRET_RE.fullmatch(p["secret_token"]):
            raise _bad("secret token contains unallowed characters")
        if not 1 <= p.get("max_connections", 40) <= 100:
            raise _bad("bad webhook: max_connections must be between 1 and 100")
        kinds = _check_kinds(p["allowed_updates"]) if "allowed_updates" in p else None
        if p.get("drop_pending_updates"):
            self._queue.clear()
        self.webhook = {
            "url": url,
            "secret_token": p.get("secret_token"),
            "allowed_updates": kinds,
            "max_connections": p.get("max_connections", 40),
        }
        if kinds is not None:
            self.allowed_updates = kinds or None
        self._wake()
        return True

    async def _delete_webhook(self, p: dict[str, Any]) -> object:
        if p.get("drop_pending_updates"):
            self._queue.clear()
        self.webhook = {}
        return True

    async def _get_webhook_info(self, p: dict[str, Any]) -> object:
        info: dict[str, Any] = {
            "url": self.webhook.get("url", ""),
            "has_custom_certificate": False,
            "pending_update_count": len(self._queue),
            **_UNKNOWN,
        }
        if self.webhook.get("url"):
            info["max_connections"] = self.webhook["max_connections"]
            if self.webhook["allowed_updates"] is not None:
                info["allowed_updates"] = self.webhook["allowed_updates"]
        return info

    # --- HTTP ----------------------------------------------------------------------------------

    def _handler(self, method: str) -> Callable[[dict[str, Any]], Awaitable[object]] | None:
        if method not in _SPECS:
            return None
        snake = re.sub(r"([A-Z])", r"_\1", method).lower()
        handler: Callable[[dict[str, Any]], Awaitable[object]] = getattr(self, f"_{snake}")
        return handler

    async def _respond(self, request: h11.Request, body: bytes) -> _Reply | _Drop:
        parts = urlsplit(request.target.decode("ascii", "replace"))
        path = unquote(parts.path)
        if path.startswith("/file/bot"):
            return self._download(path, request.method)
        m = re.fullmatch(r"/bot([^/]*)/([^/]*)", path)
        if m is None or request.method not in (b"GET", b"POST"):
            return _json_reply(404, {"ok": False, "error_code": 404, "description": "Not Found"})
        if m.group(1) != self.token:
            code, text = (
                (401, "Unauthorized") if _TOKEN_RE.fullmatch(m.group(1)) else (404, "Not Found")
            )
            return _json_reply(code, {"ok": False, "error_code": code, "description": text})
        method = m.group(2)
        call = Call(method, {}, trio.current_time())
        self.calls.append(call)
        reply = await self._run(method, call, request, parts.query, body)
        call.status = 0 if isinstance(reply, _Drop) else reply[0]
        return reply

    async def _run(
        self, method: str, call: Call, request: h11.Request, query: str, body: bytes
    ) -> _Reply | _Drop:
        handler = self._handler(method)
        if method in self._unsupported:
            status, text = self._unsupported[method]
            if text:
                return status, text.encode(), "text/plain", True
            handler = None
        if handler is None:
            return _json_reply(404, {"ok": False, "error_code": 404, "description": "Not Found"})
        try:
            raw: dict[str, Any] = dict(parse_qsl(query))
            ctype = dict(request.headers).get(b"content-type", b"").split(b";")[0].strip()
            form = True
            if body and ctype == b"application/json":
                decoded = json.loads(body)
                if not isinstance(decoded, dict):
                    raise _bad("JSON object expected")
                raw.update(decoded)
                form = not decoded and bool(raw)
            elif body and ctype == b"application/x-www-form-urlencoded":
                raw.update(parse_qsl(body.decode()))
            elif body and ctype == b"multipart/form-data":
                fields, files = parse_multipart(dict(request.headers)[b"content-type"], body)
                raw.update(fields)
                spec = _SPECS[method]
                raw.update({k: v for k, v in files.items() if k in spec})
                self.take_uploads(files)
            elif body:
                raise _bad(f"unsupported content type {ctype.decode()!r} in the fake")
            call.params = raw
            params = check_params(method, raw, form=form)
            failures = self._failures.get(method)
            failure = failures.popleft() if failures else self._standing.get(method)
            if failure is not None and failure.kind in ("reset", "close"):
                if failure.deliver:
                    with suppress(ApiFailure):
                        await handler(params)
                return _Drop(reset=failure.kind == "reset")
            if failure is not None:
                raise ApiFailure(failure.status, failure.description, failure.retry_after)
            result = await handler(params)
        except ApiFailure as exc:
            return _failure_reply(exc)
        except KeyboardFailure as exc:
            return _failure_reply(ApiFailure(400, exc.description))
        except DocumentFailure as exc:
            return _failure_reply(ApiFailure(exc.status, exc.description))
        except DraftFailure as exc:
            return _failure_reply(ApiFailure(exc.status, exc.description, exc.retry_after))
        except (ValueError, UnicodeDecodeError):
            return _failure_reply(_bad("can't parse JSON encoded request"))
        payload: dict[str, Any] = {"ok": True, "result": result}
        if method == "setWebhook":
            payload["description"] = "Webhook was set"
        return _json_reply(200, payload)

    def _download(self, path: str, http_method: bytes) -> _Reply:
        token, _, file_path = path[len("/file/bot") :].partition("/")
        self.downloads.append(file_path)
        stored = next((f for f in self._files.values() if f.file_path == file_path), None)
        if token != self.token or stored is None or http_method != b"GET":
            return _json_reply(404, {"ok": False, "error_code": 404, "description": "Not Found"})
        return 200, stored.data, "application/octet-stream", stored.send_length

    async def _receive(
        self, conn: h11.Connection, stream: trio.SocketStream
    ) -> tuple[h11.Request, bytes] | None:
        request: h11.Request | None = None
        body = bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(65536))
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage) and request is not None:
                return request, bytes(body)
            else:
                return None

    async def serve_connection(self, stream: trio.SocketStream) -> None:
        """One HTTP/1.1 connection (keep-alive) until the client leaves or a drop is scripted."""
        conn = h11.Connection(h11.SERVER)
        async with stream:
            try:
                while (received := await self._receive(conn, stream)) is not None:
                    reply = await self._respond(*received)
                    if isinstance(reply, _Drop):
                        if reply.reset:  # SO_LINGER 0: close() sends RST instead of FIN
                            stream.socket.setsockopt(
                                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                            )
                        return
                    status, payload, ctype, with_length = reply
                    headers = [("content-type", ctype), ("server", "fake-bot-api")]
                    if with_length:
                        headers.append(("content-length", str(len(payload))))
                    await stream.send_all(
                        conn.send(h11.Response(status_code=status, headers=headers))
                    )
                    for start in range(0, len(payload), 16384):
                        data = conn.send(h11.Data(data=payload[start : start + 16384]))
                        await stream.send_all(data)
                    await stream.send_all(conn.send(h11.EndOfMessage()))
                    if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                        return
                    conn.start_next_cycle()
            except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
                return


@asynccontextmanager
async def run_fake_bot_api(
    token: str = DEFAULT_TOKEN,
    *,
    known_chats_only: bool = False,
    fake: FakeBotApi | None = None,
    backlog: int | None = None,
) -> AsyncIterator[FakeBotApi]:
    """Serve a fresh FakeBotApi (or ``fake``, a subclass's) on 127.0.0.1 (free port) for the
    duration of the block."""
    if fake is None:
        fake = FakeBotApi(token, known_chats_only=known_chats_only)
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1", backlog=backlog)
        fake.base_url = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        nursery.start_soon(trio.serve_listeners, fake.serve_connection, listeners)
        try:
            yield fake
        finally:
            nursery.cancel_scope.cancel()
