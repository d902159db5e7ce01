"""Dashboard logins on the real database: sessions end for real, links work once and expire,
cookies are signed, CSRF tokens are per session."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from actors.dashboard import auth
from runtime.db import Database

NOW = datetime(2026, 11, 26, 12, tzinfo=UTC)
TOKEN = "0123456789abcdef0123"


async def test_a_session_lives_until_logout_or_expiry(db: Database) -> None:
    sid = await auth.start_session(db, None, NOW)
    login = await auth.find_session(db, sid, NOW)
    assert login is not None and login.chat_id is None and login.may_see(5)
    later = NOW + timedelta(hours=auth.SESSION_HOURS, seconds=1)
    assert await auth.find_session(db, sid, later) is None
    await auth.end_session(db, login.session_id)
    assert await auth.find_session(db, sid, NOW) is None
    # the id itself is not stored
    assert (
        await db.fetchval("SELECT count(*) FROM dashboard_sessions WHERE sid_hash = $1", sid) == 0
    )


async def test_each_session_has_its_own_csrf_token(db: Database) -> None:
    a = await auth.find_session(db, await auth.start_session(db, 1, NOW), NOW)
    b = await auth.find_session(db, await auth.start_session(db, 1, NOW), NOW)
    assert a is not None and b is not None and a.csrf != b.csrf
    assert auth.csrf_matches(a, a.csrf)
    assert not auth.csrf_matches(a, b.csrf) and not auth.csrf_matches(a, None)
    assert not auth.csrf_matches(a, "")


async def test_a_link_works_once_and_not_after_it_expires(db: Database) -> None:
    secret = await auth.create_link(db, 42, NOW)
    assert await auth.use_link(db, secret, NOW) == (True, 42)
    assert await auth.use_link(db, secret, NOW) == (False, None)
    late = await auth.create_link(db, None, NOW, minutes=1)
    assert await auth.use_link(db, late, NOW + timedelta(minutes=2)) == (False, None)
    assert await auth.use_link(db, "made-up", NOW) == (False, None)


def test_cookies_are_signed_with_the_token() -> None:
    cookie = auth.sign_session(TOKEN, "sid-1")
    assert auth.unsign_session(TOKEN, cookie) == "sid-1"
    assert auth.unsign_session(TOKEN + "x", cookie) is None  # another token: refused
    assert auth.unsign_session(TOKEN, cookie[:-2] + "xx") is None
    assert auth.unsign_session(TOKEN, "garbage") is None


def test_the_token_compare_refuses_near_misses_and_the_empty_token() -> None:
    assert auth.token_matches(TOKEN, TOKEN)
    assert not auth.token_matches(TOKEN[:-1], TOKEN)
    assert not auth.token_matches("", "")
