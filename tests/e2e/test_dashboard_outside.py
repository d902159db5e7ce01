"""The dashboard from outside (issue 25, item 2): ``engram serve`` as a subprocess with
``DASHBOARD_TOKEN`` set, driven over real HTTP (and its live feed over a real WebSocket).

Who may reach what: no token, a wrong token, a missing or wrong CSRF token, another chat's pattern,
a used or expired one-time link, a session after logging out — each refused, and nothing changed;
the right login sees the memory, searches it through the product's retrieval, forgets a pattern
(gone from the database), plots the costs as SVG. Without ``DASHBOARD_TOKEN`` the dashboard does
not exist (404); a token too short stops start-up with one line naming it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio
from dashboard_outside import TOKEN, A, B, add_pattern, add_usage, csrf_of, link, serving
from engram_outside import REPO
from trio_websocket import ConnectionRejected, open_websocket_url

from runtime.db import Database

pytestmark = pytest.mark.slow


async def test_the_dashboard_refuses_what_it_must_and_does_what_it_shows(
    tmp_path: Path, db: Database, database_url: str
) -> None:
    mine = await add_pattern(db, A, "User keeps bees on the allotment", "preference")
    other = await add_pattern(db, A, "User runs on Sunday mornings")
    await db.execute(
        "INSERT INTO pattern_relations (chat_id, from_pattern_id, to_pattern_id, relation)"
        " VALUES ($1, $2, $3, 'supports')",
        A,
        mine,
        other,
    )
    theirs = await add_pattern(db, B, "User is allergic to penicillin")
    await add_usage(db, A)
    async with serving(tmp_path, database_url, DASHBOARD_TOKEN=TOKEN) as engram:
        base = f"http://127.0.0.1:{engram.port}/dashboard"
        async with httpx.AsyncClient(timeout=10) as anon:
            r = await anon.get(f"{base}/")
            assert r.status_code == 302 and r.headers["location"].endswith("/dashboard/login")
            r = await anon.get(f"{base}/chats/{A}/memory")
            assert r.status_code == 302
            r = await anon.post(f"{base}/login", data={"token": TOKEN[:-1] + "x"})
            assert r.status_code == 403 and "set-cookie" not in r.headers
            r = await anon.post(f"{base}/chats/{A}/patterns/{mine}/forget", data={"csrf": "x"})
            assert r.status_code == 403
            r = await anon.get(f"{base}/login/not-a-link")
            assert r.status_code == 403

        async with httpx.AsyncClient(timeout=10) as web:
            r = await web.post(f"{base}/login", data={"token": TOKEN})
            assert r.status_code == 302
            cookie = r.headers["set-cookie"]
            assert (
                "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/dashboard" in cookie
            )
            home = await web.get(f"{base}/")
            assert home.status_code == 200 and str(A) in home.text and str(B) in home.text
            page = await web.get(f"{base}/chats/{A}/memory")
            assert "User keeps bees on the allotment" in page.text
            assert "penicillin" not in page.text
            found = await web.get(f"{base}/chats/{A}/memory", params={"q": "honey bees"})
            assert "User keeps bees on the allotment" in found.text
            assert (
                found.text.index("bees") < found.text.find("Sunday") or "Sunday" not in found.text
            )
            detail = await web.get(f"{base}/chats/{A}/patterns/{mine}")
            assert detail.status_code == 200 and "<svg" in detail.text  # the relation graph
            assert "I said: User keeps bees" in detail.text
            # another chat's pattern through this chat's pages: not found, and not forgotten
            assert (await web.get(f"{base}/chats/{A}/patterns/{theirs}")).status_code == 404
            # ids no database column can hold name nothing (not a server error)
            huge = 10**25
            for path in (
                f"/chats/{A}/patterns/{huge}",
                f"/chats/{huge}/memory",
                f"/usage?chat={huge}",
            ):
                assert (await web.get(f"{base}{path}")).status_code == 404, path
            for offset in (str(huge), "-3", "x"):  # a page past any chat's end: a page
                r = await web.get(f"{base}/chats/{A}/memory", params={"offset": offset})
                assert r.status_code == 200, offset
            csrf = csrf_of(page.text)
            r = await web.post(f"{base}/chats/{A}/patterns/{theirs}/forget", data={"csrf": csrf})
            assert r.status_code == 404
            assert await db.fetchval("SELECT count(*) FROM patterns WHERE id = $1", theirs) == 1
            # no CSRF token, or another one: refused, nothing changed
            r = await web.post(f"{base}/chats/{A}/patterns/{mine}/forget")
            assert r.status_code == 403
            r = await web.post(f"{base}/chats/{A}/patterns/{mine}/forget", data={"csrf": "x" * 32})
            assert r.status_code == 403
            assert await db.fetchval("SELECT count(*) FROM patterns WHERE id = $1", mine) == 1
            # pin, then forget: through the chat commands' code (audited)
            r = await web.post(f"{base}/chats/{A}/patterns/{mine}/pin", data={"csrf": csrf})
            assert r.status_code == 302
            assert await db.fetchval("SELECT is_core_tenet FROM patterns WHERE id = $1", mine)
            r = await web.post(f"{base}/chats/{A}/patterns/{mine}/forget", data={"csrf": csrf})
            assert r.status_code == 302
            assert await db.fetchval("SELECT count(*) FROM patterns WHERE id = $1", mine) == 0
            assert (
                await db.fetchval(
                    "SELECT count(*) FROM pattern_observations WHERE pattern_id = $1", mine
                )
                == 0
            )
            # plots and health
            usage = await web.get(f"{base}/usage", params={"chat": A})
            assert usage.status_code == 200 and usage.text.count("<svg") == 3
            assert 'class="bar"' in usage.text and "agent" in usage.text
            health = await web.get(f"{base}/health")
            assert health.status_code == 200 and "heartbeat" in health.text
            # logging out ends the session: the same cookie no longer opens a page
            saved = dict(web.cookies)
            r = await web.post(f"{base}/logout", data={"csrf": csrf})
            assert r.status_code == 302
            async with httpx.AsyncClient(timeout=10, cookies=saved) as replay:
                r = await replay.get(f"{base}/chats/{A}/memory")
                assert r.status_code == 302

        # a one-time link scoped to chat B: sees B only, and works once
        url = link(engram, "--chat", str(B))
        assert url.startswith(f"http://127.0.0.1:{engram.port}/dashboard/login/")
        async with httpx.AsyncClient(timeout=10) as person:
            r = await person.get(url)
            assert r.status_code == 302
            assert (await person.get(f"{base}/chats/{B}/memory")).status_code == 200
            assert (await person.get(f"{base}/chats/{A}/memory")).status_code == 404
            assert (await person.get(f"{base}/usage", params={"chat": A})).status_code == 404
            home = await person.get(f"{base}/", follow_redirects=True)
            assert "penicillin" in home.text and str(A) not in home.text
        async with httpx.AsyncClient(timeout=10) as thief:
            assert (await thief.get(url)).status_code == 403  # used up


async def test_the_live_feed_sends_new_messages_and_refuses_strangers(
    tmp_path: Path, db: Database, database_url: str
) -> None:
    async with serving(tmp_path, database_url, DASHBOARD_TOKEN=TOKEN) as engram:
        base = f"http://127.0.0.1:{engram.port}/dashboard"
        async with httpx.AsyncClient(timeout=10) as web:
            await web.post(f"{base}/login", data={"token": TOKEN})
            cookie = "; ".join(f"{k}={v}" for k, v in web.cookies.items())
        ws = f"ws://127.0.0.1:{engram.port}/dashboard/feed?chat={A}"
        headers = [
            (b"Cookie", cookie.encode()),
            (b"Origin", f"http://127.0.0.1:{engram.port}".encode()),
        ]
        async with open_websocket_url(ws, extra_headers=headers) as socket:
            await db.execute(
                "INSERT INTO chat_messages (chat_id, role, content) VALUES ($1, 'user', $2)",
                A,
                "I planted tomatoes today",
            )
            with trio.fail_after(15):
                event = json.loads(await socket.get_message())
            assert event == {**event, "type": "message", "role": "user"}
            assert event["text"] == "I planted tomatoes today"
        # no cookie, or another site's page: no feed
        bad_origin = [(b"Cookie", cookie.encode()), (b"Origin", b"https://evil.example")]
        for bad in ([], bad_origin):
            with pytest.raises(ConnectionRejected) as refused:
                async with open_websocket_url(ws, extra_headers=bad) as socket:
                    await socket.get_message()
            assert refused.value.status_code == 403


async def test_without_a_token_there_is_no_dashboard(tmp_path: Path, database_url: str) -> None:
    async with serving(tmp_path, database_url) as engram, httpx.AsyncClient(timeout=10) as web:
        base = f"http://127.0.0.1:{engram.port}/dashboard"
        assert (await web.get(f"{base}/")).status_code == 404
        assert (await web.post(f"{base}/login", data={"token": ""})).status_code == 404


def test_a_short_token_stops_start_up_naming_it(tmp_path: Path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ENGRAM_", "TELEGRAM_", "DATABASE_URL", "ANTHROPIC_", "DASHBOARD_"))
    }
    env.update(
        PYTHONPATH=str(REPO),
        ENGRAM_HOME=str(tmp_path / "home"),
        DASHBOARD_TOKEN="short",
        TELEGRAM_BOT_TOKEN="123456:" + "A" * 35,
        ANTHROPIC_API_KEY="sk-ant-test",
    )
    result = subprocess.run(
        [sys.executable, "-m", "actors.cli", "serve"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "DASHBOARD_TOKEN" in lines[0] and "short" not in lines[0]
    assert not (tmp_path / "home").exists()
