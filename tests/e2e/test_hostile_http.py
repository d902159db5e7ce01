"""Hostile peers against a running ``engram serve --webhook`` (issue 20, rows 1 and 8), from
outside: raw sockets on 127.0.0.1, the process a subprocess with its own database, the strict
fake Bot API and the echo model.

* Row 1: a body announced with ``Content-Length: 100000``, 4 bytes of it, then a half-close,
  to every route (5 connections at once) stops nothing.
* Row 8: slow bodies and slow headers, more of them than the server has connection slots, hold
  no slot past their deadline and never starve ``/healthz``; a flood of wrong-secret posts is
  answered at once and does not delay Telegram's own posts.
* A seeded raw-socket fuzz of malformed requests against every route: ``/healthz`` answers
  within 2 s throughout, the process lives, the log is JSON lines without a traceback or the
  secret, and a normal update is still stored and answered at the end.
"""

from __future__ import annotations

import random
import re
import socket
import struct
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import httpx
import pytest
import trio
from engram_outside import (
    SECRET,
    WEBHOOK,
    Engram,
    free_port,
    post_update,
    run_echo_anthropic,
    serve_env,
    update_body,
)
from fakes.bot_api import FakeBotApi, run_fake_bot_api

pytestmark = pytest.mark.slow

CHAT = 2020
ROUTES = ("/healthz", "/readyz", WEBHOOK, "/no/such/path")
HEALTH_LIMIT = 2.0  # seconds /healthz may take, whatever else is going on
_STATUS = re.compile(rb"HTTP/1\.[01] (\d{3})")


@asynccontextmanager
async def running(
    tmp_path: Path, database_url: str, **extra: str
) -> AsyncIterator[tuple[Engram, FakeBotApi]]:
    """``engram serve --webhook`` against the fakes, ready; stopped (or found dead) after."""
    async with run_fake_bot_api() as bot_api, run_echo_anthropic() as model:
        env = serve_env(
            tmp_path,
            bot_api=bot_api.base_url,
            model=model.base_url,
            port=free_port(),
            chats=[CHAT],
            DATABASE_URL=database_url,
            **extra,
        )
        engram = Engram(env, tmp_path / "engram.log")
        await engram.start()
        try:
            await engram.wait_ready()
            yield engram, bot_api
        finally:
            if engram.running:
                await engram.stop()


def head(
    method: str,
    path: str,
    *,
    length: int | str | None = None,
    secret: str | None = None,
    extra: Sequence[str] = (),
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: engram", *extra]
    if secret is not None:
        lines.append(f"X-Telegram-Bot-Api-Secret-Token: {secret}")
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def exchange(port: int, data: bytes, *, end: str = "fin", limit: float = 3.0) -> bytes:
    """Send ``data``, then ``end`` it: "fin" (half-close), "reset" (SO_LINGER 0: an RST) or
    "hold" (nothing); what the server sends back until it closes or ``limit`` seconds pass
    (nothing when it refuses the connection: the caller checks that the process lives)."""
    try:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
    except OSError:
        return b""
    got = b""
    try:
        with trio.move_on_after(limit):
            try:
                await stream.send_all(data)
                if end == "reset":
                    stream.socket.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                    return got
                if end == "fin":
                    await stream.send_eof()
                while chunk := await stream.receive_some(65536):
                    got += chunk
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
    finally:
        stream.socket.close()
    return got


def statuses(answer: bytes) -> list[int]:
    return [int(m) for m in _STATUS.findall(answer)]


@attrs.define
class HealthWatch:
    """``GET /healthz`` on a fresh connection every 0.1 s; what took longer than
    :data:`HEALTH_LIMIT` or did not answer 200."""

    port: int
    slowest: float = 0.0
    probes: int = 0
    failures: list[str] = attrs.Factory(list)

    async def run(self, stop: trio.Event) -> None:
        while not stop.is_set():
            start = trio.current_time()
            try:
                with trio.fail_after(HEALTH_LIMIT):
                    answer = await exchange(self.port, head("GET", "/healthz"), end="fin")
                if statuses(answer)[:1] != [200]:
                    self.failures.append(f"answer {answer[:40]!r}")
            except (trio.TooSlowError, OSError) as exc:
                self.failures.append(f"{type(exc).__name__} at {start:.1f}")
            self.slowest = max(self.slowest, trio.current_time() - start)
            self.probes += 1
            await trio.sleep(0.1)


@asynccontextmanager
async def watching_health(port: int) -> AsyncIterator[HealthWatch]:
    watch, stop = HealthWatch(port), trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch.run, stop)
        try:
            yield watch
        finally:
            stop.set()


