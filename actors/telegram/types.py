"""Typed Telegram Bot API objects we handle, and tolerant-but-strict parsers for them.

Parsers ignore unknown fields (Telegram adds fields all the time) but reject wrong types of
the fields we read: ``parse_update`` raises ``MalformedUpdate`` and nothing else for any JSON
value. Update kinds we do not handle (channel_post, poll, ...) parse to ``kind="unknown"``
so callers acknowledge and skip them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import attrs

from actors.telegram.errors import MalformedUpdate, UnexpectedResponse
from actors.telegram.forwards import forward_origin
from actors.telegram.media import OTHER_KINDS, PhotoSize, photo_sizes

UpdateKind = Literal[
    "message", "edited_message", "callback_query", "stopped_message_generation", "unknown"
]
#: The update kinds engram asks for (``allowed_updates`` of setWebhook/getUpdates).
ALLOWED_UPDATES: tuple[str, ...] = (
    "message",
    "edited_message",
    "callback_query",
    "stopped_message_generation",
)


@attrs.frozen
class Voice:
    """A voice note (Opus in OGG); download it with getFile + download_file."""

    file_id: str
    file_unique_id: str
    duration: int
    mime_type: str | None = None
    file_size: int | None = None


@attrs.frozen
class Message:
    """A message (or an edited message) in a chat."""

    message_id: int
    chat_id: int
    chat_type: str
    date: int
    from_user_id: int | None = None
    text: str | None = None
    caption: str | None = None
    voice: Voice | None = None
    media_group_id: str | None = None
    #: the photo's sizes, smallest first (empty: no photo)
    photo: tuple[PhotoSize, ...] = ()
    #: a kind of message we do not read (a key of :data:`OTHER_KINDS`), or None
    other_kind: str | None = None
    #: a sticker's emoji, when it has one
    sticker_emoji: str | None = None
    edit_date: int | None = None
    #: a forwarded message: who it came from (``user “Ann” (@ann)``, ``channel “News”``, …;
    #: :func:`forward_origin`), None for the person's own message
    forwarded_from: str | None = None

    @property
    def has_photo(self) -> bool:
        return bool(self.photo)


@attrs.frozen
class CallbackQuery:
    """A press of an inline keyboard button; must be answered with answerCallbackQuery."""

    id: str
    from_user_id: int
    message_chat_id: int | None = None
    message_id: int | None = None
    data: str | None = None


@attrs.frozen
class GenerationStopped:
    """The person pressed Stop on a streamed draft (Bot API 10.3)."""

    chat_id: int
    draft_id: int
    message_thread_id: int | None = None


@attrs.frozen
class Update:
    """One incoming update; exactly one of the payload fields is set unless kind is unknown."""

    update_id: int
    kind: UpdateKind
    message: Message | None = None
    edited_message: Message | None = None
    callback_query: CallbackQuery | None = None
    stopped_generation: GenerationStopped | None = None
    #: for kind="unknown": the payload key we did not recognise (e.g. "channel_post"), if any
    unknown_kind: str | None = None

    @property
    def chat_id(self) -> int | None:
        """The chat this update belongs to, or None (inline callbacks, unknown kinds)."""
        msg = self.message or self.edited_message
        if msg is not None:
            return msg.chat_id
        if self.callback_query is not None:
            return self.callback_query.message_chat_id
        if self.stopped_generation is not None:
            return self.stopped_generation.chat_id
        return None


@attrs.frozen
class BotUser:
    """The bot itself, as returned by getMe."""

    id: int
    is_bot: bool
    first_name: str
    username: str | None = None


@attrs.frozen
class FileInfo:
    """getFile's answer; ``file_path`` is None when Telegram will not serve the file."""

    file_id: str
    file_unique_id: str
    file_size: int | None = None
    file_path: str | None = None


@attrs.frozen
class WebhookInfo:
    """getWebhookInfo's answer (``url`` is empty when no webhook is set)."""

    url: str
    pending_update_count: int
    has_custom_certificate: bool = False
    last_error_date: int | None = None
    last_error_message: str | None = None
    max_connections: int | None = None
    allowed_updates: tuple[str, ...] | None = None


# --- field readers -----------------------------------------------------------------------------


class _Bad(Exception):
    """Internal: a field has the wrong type; turned into the caller's error class."""


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _obj(value: object, where: str) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise _Bad(f"{where} is not an object")
    return value


