"""The ``/ws/chat`` protocol: JSON text frames, one object each, ``"type"`` naming it.

Client -> server::

    {"type": "send", "id": "c1", "text": "hello"}              a message (``id``: the client's,
                                                                 1-64 of A-Za-z0-9_-; resending
                                                                 the same id stores it once)
    {"type": "choose", "id": "c2", "message_id": M, "data": D}  a numbered choice answered: the
                                                                 ``data`` of choice n of message M
    {"type": "ack", "delivery": "17.0"}                         a message or edit received

Server -> client::

    {"type": "hello", "chat_id": N}                             once, after the handshake
    {"type": "stored", "id": "c1"}                              the input is in the inbox
    {"type": "message", "delivery": "17.0", "message_id": M,    a reply (or a chunk of one), to
     "text": "...", "reply_to": M0, "choices": [...]}           acknowledge; sent again after a
                                                                 reconnect until acknowledged
    {"type": "edit", "delivery": "18.0", "message_id": M,       message M now says ``text`` (None:
     "text": "..." | null, "choices": [...]}                    unchanged) with these choices
    {"type": "draft", "text": "...", "status": "..." | null}    the reply being written (ephemeral)
    {"type": "typing"}                                          a turn is running (ephemeral)
    {"type": "notice", "text": "..."}                           a button's short answer
    {"type": "error", "code": "...", "text": "...", "id": ...}  a frame refused (and why)

A choice is ``{"n": 1, "label": "Forget", "data": "<token>"}`` or, for a link,
``{"n": 2, "label": "Docs", "url": "https://..."}``. ``delivery`` keys are
:func:`actors.local.ids.delivery_key`; the client shows each once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from actors.local.errors import BadFrame

#: the longest message the person may send (Telegram's own limit)
MAX_TEXT = 4096
_CLIENT_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


@attrs.frozen
class Choice:
    n: int
    label: str
    data: str | None = None
    url: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"n": self.n, "label": self.label}
        if self.data is not None:
            out["data"] = self.data
        if self.url is not None:
            out["url"] = self.url
        return out


# --- client -> server --------------------------------------------------------------------------


@attrs.frozen
class Send:
    id: str
    text: str


@attrs.frozen
class Choose:
    id: str
    message_id: int
    data: str


@attrs.frozen
class Ack:
    delivery: str


ClientFrame = Send | Choose | Ack


# --- server -> client --------------------------------------------------------------------------


@attrs.frozen
class Hello:
    chat_id: int


@attrs.frozen
class Stored:
    id: str


@attrs.frozen
class Delivery:
    """A message (``kind="message"``) or an edit of one (``kind="edit"``) to acknowledge."""

    kind: str
    delivery: str
    message_id: int
    text: str | None
    choices: tuple[Choice, ...] = ()
    reply_to: int | None = None


@attrs.frozen
class Draft:
    text: str
    status: str | None = None


@attrs.frozen
class Typing:
    pass


@attrs.frozen
class Notice:
    text: str


@attrs.frozen
class Error:
    code: str
    text: str
    id: str | None = None


ServerFrame = Hello | Stored | Delivery | Draft | Typing | Notice | Error


def encode(frame: ClientFrame | ServerFrame) -> str:
    """A frame as the JSON text sent on the socket."""
    body: dict[str, Any]
    match frame:
        case Send(id=cid, text=text):
            body = {"type": "send", "id": cid, "text": text}
        case Choose(id=cid, message_id=mid, data=data):
            body = {"type": "choose", "id": cid, "message_id": mid, "data": data}
        case Ack(delivery=key):
            body = {"type": "ack", "delivery": key}
        case Hello(chat_id=chat_id):
            body = {"type": "hello", "chat_id": chat_id}
        case Stored(id=cid):
            body = {"type": "stored", "id": cid}
        case Delivery():
            body = {
                "type": frame.kind,
                "delivery": frame.delivery,
                "message_id": frame.message_id,
                "text": frame.text,
                "choices": [c.to_json() for c in frame.choices],
            }
            if frame.kind == "message":
                body["reply_to"] = frame.reply_to
        case Draft(text=text, status=status):
            body = {"type": "draft", "text": text, "status": status}
        case Typing():
            body = {"type": "typing"}
        case Notice(text=text):
            body = {"type": "notice", "text": text}
        case Error(code=code, text=text, id=cid):
            body = {"type": "error", "code": code, "text": text, "id": cid}
    return json.dumps(body, ensure_ascii=False)


def _load(raw: str | bytes) -> Mapping[str, Any]:
    if isinstance(raw, bytes):
        raise BadFrame("not_text", "frames are JSON text, not binary")
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested too deeply
        raise BadFrame("not_json", "a frame must be one JSON object") from None
    if not isinstance(obj, dict):
        raise BadFrame("not_json", "a frame must be one JSON object")
    return obj


def _str(obj: Mapping[str, Any], key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise BadFrame("bad_field", f"{key} must be a string")
    return value


def _int(obj: Mapping[str, Any], key: str) -> int:
    value = obj.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 2**63:
        raise BadFrame("bad_field", f"{key} must be a positive integer (a BIGINT)")
    return value


def _client_id(obj: Mapping[str, Any]) -> str:
    cid = _str(obj, "id")
    if not _CLIENT_ID.fullmatch(cid):
        raise BadFrame("bad_field", "id must be 1-64 characters of A-Za-z0-9_-")
    return cid


def decode_client(raw: str | bytes) -> ClientFrame:
    """A client's frame; :class:`BadFrame` (with a code and why) for anything else."""
    obj = _load(raw)
    kind = obj.get("type")
    if kind == "send":
        cid, text = _client_id(obj), _str(obj, "text")
        if not text.strip():
            raise BadFrame("empty", "the message is empty")
        if len(text) > MAX_TEXT:
            raise BadFrame("too_long", f"a message is at most {MAX_TEXT} characters")
        return Send(cid, text)
    if kind == "choose":
        cid, data = _client_id(obj), _str(obj, "data")
        if not 1 <= len(data.encode("utf-8", "replace")) <= 64:
            raise BadFrame("bad_field", "data must be 1-64 bytes")
        return Choose(cid, _int(obj, "message_id"), data)
    if kind == "ack":
        return Ack(_str(obj, "delivery")[:64])
    raise BadFrame("unknown_type", "type must be send, choose or ack")


