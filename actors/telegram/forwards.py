"""Who a forwarded message came from, named in a few words (``user “Ann Lee” (@ann)``,
``channel “News”``): read from Bot API 7's ``forward_origin`` or the older fields, never
raising; the chat shows it with the message as someone else's words
(:func:`memory.untrusted.wrap_forwarded`). Pure; :func:`actors.telegram.types.parse_update`
fills ``Message.forwarded_from`` with it.
"""

from __future__ import annotations

from collections.abc import Mapping

ORIGIN_NAME_CHARS = 64
UNKNOWN_ORIGIN = "an unknown origin"


def _name(value: object) -> str:
    text = " ".join(value.split()) if isinstance(value, str) else ""
    return text if len(text) <= ORIGIN_NAME_CHARS else text[: ORIGIN_NAME_CHARS - 1] + "…"


def _named(word: str, who: object, *title_keys: str) -> str:
    obj = who if isinstance(who, Mapping) else {}
    title = " ".join(n for k in title_keys if (n := _name(obj.get(k))))
    handle = _name(obj.get("username"))
    out = f"{word} “{title}”" if title else word
    return f"{out} (@{handle})" if handle else out


def forward_origin(message: Mapping[str, object]) -> str | None:
    """Who a forwarded message came from, from its ``forward_origin`` (Bot API 7:
    user, hidden_user, chat, channel; the older ``forward_from``/``forward_from_chat``/
    ``forward_sender_name`` otherwise), named in a few words; None when it is not a forward.
    Never raises: a forward whose origin cannot be read is from :data:`UNKNOWN_ORIGIN`."""
    origin = message.get("forward_origin")
    if isinstance(origin, Mapping):
        kind = origin.get("type")
        if kind == "user":
            return _named("user", origin.get("sender_user"), "first_name", "last_name")
        if kind == "hidden_user":
            return _named("hidden user", {"name": origin.get("sender_user_name")}, "name")
        if kind == "chat":
            return _named("chat", origin.get("sender_chat"), "title")
        if kind == "channel":
            return _named("channel", origin.get("chat"), "title")
        return UNKNOWN_ORIGIN
    if message.get("forward_from") is not None:
        return _named("user", message.get("forward_from"), "first_name", "last_name")
    if message.get("forward_from_chat") is not None:
        return _named("chat", message.get("forward_from_chat"), "title")
    if message.get("forward_sender_name") is not None:
        return _named("hidden user", {"name": message.get("forward_sender_name")}, "name")
    if origin is not None or message.get("forward_date") is not None:
        return UNKNOWN_ORIGIN
    return None