def assert_log_clean(engram: Engram) -> None:
    """One JSON object a line, no traceback, no secret."""
    text = engram.log_path.read_text(errors="replace")
    assert "Traceback" not in text
    assert SECRET not in text
    assert [e for e in engram.log_events() if e["event"] == "(not json)"] == []


async def assert_still_answers(engram: Engram, bot_api: FakeBotApi, update_id: int) -> None:
    """A normal update is stored (200) and answered through the fake Bot API."""
    async with httpx.AsyncClient(timeout=10) as client:
        assert await post_update(client, engram.port, update_body(update_id, chat=CHAT)) == 200
    with trio.fail_after(30):
        while f"re {update_id}" not in bot_api.sent_texts(CHAT):  # noqa: ASYNC110
            await trio.sleep(0.1)
    assert engram.running


async def test_half_close_in_the_middle_of_a_body_stops_nothing(
    tmp_path: Path, database_url: str
) -> None:
    """Row 1: 100000 bytes announced, 4 sent, then FIN, 5 connections at once, every route."""
    async with running(tmp_path, database_url) as (engram, bot_api):
        answers: list[bytes] = []

        async def one(path: str, secret: str | None) -> None:
            data = head("POST", path, length=100_000, secret=secret) + b"abcd"
            answers.append(await exchange(engram.port, data, end="fin"))

        for path in ROUTES:
            for secret in (None, SECRET) if path == WEBHOOK else (None,):
                async with trio.open_nursery() as nursery:
                    for _ in range(5):
                        nursery.start_soon(one, path, secret)
                await trio.sleep(0.3)
                assert engram.running, (path, engram.tail())
                with trio.fail_after(HEALTH_LIMIT):
                    health = await exchange(engram.port, head("GET", "/healthz"))
                assert statuses(health) == [200], (path, engram.tail())
        assert len(answers) == 25
        assert 500 not in [status for answer in answers for status in statuses(answer)]
        assert engram.running
        await assert_still_answers(engram, bot_api, 1)
    assert_log_clean(engram)