def _choices(value: object) -> tuple[Choice, ...]:
    if not isinstance(value, list):
        return ()
    out = []
    for item in value:
        if isinstance(item, dict) and isinstance(item.get("n"), int):
            data, url = item.get("data"), item.get("url")
            out.append(
                Choice(
                    item["n"],
                    str(item.get("label", "")),
                    data if isinstance(data, str) else None,
                    url if isinstance(url, str) else None,
                )
            )
    return tuple(out)


def decode_server(raw: str | bytes) -> ServerFrame:
    """A server's frame (the client side); :class:`BadFrame` for anything unknown."""
    obj = _load(raw)
    kind = obj.get("type")
    if kind == "hello":
        return Hello(_int(obj, "chat_id"))
    if kind == "stored":
        return Stored(_str(obj, "id"))
    if kind in ("message", "edit"):
        text = obj.get("text")
        reply_to = obj.get("reply_to")
        return Delivery(
            str(kind),
            _str(obj, "delivery"),
            _int(obj, "message_id"),
            text if isinstance(text, str) else None,
            _choices(obj.get("choices")),
            reply_to if isinstance(reply_to, int) else None,
        )
    if kind == "draft":
        status = obj.get("status")
        return Draft(_str(obj, "text"), status if isinstance(status, str) else None)
    if kind == "typing":
        return Typing()
    if kind == "notice":
        return Notice(_str(obj, "text"))
    if kind == "error":
        cid = obj.get("id")
        return Error(_str(obj, "code"), _str(obj, "text"), cid if isinstance(cid, str) else None)
    raise BadFrame("unknown_type", f"unknown frame type {kind!r}")


def choices_of(markup: Mapping[str, Any] | None) -> tuple[Choice, ...]:
    """An inline keyboard (Bot API JSON) as numbered choices, row by row."""
    if not markup:
        return ()
    rows: Sequence[Any] = markup.get("inline_keyboard") or ()
    out: list[Choice] = []
    for row in rows:
        for button in row or ():
            if not isinstance(button, Mapping):
                continue
            data, url = button.get("callback_data"), button.get("url")
            out.append(
                Choice(
                    len(out) + 1,
                    str(button.get("text", "")),
                    data if isinstance(data, str) else None,
                    url if isinstance(url, str) else None,
                )
            )
    return tuple(out)
