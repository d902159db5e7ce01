"""Bearer tokens and chat scopes of the JSON API (and ``/metrics``' token).

Scoping: ``DASHBOARD_TOKEN`` is the operator's and sees every chat. A token for one chat is
derived from it, ``c<chat_id>.<signature>`` with the signature an HMAC-SHA256 of the chat id
under ``DASHBOARD_TOKEN`` (``engram api-token --chat ID`` prints it): it sees that chat only,
and is checked without any table. Changing ``DASHBOARD_TOKEN`` revokes every derived token.
Every request names its chat in the path (``/api/v1/chats/{chat_id}/...``); a chat outside
the token's scope is ``chat_forbidden`` (403), a pattern or episode of another chat
``not_found`` (404, whether or not it exists).
"""

from __future__ import annotations

import base64
import hashlib
import hmac

import attrs

from actors.web.errors import ApiError

_SALT = b"engram-api-chat:"


@attrs.frozen
class Scope:
    """What one token may see: every chat (``chat_id is None``) or one."""

    chat_id: int | None = None

    def allows(self, chat_id: int) -> bool:
        return self.chat_id is None or self.chat_id == chat_id

    def check(self, chat_id: int) -> None:
        if not self.allows(chat_id):
            raise ApiError("chat_forbidden", "this token does not see that chat")


def chat_token(secret: str, chat_id: int) -> str:
    """The token that sees only ``chat_id``, derived from the operator's ``secret``."""
    mac = hmac.new(secret.encode(), _SALT + str(chat_id).encode(), hashlib.sha256).digest()
    return f"c{chat_id}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"


def bearer(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


def scope_of(token: str | None, secret: str) -> Scope | None:
    """The scope ``token`` grants under the operator's ``secret``, or None (refused)."""
    if token is None or not secret:
        return None
    if same(token, secret):
        return Scope()
    head, dot, _ = token.partition(".")
    if not dot or not head.startswith("c"):
        return None
    try:
        chat_id = int(head[1:])
    except ValueError:
        return None
    return Scope(chat_id) if same(token, chat_token(secret, chat_id)) else None