async def trickle(port: int, start: bytes, *, gap: float, limit: float) -> float | None:
    """Send ``start``, then one byte every ``gap`` seconds; the seconds until the server closed
    the connection (None: still open after ``limit``)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    began = trio.current_time()
    closed_after: float | None = None

    async def drip() -> None:
        try:
            await stream.send_all(start)
            while True:
                await trio.sleep(gap)
                await stream.send_all(b"a")
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    try:
        with trio.move_on_after(limit):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(drip)
                try:
                    while await stream.receive_some(65536):
                        pass
                except trio.BrokenResourceError:
                    pass
                closed_after = trio.current_time() - began
                nursery.cancel_scope.cancel()
    finally:
        stream.socket.close()
    return closed_after


async def test_slow_peers_and_wrong_secret_floods_hold_no_slot(
    tmp_path: Path, database_url: str
) -> None:
    """Row 8: 40 slow connections against 16 slots, then 24 wrong-secret posters at once."""
    # (32 slow bodies, 8 per route, and 8 endless headers)
    slots, idle = 16, 4.0
    async with running(
        tmp_path, database_url, HTTP_MAX_CONNECTIONS=str(slots), HTTP_IDLE_TIMEOUT=str(idle)
    ) as (engram, bot_api):
        port = engram.port
        cut: dict[str, list[float | None]] = {}

        async def slow(kind: str, start: bytes, at: float) -> None:
            await trio.sleep(at)
            cut.setdefault(kind, []).append(await trickle(port, start, gap=0.5, limit=12))

        good_posts: list[tuple[int, float]] = []
        wrong: list[int] = []

        async def flood(until: float) -> None:
            data = head("POST", WEBHOOK, length=2, secret="wrong-secret") + b"{}"
            while trio.current_time() < until:
                wrong.extend(statuses(await exchange(port, data, end="fin", limit=5)))

        async with watching_health(port) as watch, trio.open_nursery() as nursery:
            for i in range(32):  # a new slow client every 0.05 s, each route in turn
                route = ROUTES[i % 4]
                body = head("POST", route, length=10**6, secret=SECRET)  # then 1 byte / 0.5 s
                nursery.start_soon(slow, f"body {route}", body, i * 0.05)
                if i % 4 == 0:  # and headers that never end
                    endless = b"GET /healthz HTTP/1.1\r\nHost: engram\r\nX-Slow: "
                    nursery.start_soon(slow, "headers", endless, i * 0.05)
            await trio.sleep(3)
            until = trio.current_time() + 4
            for _ in range(24):
                nursery.start_soon(flood, until)
            async with httpx.AsyncClient(timeout=10) as client:
                for n in range(10):
                    start = trio.current_time()
                    status = await post_update(client, port, update_body(100 + n, chat=CHAT))
                    good_posts.append((status, trio.current_time() - start))
                    await trio.sleep(0.3)
        assert watch.failures == [], watch.failures
        assert watch.probes > 30 and watch.slowest < HEALTH_LIMIT
        # a body nobody reads is cut with the answer; headers within the idle timeout
        for route in ("/healthz", "/readyz", "/no/such/path"):
            assert all(t is not None and t < 2.0 for t in cut[f"body {route}"]), cut
        assert all(t is not None and t < idle + 2.0 for t in cut["headers"]), cut
        # wrong secrets: answered at once (401, then 429 from the guard's count), never held
        assert set(wrong) == {401, 429} and len(wrong) > 100
        assert [s for s, _ in good_posts] == [200] * 10
        assert max(t for _, t in good_posts) < HEALTH_LIMIT, good_posts
        await assert_still_answers(engram, bot_api, 1)
    assert_log_clean(engram)


def fuzz_cases(rng: random.Random, count: int) -> list[tuple[bytes, str]]:
    """``count`` malformed requests (data, how the connection ends), against every route."""
    cases: list[tuple[bytes, str]] = []
    for i in range(count):
        path = ROUTES[i % len(ROUTES)]
        secret = rng.choice([None, SECRET, "wrong", "x" * 300])
        method = rng.choice(["GET", "POST", "PUT", "OPTIONS", "HEAD", "DELETE", "BREW"])
        good = head("POST", path, length=10, secret=secret) + b'{"a": 1}\r\n'
        shape = i // len(ROUTES) % 12
        if shape == 0:  # partial body then FIN
            data = head(method, path, length=rng.choice([5, 10**5, 10**9]), secret=secret)
            cases.append((data + b"{" * rng.randint(0, 4), "fin"))
        elif shape == 1:  # reset in the middle of the headers
            cases.append((good[: rng.randint(1, good.index(b"\r\n\r\n"))], "reset"))
        elif shape == 2:  # reset in the middle of the body
            cases.append((head("POST", path, length=1000, secret=secret) + b"{" * 10, "reset"))
        elif shape == 3:  # pipelined: a request, then garbage
            junk = bytes(rng.randrange(256) for _ in range(rng.randint(1, 300)))
            cases.append((good + junk, rng.choice(["fin", "hold", "reset"])))
        elif shape == 4:  # absurd or contradictory lengths
            length = rng.choice(["-1", "1e9", "abc", "99999999999999999999999999", "0x10", ""])
            extra = rng.choice([(), ("Content-Length: 3",), ("Transfer-Encoding: chunked",)])
            cases.append(
                (
                    head(method, path, length=length, secret=secret, extra=extra) + b"{}",
                    rng.choice(["fin", "hold"]),
                )
            )
        elif shape == 5:  # chunked bodies with lying chunk sizes
            chunks = rng.choice([b"ffffffffffffffffffff\r\n{}", b"zz\r\n", b"2\r\n{}\r\n-1\r\n"])
            extra = ("Transfer-Encoding: chunked",)
            cases.append((head("POST", path, secret=secret, extra=extra) + chunks, "fin"))
        elif shape == 6:  # random bytes
            cases.append((bytes(rng.randrange(256) for _ in range(rng.randint(1, 2000))), "fin"))
        elif shape == 7:  # oversized or too many headers
            many = tuple(f"X-{n}: v" for n in range(3000))
            extra = rng.choice([(f"X-Big: {'a' * 40_000}",), many])
            cases.append((head("GET", path, extra=extra), "fin"))
        elif shape == 8:  # other protocols: HTTP/2 preface, h2c and websocket upgrades
            cases.append(
                (
                    rng.choice(
                        [
                            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                            + bytes(rng.randrange(256) for _ in range(50)),
                            head(
                                "GET",
                                path,
                                extra=(
                                    "Connection: Upgrade, HTTP2-Settings",
                                    "Upgrade: h2c",
                                    "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA",
                                ),
                            ),
                            head(
                                "GET",
                                path,
                                extra=(
                                    "Connection: Upgrade",
                                    "Upgrade: websocket",
                                    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
                                    "Sec-WebSocket-Version: 13",
                                ),
                            ),
                        ]
                    ),
                    rng.choice(["fin", "hold"]),
                )
            )
        elif shape == 9:  # many pipelined requests, answers never read
            cases.append((head("GET", path) * 2000, "reset"))
        elif shape == 10:  # a version, a target or a method that are not HTTP/1.1
            line = rng.choice(
                [
                    f"GET {path} HTTP/3.0",
                    f"GET {path}",
                    "GET \x00 HTTP/1.1",
                    f"{'A' * 5000} {path} HTTP/1.1",
                    f"GET {'/' * 20_000} HTTP/1.1",
                ]
            )
            cases.append(((line + "\r\nHost: x\r\n\r\n").encode("utf-8"), "fin"))
        else:  # 100-continue, then nothing
            extra = ("Expect: 100-continue",)
            cases.append((head("POST", path, length=50, secret=secret, extra=extra), "fin"))
    return cases


async def test_raw_socket_fuzz_against_every_route_stops_nothing(
    tmp_path: Path, database_url: str
) -> None:
    cases = fuzz_cases(random.Random(20), 240)
    answered: list[int] = []
    async with running(tmp_path, database_url, HTTP_IDLE_TIMEOUT="3") as (engram, bot_api):
        limiter = trio.CapacityLimiter(12)

        async def one(data: bytes, end: str) -> None:
            async with limiter:
                answered.extend(statuses(await exchange(engram.port, data, end=end, limit=2)))

        async with watching_health(engram.port) as watch:
            with trio.fail_after(120):
                async with trio.open_nursery() as nursery:
                    for data, end in cases:
                        nursery.start_soon(one, data, end)
        assert engram.running, engram.tail()
        assert watch.failures == [], watch.failures
        assert watch.probes > 10 and watch.slowest < HEALTH_LIMIT
        await assert_still_answers(engram, bot_api, 1)
    assert answered and 500 not in answered, sorted(set(answered))
    assert_log_clean(engram)
