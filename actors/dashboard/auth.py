"""Dashboard logins: the operator's token, one-time links, sessions and CSRF tokens.

A login (the token typed on the login page, or a one-time link from ``engram dashboard link``)
starts a :class:`Login`: a row of ``dashboard_sessions`` holding the hash of a random session id,
the chat it may see (None: every chat) and its CSRF token. The browser keeps the id in a cookie
signed with a key derived from ``DASHBOARD_TOKEN`` (HttpOnly, SameSite=Strict, path
``/dashboard``); logging out deletes the row, so a copied cookie dies with it. A one-time link
is a random secret whose hash is stored with an expiry: its first visit uses it up.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime, timedelta

import attrs
from itsdangerous import BadSignature, URLSafeSerializer

from runtime.db import Queries

COOKIE = "engram_dashboard"
COOKIE_PATH = "/dashboard"
SESSION_HOURS = 12
LINK_MINUTES = 15


@attrs.frozen
class Login:
    """A live session: the chat it may see (None: every chat) and its CSRF token."""

    session_id: int
    chat_id: int | None
    csrf: str

    def may_see(self, chat_id: int) -> bool:
        return self.chat_id is None or self.chat_id == chat_id


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def token_matches(given: str, token: str) -> bool:
    """Whether ``given`` is the dashboard token (constant time; an empty token matches none)."""
    return bool(token) and hmac.compare_digest(given.encode(), token.encode())


def _signer(token: str) -> URLSafeSerializer:
    key = hmac.new(token.encode(), b"engram dashboard cookie", hashlib.sha256).hexdigest()
    return URLSafeSerializer(key, salt="session")


def sign_session(token: str, sid: str) -> str:
    """The cookie value for session id ``sid``."""
    return str(_signer(token).dumps(sid))


def unsign_session(token: str, cookie: str) -> str | None:
    """The session id in a cookie, or None when its signature is wrong."""
    try:
        value = _signer(token).loads(cookie)
    except BadSignature:
        return None
    return value if isinstance(value, str) else None


async def start_session(db: Queries, chat_id: int | None, now: datetime) -> str:
    """Store a new session; its id (for the cookie)."""
    sid = secrets.token_urlsafe(32)
    await db.execute(
        "INSERT INTO dashboard_sessions (sid_hash, chat_id, csrf, created_at, expires_at)"
        " VALUES ($1, $2, $3, $4, $5)",
        _hash(sid),
        chat_id,
        secrets.token_urlsafe(24),
        now,
        now + timedelta(hours=SESSION_HOURS),
    )
    return sid


async def find_session(db: Queries, sid: str, now: datetime) -> Login | None:
    """The live session with id ``sid`` (None: unknown, ended or expired)."""
    row = await db.fetchrow(
        "/* all chats: a session found by its secret, its chat unknown until found */ "
        "SELECT id, chat_id, csrf FROM dashboard_sessions WHERE sid_hash = $1 AND expires_at > $2",
        _hash(sid),
        now,
    )
    if row is None:
        return None
    return Login(int(row["id"]), row["chat_id"], str(row["csrf"]))


async def end_session(db: Queries, session_id: int) -> None:
    """Log out: the session's row is deleted (and expired ones with it)."""
    await db.execute(
        "/* all chats: expired sessions purged with the signed-out one */ "
        "DELETE FROM dashboard_sessions WHERE id = $1 OR expires_at < now()",
        session_id,
    )


async def create_link(
    db: Queries, chat_id: int | None, now: datetime, minutes: int = LINK_MINUTES
) -> str:
    """A one-time login secret (scoped to ``chat_id``; None: every chat), valid ``minutes``."""
    secret = secrets.token_urlsafe(32)
    await db.execute(
        "INSERT INTO dashboard_links (secret_hash, chat_id, created_at, expires_at)"
        " VALUES ($1, $2, $3, $4)",
        _hash(secret),
        chat_id,
        now,
        now + timedelta(minutes=minutes),
    )
    return secret


async def use_link(db: Queries, secret: str, now: datetime) -> tuple[bool, int | None]:
    """Use up a one-time link: (True, its chat) the first time within its validity, else
    (False, None)."""
    row = await db.fetchrow(
        "/* all chats: a sign-in link found by its secret, its chat unknown until found */ "
        "UPDATE dashboard_links SET used_at = $2"
        " WHERE secret_hash = $1 AND used_at IS NULL AND expires_at > $2 RETURNING chat_id",
        _hash(secret),
        now,
    )
    if row is None:
        return False, None
    return True, row["chat_id"]


def csrf_matches(login: Login, given: str | None) -> bool:
    """Whether a form's CSRF token is the session's."""
    return given is not None and hmac.compare_digest(given.encode(), login.csrf.encode())