def _req_int(obj: Mapping[str, object], key: str, where: str) -> int:
    value = obj.get(key)
    if not _is_int(value):
        raise _Bad(f"{where}.{key} is missing or not an integer")
    assert isinstance(value, int)
    return value


def _opt_int(obj: Mapping[str, object], key: str, where: str) -> int | None:
    if obj.get(key) is None:
        return None
    return _req_int(obj, key, where)


def _req_str(obj: Mapping[str, object], key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise _Bad(f"{where}.{key} is missing or not a string")
    return value


def _opt_str(obj: Mapping[str, object], key: str, where: str) -> str | None:
    if obj.get(key) is None:
        return None
    return _req_str(obj, key, where)


def _opt_bool(obj: Mapping[str, object], key: str, where: str) -> bool | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, bool):
        raise _Bad(f"{where}.{key} is not a boolean")
    return value


# --- updates -----------------------------------------------------------------------------------


def _parse_voice(value: object) -> Voice:
    obj = _obj(value, "voice")
    return Voice(
        file_id=_req_str(obj, "file_id", "voice"),
        file_unique_id=_req_str(obj, "file_unique_id", "voice"),
        duration=_req_int(obj, "duration", "voice"),
        mime_type=_opt_str(obj, "mime_type", "voice"),
        file_size=_opt_int(obj, "file_size", "voice"),
    )


def _parse_photo(value: object, where: str) -> tuple[PhotoSize, ...]:
    try:
        return photo_sizes(value)
    except ValueError as exc:
        raise _Bad(f"{where}.photo: {exc}") from None


def _parse_message(value: object, where: str) -> Message:
    obj = _obj(value, where)
    chat = _obj(obj.get("chat"), f"{where}.chat")
    sender = obj.get("from")
    photo = obj.get("photo")
    voice = obj.get("voice")
    other = next((k for k in OTHER_KINDS if obj.get(k) is not None), None)
    sticker = obj.get("sticker")
    emoji = _opt_str(_obj(sticker, "sticker"), "emoji", "sticker") if sticker else None
    return Message(
        message_id=_req_int(obj, "message_id", where),
        chat_id=_req_int(chat, "id", f"{where}.chat"),
        chat_type=_req_str(chat, "type", f"{where}.chat"),
        date=_req_int(obj, "date", where),
        from_user_id=None if sender is None else _req_int(_obj(sender, "from"), "id", "from"),
        text=_opt_str(obj, "text", where),
        caption=_opt_str(obj, "caption", where),
        voice=None if voice is None else _parse_voice(voice),
        media_group_id=_opt_str(obj, "media_group_id", where),
        photo=() if photo is None else _parse_photo(photo, where),
        other_kind=other,
        sticker_emoji=emoji,
        edit_date=_opt_int(obj, "edit_date", where),
        forwarded_from=forward_origin(obj),
    )


def _parse_callback(value: object) -> CallbackQuery:
    obj = _obj(value, "callback_query")
    sender = _obj(obj.get("from"), "callback_query.from")
    chat_id: int | None = None
    message_id: int | None = None
    msg = obj.get("message")
    if msg is not None:
        # may be an InaccessibleMessage (date 0): only chat and message_id are guaranteed
        msg_obj = _obj(msg, "callback_query.message")
        chat_id = _req_int(_obj(msg_obj.get("chat"), "message.chat"), "id", "message.chat")
        message_id = _req_int(msg_obj, "message_id", "callback_query.message")
    return CallbackQuery(
        id=_req_str(obj, "id", "callback_query"),
        from_user_id=_req_int(sender, "id", "callback_query.from"),
        message_chat_id=chat_id,
        message_id=message_id,
        data=_opt_str(obj, "data", "callback_query"),
    )


_KNOWN_KINDS = ("message", "edited_message", "callback_query", "stopped_message_generation")


def _parse_stopped(value: object) -> GenerationStopped:
    where = "stopped_message_generation"
    obj = _obj(value, where)
    chat = _obj(obj.get("chat"), f"{where}.chat")
    return GenerationStopped(
        _req_int(chat, "id", f"{where}.chat"),
        _req_int(obj, "draft_id", where),
        _opt_int(obj, "message_thread_id", where),
    )


