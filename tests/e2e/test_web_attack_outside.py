"""engram's HTTP and WebSocket surface attacked from outside: one ``engram serve --webhook`` (a
subprocess with DASHBOARD_TOKEN and METRICS_TOKEN, the strict fake Bot API, the echo model)
answers every probe of one test.

Every bad input gets a 4xx (on ``/api/v1`` JSON with a stable ``code``), never a 500; the
process keeps serving; its log holds no traceback and no secret; a chat's token sees its chat
only. The probes are tables (path, what to send, the answer expected), grouped by surface.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from engram_outside import SECRET, WEBHOOK, post_update, update_body
from trio_websocket import ConnectionClosed, ConnectionRejected
from trio_websocket import open_websocket_url as _open_websocket_url
from web_attack_outside import (
    BAD_INTS,
    CHAT,
    HUGE,
    METRICS,
    OTHER,
    SLOTS,
    TOKEN,
    Target,
    api_error,
    assert_log_clean,
    login,
    target,
)

from actors.local.token import load_or_create
from actors.web.auth import chat_token
from runtime.db import Database

pytestmark = pytest.mark.slow


def open_websocket_url(url: str, **options: Any) -> Any:
    """trio-websocket's client with its close bounded (2 s, not 60): a server that closed
    first (1009, a refusal) leaves the client waiting on its own close handshake otherwise."""
    return _open_websocket_url(url, disconnect_timeout=2, **options)


async def probe_api(t: Target, client: httpx.AsyncClient) -> None:
    api = f"{t.base}/api/v1"
    op = {"Authorization": f"Bearer {TOKEN}"}
    mine = {"Authorization": f"Bearer {chat_token(TOKEN, CHAT)}"}
    # the document needs no token
    assert (await client.get(f"{api}/openapi.json")).json()["openapi"].startswith("3.1")
    # tokens: every wrong one is unauthorized (429 once the guard counts too many)
    for header in (
        "",
        "Bearer",
        "Bearer  \t x",
        f"Basic {TOKEN}",
        f"Bearer {TOKEN}x",
        f"Bearer {TOKEN[:-1]}",
        "Bearer " + "x" * 8000,
        f"Bearer c{CHAT}.x",
        f"Bearer c{'9' * 5000}.x",
        f"Bearer c-{CHAT}.{chat_token(TOKEN, CHAT).partition('.')[2]}",
        f"Bearer {chat_token(TOKEN + 'x', CHAT)}",
    ):
        r = await client.get(f"{api}/chats/{CHAT}/usage", headers={"Authorization": header})
        api_error(r, (401, 429))
    r = await client.get(
        f"{api}/chats/{CHAT}/usage", headers=[(b"Authorization", "Bearer tökén".encode("latin-1"))]
    )
    api_error(r, (401, 429))
    assert (
        await client.get(f"{api}/usage", headers={"Authorization": f"bearer   {TOKEN}"})
    ).status_code == 200
    # a chat's token: its chat only
    for path in (
        f"/chats/{OTHER}/usage",
        f"/chats/{OTHER}/patterns/{t.theirs}",
        f"/chats/{OTHER}/episodes",
        f"/chats/{OTHER}/patterns/search?q=penicillin",
        "/usage",
        "/health",
    ):
        api_error(await client.get(f"{api}{path}", headers=mine), 403, "chat_forbidden")
    r = await client.get(f"{api}/chats", headers=mine)
    assert [c["chat_id"] for c in r.json()["chats"]] == [CHAT]
    api_error(
        await client.get(f"{api}/chats/{CHAT}/patterns/{t.theirs}", headers=mine), 404, "not_found"
    )
    r = await client.get(f"{api}/chats/{CHAT}/patterns/search?q=penicillin", headers=mine)
    assert r.status_code == 200 and "allergic" not in r.text
    # malformed ids and query parameters
    for bad in BAD_INTS:
        for path in (
            f"/chats/{bad}/usage",
            f"/chats/{CHAT}/patterns/{bad}",
            f"/chats/{CHAT}/episodes?limit={bad}",
            f"/chats/{CHAT}/episodes?before={bad}",
            f"/chats/{CHAT}/usage?days={bad}",
            f"/chats/{CHAT}/patterns/search?q=bees&limit={bad}",
        ):
            r = await client.get(f"{api}{path}", headers=op)
            if r.status_code != 200:  # "+1", " " and the like may be read as defaults
                api_error(r, (400, 404))
    for query in ("", " ", "x" * 501, "%00", "bees%00bees", "%ff%fe", "%ED%A0%80", "🐝" * 100):
        r = await client.get(f"{api}/chats/{CHAT}/patterns/search?q={query}", headers=op)
        if r.status_code != 200:
            api_error(r, 400, "bad_request")
    r = await client.get(f"{api}/chats/{CHAT}/patterns/search?q=a&q=b&limit=1&limit=x", headers=op)
    assert r.status_code == 200
    for path in ("/chats/-9223372036854775808/usage", "/chats/9223372036854775807/episodes"):
        assert (await client.get(f"{api}{path}", headers=op)).status_code == 200
    for path in ("/chats/-9223372036854775809/usage", "/chats/9223372036854775808/episodes"):
        api_error(await client.get(f"{api}{path}", headers=op), 400, "bad_request")
    # unknown endpoints and methods, bodies and content types the API never reads
    r = await client.get(api, headers=op)  # the framework's redirect to "/api/v1/"
    assert r.status_code == 308 and r.headers["location"].endswith("/api/v1/")
    for path in ("/", "/nope", "/chats/1", f"/chats/{CHAT}/patterns", "/%00", "/..%2f.."):
        api_error(await client.get(f"{api}{path}", headers=op), 404, "not_found")
    for method in ("POST", "PUT", "PATCH", "DELETE", "OPTIONS"):
        r = await client.request(
            method,
            f"{api}/chats/{CHAT}/usage",
            headers={**op, "Content-Type": "application/x-garbage"},
            content=b"{" * 5000,
        )
        api_error(r, 405, "method_not_allowed")
    r = await client.post(f"{api}/usage", headers=op, content=b"x" * (2 * 1024 * 1024))
    assert 400 <= r.status_code < 500 and r.status_code != 500
    # answered before the body was read: the connection ends with it, and says so (a client
    # keeping it alive would send its next request into a closed socket)
    assert r.headers.get("connection") == "close"


async def probe_metrics(t: Target, client: httpx.AsyncClient) -> None:
    url = f"{t.base}/metrics"
    for header in ("", "Bearer", f"Bearer {TOKEN}", f"Bearer {METRICS}x", f"Basic {METRICS}"):
        r = await client.get(url, headers={"Authorization": header})
        assert r.status_code == 401 and METRICS not in r.text
    r = await client.get(url, headers=[(b"Authorization", "Bearer ünï".encode("latin-1"))])
    assert r.status_code == 401
    r = await client.get(url, headers={"Authorization": f"bearer {METRICS}"})
    assert r.status_code == 200 and "engram_" in r.text
    assert (await client.post(url, headers={"Authorization": f"Bearer {METRICS}"})).status_code in (
        404,
        405,
    )


async def probe_dashboard_gate(t: Target, client: httpx.AsyncClient) -> None:
    dash = f"{t.base}/dashboard"
    # logins that must fail: a 4xx, no cookie
    for content, ctype in (
        (b"", "application/x-www-form-urlencoded"),
        (b"token=", "application/x-www-form-urlencoded"),
        (b"token=%ff%fe", "application/x-www-form-urlencoded"),
        (b"token=%ED%A0%80", "application/x-www-form-urlencoded"),
        (f"token=wrong&token={TOKEN}".encode(), "application/x-www-form-urlencoded"),
        (f"token[]={TOKEN}".encode(), "application/x-www-form-urlencoded"),
        (json.dumps({"token": TOKEN}).encode(), "application/json"),
        (b"--x\r\nContent-Disposition: form-data; name=token\r\n\r\n", "multipart/form-data"),
        (b"garbage", "multipart/form-data; boundary=zz"),
        (b"token=" + b"x" * (2 * 1024 * 1024), "application/x-www-form-urlencoded"),
    ):
        r = await client.post(f"{dash}/login", content=content, headers={"Content-Type": ctype})
        assert 400 <= r.status_code < 500, (content[:60], r.status_code)
        assert "set-cookie" not in r.headers and TOKEN not in r.text
    for secret in ("x", "x" * 5000, "%00", "%ff", "..%2f..", "🐝"):
        r = await client.get(f"{dash}/login/{secret}")
        assert r.status_code in (403, 404) and "set-cookie" not in r.headers
    # cookies that must not open a page: a redirect to the login page
    web, _ = await login(t)
    good = web.cookies["engram_dashboard"]
    await web.aclose()
    for cookie in (
        "",
        "x",
        "garbled.garbled",
        good[:-2] + "zz",
        good + "x",
        good.replace(".", "..", 1),
        "x" * 7000,
    ):
        for page in ("/", f"/chats/{CHAT}/memory", "/usage", "/health"):
            r = await client.get(f"{dash}{page}", headers={"Cookie": f"engram_dashboard={cookie}"})
            assert r.status_code == 302, (cookie[:40], page, r.status_code)
    r = await client.get(
        f"{dash}/", headers=[(b"Cookie", "engram_dashboard=ünï".encode("latin-1"))]
    )
    assert r.status_code == 302
    r = await client.get(f"{dash}/", headers={"X-Long": "y" * 12_000})
    assert r.status_code in (302, 400, 431)


async def probe_dashboard_pages(t: Target) -> None:
    dash = f"{t.base}/dashboard"
    web, csrf = await login(t)
    try:
        for bad in BAD_INTS:
            for path in (
                f"/chats/{bad}/memory",
                f"/chats/{CHAT}/patterns/{bad}",
                f"/chats/{bad}/conversation",
            ):
                r = await web.get(f"{dash}{path}")
                assert r.status_code in (200, 404), (path, r.status_code)
        params: list[dict[str, str]] = [
            {"q": "bees\x00bees"},
            {"q": "x" * 5000},
            {"kind": "nope", "status": "<i>x</i>", "q": "<i>y</i>"},
            {"offset": "-5"},
            {"offset": HUGE},
            {"offset": "٣"},
            {"offset": "1" * 5000},
            {"done": "<b>"},
        ]
        for values in params:
            r = await web.get(f"{dash}/chats/{CHAT}/memory", params=values)
            assert r.status_code == 200, (values, r.status_code)
            assert "<i>" not in r.text and "<b>" not in r.text
        for day in ("../../etc/passwd", "2026-13-45", "\x00", "x" * 3000, "2026-01-01"):
            r = await web.get(f"{dash}/chats/{CHAT}/conversation", params={"day": day})
            assert r.status_code == 404, (day[:20], r.status_code)
        for values in (
            {"days": "-1"},
            {"days": HUGE},
            {"days": "abc"},
            {"chat": HUGE},
            {"chat": "abc"},
            {"chat": str(-(2**63) - 1)},
        ):
            r = await web.get(f"{dash}/usage", params=values)
            assert r.status_code in (200, 404), (values, r.status_code)
        # forms: no, wrong, duplicate or garbled CSRF tokens change nothing
        forget = f"{dash}/chats/{CHAT}/patterns/{t.pattern}/forget"
        for content in (
            b"",
            b"csrf=",
            b"csrf=wrong",
            f"csrf=wrong&csrf={csrf}".encode(),
            b"csrf=%ff%fe",
            b"csrf=%ED%A0%80",
        ):
            r = await web.post(
                forget,
                content=content,
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            )
            assert r.status_code == 403, (content, r.status_code)
        for path in (
            f"/chats/{CHAT}/patterns/{t.pattern}/explode",
            f"/chats/{CHAT}/patterns/{HUGE}/forget",
            f"/chats/{CHAT}/patterns/{t.theirs}/forget",
            f"/chats/{OTHER}0/patterns/{t.theirs}/forget",
        ):
            r = await web.post(f"{dash}{path}", data={"csrf": csrf})
            assert r.status_code == 404, (path, r.status_code)
        r = await web.get(f"{dash}/chats/{CHAT}/patterns/{t.pattern}")
        assert r.status_code == 200 and "User keeps bees" in r.text
        # the feed: no cookie, another site, a chat past BIGINT, frames it never reads
        ws = f"ws://127.0.0.1:{t.engram.port}/dashboard/feed"
        cookie = (b"cookie", f"engram_dashboard={web.cookies['engram_dashboard']}".encode())
        for query, headers, status in (
            (f"?chat={CHAT}", [], 403),
            (f"?chat={CHAT}", [cookie, (b"origin", b"https://evil.test")], 403),
            (f"?chat={HUGE}", [cookie], 404),
            (f"?chat=-{HUGE}", [cookie], 404),
        ):
            with pytest.raises(ConnectionRejected) as rejected:
                async with open_websocket_url(ws + query, extra_headers=headers):
                    pass
            assert rejected.value.status_code == status, (query, status)
        # frames the feed never needed, then a close: more such feeds than the server has
        # connection slots, one after another, and each ends (its slot comes back)
        for _ in range(SLOTS + 8):
            async with open_websocket_url(f"{ws}?chat=abc", extra_headers=[cookie]) as feed:
                for _ in range(15):
                    await feed.send_message(b"\x00" * 1000)
                    await feed.send_message("{" * 1000)
        await web.post(f"{dash}/logout", data={"csrf": csrf})
    finally:
        await web.aclose()


async def probe_local_chat(t: Target) -> None:
    url = f"ws://127.0.0.1:{t.engram.port}/ws/chat"
    good = (b"authorization", f"Bearer {load_or_create(t.home)}".encode())
    for headers, status in (
        ([], 401),
        ([(b"authorization", b"Bearer")], 401),
        ([(b"authorization", "Bearer tökén".encode("latin-1"))], 401),
        ([(b"authorization", b"Bearer " + b"x" * 8000)], 401),
        ([good, (b"origin", b"null")], 403),
    ):
        with pytest.raises(ConnectionRejected) as rejected:
            async with open_websocket_url(url, extra_headers=headers):
                pass
        assert rejected.value.status_code == status
    async with open_websocket_url(url, extra_headers=[good]) as ws:
        assert '"hello"' in await ws.get_message()
        for frame, code in (
            (b"\x00\x01", "not_text"),
            ("[" * 30_000, "not_json"),
            ('{"a":' * 10_000, "not_json"),
            ("[1]", "not_json"),
            ('{"type": "send", "id": "s2", "text": 5}', "bad_field"),
            ('{"type": "choose", "id": "c1", "message_id": 1e400, "data": "x"}', "bad_field"),
            (
                '{"type": "choose", "id": "c2", "message_id": ' + HUGE + ', "data": "x"}',
                "bad_field",
            ),
            ('{"type": "nope"}', "unknown_type"),
        ):
            await ws.send_message(frame)
            if code is None:
                continue
            with trio.fail_after(10):
                answer = json.loads(await ws.get_message())
            assert answer["type"] == "error" and answer["code"] == code, (str(frame)[:40], answer)
        await ws.send_message('{"type": "ack", "delivery": "\\u0000"}')  # nothing to end
        # NUL and half a surrogate pair are stored (the inbox makes them U+FFFD), as from Telegram
        for frame in (
            '{"type": "send", "id": "n1", "text": "nul \\u0000 inside"}',
            '{"type": "send", "id": "s1", "text": "half \\ud800 a pair"}',
            '{"type": "send", "id": "ok1", "text": "msg 1"}',
        ):
            await ws.send_message(frame)
            with trio.fail_after(10):
                while "stored" not in await ws.get_message():
                    pass
    # many clients at once: each replaces the one before; none breaks the server
    async with trio.open_nursery() as nursery:
        for _ in range(20):

            async def one() -> None:
                try:
                    async with open_websocket_url(url, extra_headers=[good]) as ws:
                        await ws.get_message()
                except ConnectionClosed:
                    pass

            nursery.start_soon(one)


async def probe_webhook(t: Target, client: httpx.AsyncClient) -> None:
    url = f"{t.base}{WEBHOOK}"
    ok = {"X-Telegram-Bot-Api-Secret-Token": SECRET, "Content-Type": "application/json"}
    for headers, body in (
        ({}, b"{}"),
        ({"X-Telegram-Bot-Api-Secret-Token": SECRET + "x"}, b"{}"),
        ({"X-Telegram-Bot-Api-Secret-Token": "\xe9" + SECRET}, b"{}"),
        (ok, b"{"),
        (ok, b"[" * 50_000),
        (ok, b"\xff\xfe"),
        (ok, b'{"update_id": 1e999}'),
        (ok, b"x" * (3 * 1024 * 1024)),
    ):
        raw = [(k.encode(), v.encode("latin-1")) for k, v in headers.items()]
        r = await client.post(url, headers=raw, content=body)
        assert 400 <= r.status_code < 500, (body[:30], r.status_code)
        assert SECRET not in r.text
    # an update id past BIGINT, of a kind engram ignores: acknowledged, nothing stored
    r = await client.post(url, headers=ok, content=json.dumps({"update_id": 10**30}).encode())
    assert r.status_code in (200, 400) and SECRET not in r.text


async def test_every_route_refuses_bad_input_with_a_4xx_and_keeps_serving(
    tmp_path: Path, db: Database, database_url: str
) -> None:
    async with target(tmp_path, db, database_url) as t, httpx.AsyncClient(timeout=15) as client:
        with trio.fail_after(20):
            await probe_api(t, client)
        with trio.fail_after(20):
            await probe_metrics(t, client)
        with trio.fail_after(20):
            await probe_dashboard_gate(t, client)
        with trio.fail_after(20):
            await probe_dashboard_pages(t)
        with trio.fail_after(20):
            await probe_local_chat(t)
        with trio.fail_after(20):
            await probe_webhook(t, client)
        # still serving: a Telegram update is answered, the forms did nothing
        assert await post_update(client, t.engram.port, update_body(77, chat=CHAT)) == 200
        with trio.fail_after(30):
            while "re 77" not in t.bot.sent_texts(CHAT):  # noqa: ASYNC110 - another process
                await trio.sleep(0.05)
        assert await db.fetchval("SELECT status FROM patterns WHERE id = $1", t.pattern) != (
            "forgotten"
        )
        assert t.engram.running
        assert_log_clean(t.engram)