def parse_update(obj: object) -> Update:
    """Parse one update (a decoded JSON value); raises ``MalformedUpdate`` only."""
    if not isinstance(obj, Mapping):
        raise MalformedUpdate("not an object")
    raw_id = obj.get("update_id")
    if not _is_int(raw_id):
        raise MalformedUpdate("update_id is missing or not an integer")
    assert isinstance(raw_id, int)
    present = [k for k in _KNOWN_KINDS if obj.get(k) is not None]
    if len(present) > 1:
        raise MalformedUpdate(f"several payloads: {', '.join(present)}", update_id=raw_id)
    try:
        if not present:
            others = sorted(k for k in obj if k != "update_id" and isinstance(k, str))
            return Update(raw_id, "unknown", unknown_kind=others[0] if others else None)
        kind = present[0]
        if kind == "message":
            return Update(raw_id, "message", message=_parse_message(obj[kind], kind))
        if kind == "edited_message":
            return Update(raw_id, "edited_message", edited_message=_parse_message(obj[kind], kind))
        if kind == "stopped_message_generation":
            stopped = _parse_stopped(obj[kind])
            return Update(raw_id, "stopped_message_generation", stopped_generation=stopped)
        return Update(raw_id, "callback_query", callback_query=_parse_callback(obj[kind]))
    except _Bad as exc:
        raise MalformedUpdate(str(exc), update_id=raw_id) from None


def dedupe_keys(update: Update) -> tuple[str, ...]:
    """Every dedupe key of an update, strongest first (for the in-memory dedupe cache).

    ``update:<id>`` always; then ``callback:<id>`` or ``message:<chat>:<message_id>``
    (``edit:<chat>:<message_id>:<edit_date>`` for edits, so an edit is not a duplicate of
    its original message).
    """
    keys = [f"update:{update.update_id}"]
    if update.callback_query is not None:
        keys.append(f"callback:{update.callback_query.id}")
    elif update.message is not None:
        keys.append(f"message:{update.message.chat_id}:{update.message.message_id}")
    elif update.edited_message is not None:
        m = update.edited_message
        keys.append(f"edit:{m.chat_id}:{m.message_id}:{m.edit_date or 0}")
    return tuple(keys)


def dedupe_key(update: Update) -> str:
    """The primary dedupe key: ``update:<id>`` -> ``callback:<id>`` -> ``message:<chat>:<id>``."""
    return dedupe_keys(update)[0]


# --- method results ----------------------------------------------------------------------------


def parse_bot_user(value: object) -> BotUser:
    """getMe's result."""
    try:
        obj = _obj(value, "user")
        return BotUser(
            id=_req_int(obj, "id", "user"),
            is_bot=bool(_opt_bool(obj, "is_bot", "user")),
            first_name=_req_str(obj, "first_name", "user"),
            username=_opt_str(obj, "username", "user"),
        )
    except _Bad as exc:
        raise UnexpectedResponse(f"getMe: {exc}") from None


def parse_file_info(value: object) -> FileInfo:
    """getFile's result."""
    try:
        obj = _obj(value, "file")
        return FileInfo(
            file_id=_req_str(obj, "file_id", "file"),
            file_unique_id=_req_str(obj, "file_unique_id", "file"),
            file_size=_opt_int(obj, "file_size", "file"),
            file_path=_opt_str(obj, "file_path", "file"),
        )
    except _Bad as exc:
        raise UnexpectedResponse(f"getFile: {exc}") from None


def parse_webhook_info(value: object) -> WebhookInfo:
    """getWebhookInfo's result."""
    try:
        obj = _obj(value, "webhook_info")
        allowed = obj.get("allowed_updates")
        if allowed is not None and not (
            isinstance(allowed, list) and all(isinstance(a, str) for a in allowed)
        ):
            raise _Bad("webhook_info.allowed_updates is not a list of strings")
        return WebhookInfo(
            url=_req_str(obj, "url", "webhook_info"),
            pending_update_count=_req_int(obj, "pending_update_count", "webhook_info"),
            has_custom_certificate=bool(_opt_bool(obj, "has_custom_certificate", "webhook_info")),
            last_error_date=_opt_int(obj, "last_error_date", "webhook_info"),
            last_error_message=_opt_str(obj, "last_error_message", "webhook_info"),
            max_connections=_opt_int(obj, "max_connections", "webhook_info"),
            allowed_updates=None if allowed is None else tuple(str(a) for a in allowed),
        )
    except _Bad as exc:
        raise UnexpectedResponse(f"getWebhookInfo: {exc}") from None


def parse_sent_message_id(value: object) -> int:
    """sendMessage's result: the new message's id."""
    try:
        return _req_int(_obj(value, "message"), "message_id", "message")
    except _Bad as exc:
        raise UnexpectedResponse(f"sendMessage: {exc}") from None
