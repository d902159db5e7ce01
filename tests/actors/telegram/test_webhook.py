"""The webhook over real HTTP: hypercorn on 127.0.0.1:0, httpx and raw sockets as clients.

The app is built as ``engram serve`` builds it: the bare ASGI webhook in front of the quart-trio
app (``PathDispatcher``), storing through a running ``InboxWriter`` (group commit)."""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import attrs
import httpx
import hypercorn.trio
import pytest
import structlog
import trio
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from actors.queues import inbox
from actors.queues.dedupe import DedupeCache
from actors.queues.inbox_writer import InboxWriter
from actors.telegram.types import Update
from actors.telegram.webhook import SECRET_HEADER, WEBHOOK_PATH, AuthFailureGuard, webhook_handler
from runtime import db as dbmod
from runtime.asgi import PathDispatcher
from runtime.errors import DatabaseUnavailable
from runtime.http import create_app, hypercorn_config
from runtime.migrate import apply_migrations

SECRET = "test-secret_0123456789abcdef"
CHAT = 4242
MiB = 1024 * 1024


def update(update_id: int, chat_id: int = CHAT, text: str = "hello") -> dict[str, Any]:
    return {
        "update_id": update_id,
        "message": {
            "message_id": update_id + 1000,
            "date": 1_700_000_000,
            "chat": {"id": chat_id, "type": "private"},
            "from": {"id": chat_id, "is_bot": False, "first_name": "A"},
            "text": text,
        },
    }


@attrs.define
class Harness:
    url: str
    port: int
    notified: list[int]
    dedupe: DedupeCache
    inbox_ids: list[int]

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=10)


def _build_app(
    db: Any, notified: list[int], dedupe: DedupeCache, inbox_ids: list[int], **kwargs: Any
) -> Any:
    def record(inbox_id: int, upd: Update) -> None:
        inbox_ids.append(inbox_id)
        notified.append(upd.chat_id or 0)

    kwargs.setdefault("notify", record)
    handler = webhook_handler(
        secret_token=SECRET,
        allowed_chat_ids=frozenset({CHAT}),
        db=db,
        dedupe=dedupe,
        **kwargs,
    )
    return PathDispatcher(create_app(), {WEBHOOK_PATH: handler})


@asynccontextmanager
async def serve(db: Any, **kwargs: Any) -> AsyncIterator[Harness]:
    notified: list[int] = []
    inbox_ids: list[int] = []
    dedupe = kwargs.pop("dedupe", None) or DedupeCache()
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        writer: InboxWriter = await nursery.start(InboxWriter(db).run)
        kwargs.setdefault("insert", writer.insert_update)
        app = _build_app(db, notified, dedupe, inbox_ids, **kwargs)
        binds = await nursery.start(
            partial(
                hypercorn.trio.serve,
                app,
                hypercorn_config("127.0.0.1", 0),
                shutdown_trigger=stop.wait,
            )
        )
        url = binds[0]
        try:
            yield Harness(url, int(url.rsplit(":", 1)[1]), notified, dedupe, inbox_ids)
        finally:
            stop.set()
            await writer.aclose()


async def post(h: Harness, body: Any, secret: str | None = SECRET, **kw: Any) -> httpx.Response:
    headers = {"Content-Type": "application/json"}
    if secret is not None:
        headers[SECRET_HEADER] = secret
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with h.client() as client:
        return await client.post(WEBHOOK_PATH, content=content, headers=headers, **kw)


async def inbox_count(db: dbmod.Database) -> int:
    count: int = await db.fetchval("SELECT count(*) FROM inbox")
    return count


# --- raw socket client for the slow and huge cases ----------------------------------------------


def head(content_length: int | None, secret: str | None = SECRET, chunked: bool = False) -> bytes:
    lines = [f"POST {WEBHOOK_PATH} HTTP/1.1", "Host: test", "Content-Type: application/json"]
    if secret is not None:
        lines.append(f"{SECRET_HEADER}: {secret}")
    if content_length is not None:
        lines.append(f"Content-Length: {content_length}")
    if chunked:
        lines.append("Transfer-Encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def _read_response(stream: trio.SocketStream) -> tuple[int, bytes]:
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = await stream.receive_some(65536)
        if not data:
            raise AssertionError(f"connection closed before a response: {buf!r}")
        buf += data
    header_blob, _, body = buf.partition(b"\r\n\r\n")
    lines = header_blob.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    while len(body) < length:
        data = await stream.receive_some(65536)
        if not data:
            break
        body += data
    return status, body


async def exchange(
    port: int, parts: Sequence[bytes], *, gap: float = 0.0, deadline: float = 10.0
) -> tuple[int, bytes, float]:
    """Send ``parts`` (``gap`` seconds apart) while reading; (status, body, seconds taken)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    start = trio.current_time()
    async with stream:

        async def sender() -> None:
            try:
                for i, part in enumerate(parts):
                    if i and gap:
                        await trio.sleep(gap)
                    await stream.send_all(part)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass

        with trio.fail_after(deadline):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sender)
                status, body = await _read_response(stream)
                nursery.cancel_scope.cancel()
    return status, body, trio.current_time() - start


def chunked(payload: bytes, size: int = 65536) -> list[bytes]:
    parts = [
        b"%x\r\n%s\r\n" % (len(payload[i : i + size]), payload[i : i + size])
        for i in range(0, len(payload), size)
    ]
    return [*parts, b"0\r\n\r\n"]


# --- authentication ------------------------------------------------------------------------------


async def test_wrong_or_missing_secret_is_401_before_the_body_is_read(
    db: dbmod.Database,
) -> None:
    async with serve(db, auth_guard=AuthFailureGuard(threshold=1000)) as h:
        for secret in ("wrong", None, SECRET + "x", SECRET[:-1]):
            # the body is announced but never sent: only a handler that does not wait for it
            # can answer; a correct secret would wait for the body (see the 408 test)
            for length in (10**12, 500):
                status, _, took = await exchange(h.port, [head(length, secret=secret)])
                assert status == 401
                assert took < 2.0
        resp = await post(h, update(1), secret="wrong")
        assert resp.status_code == 401
        assert resp.json() == {"ok": False, "error": "unauthorized"}
        assert await inbox_count(db) == 0
        assert h.notified == []


async def test_non_latin_secret_header_is_just_wrong(db: dbmod.Database) -> None:
    async with serve(db) as h:
        raw = head(2, secret=None)[:-2] + SECRET_HEADER.encode() + b": \xff\xfe\r\n\r\n{}"
        status, _, _ = await exchange(h.port, [raw])
        assert status == 401


async def test_repeated_failures_are_answered_at_once_with_429_but_correct_requests_pass(
    db: dbmod.Database,
) -> None:
    guard = AuthFailureGuard(threshold=5, base_delay=0.5, max_delay=2.0)
    async with serve(db, auth_guard=guard) as h:

        async def timed(secret: str, update_id: int) -> tuple[httpx.Response, float]:
            start = trio.current_time()
            resp = await post(h, update(update_id), secret=secret)
            return resp, trio.current_time() - start

        for _ in range(5):
            resp, took = await timed("guess", 1)
            assert (resp.status_code, took < 0.4) == (401, True)
        # past the threshold: 429 and a growing Retry-After, but never a held connection
        for retry_after in ("1", "1", "2", "2"):
            resp, took = await timed("guess", 1)
            assert (resp.status_code, took < 0.4) == (429, True)
            assert resp.headers["retry-after"] == retry_after
            assert resp.json() == {"ok": False, "error": "too many failed attempts"}
        # the right secret from the same address is never refused nor delayed
        resp, took = await timed(SECRET, 2)
        assert (resp.status_code, took < 0.4) == (200, True)
        # and it does not lift the penalty (behind a proxy everyone shares one address)
        resp, took = await timed("guess", 1)
        assert (resp.status_code, took < 0.4) == (429, True)
        assert await inbox_count(db) == 1


def test_auth_guard_delays_grow_cap_and_expire() -> None:
    guard = AuthFailureGuard(threshold=5, window=60, base_delay=0.25, max_delay=3.0)
    delays = [guard.record_failure("1.2.3.4", float(i)) for i in range(12)]
    assert delays == [0, 0, 0, 0, 0, 0.25, 0.5, 1.0, 2.0, 3.0, 3.0, 3.0]
    assert guard.record_failure("5.6.7.8", 12.0) == 0
    assert guard.failures("1.2.3.4", 12.0) == 12
    # after a quiet window the count starts over
    assert guard.record_failure("1.2.3.4", 200.0) == 0
    small = AuthFailureGuard(max_tracked=3)
    for i in range(10):
        small.record_failure(f"10.0.0.{i}", 0.0)
    assert len(small._failures) == 3


async def test_secret_never_reaches_the_logs(db: dbmod.Database) -> None:
    near_miss = SECRET[:-1] + "Z"
    with structlog.testing.capture_logs() as logs:
        async with serve(db) as h:
            await post(h, update(1), secret=near_miss)
            await post(h, b"{bad json", secret=SECRET)
            await post(h, update(2))
    assert any(e["event"] == "webhook.unauthorized" for e in logs)
    assert any(e["event"] == "ingest.accepted" for e in logs)
    dump = repr(logs)
    assert SECRET not in dump
    assert near_miss not in dump


def test_empty_secret_is_refused() -> None:
    with pytest.raises(ValueError):
        webhook_handler(
            secret_token="",
            allowed_chat_ids=frozenset(),
            db=None,  # type: ignore[arg-type]
            notify=lambda *_: None,
            dedupe=DedupeCache(),
        )


# --- transport limits ------------------------------------------------------------------------


async def test_body_over_one_mib_is_413(db: dbmod.Database) -> None:
    async with serve(db) as h:
        # announced: answered without reading
        status, _, took = await exchange(h.port, [head(MiB + 1)])
        assert (status, took < 2.0) == (413, True)
        # chunked: reading stops once the limit is passed; the end of the body is never sent,
        # so only a server that stops reading at MiB + 1 bytes can answer
        parts = chunked(b"x" * (MiB + 1))[:-1]
        status, body, took = await exchange(h.port, [head(None, chunked=True), *parts])
        assert (status, took < 5.0) == (413, True)
        assert json.loads(body) == {"ok": False, "error": "payload too large"}
        assert await inbox_count(db) == 0


async def test_own_limit_applies_to_chunked_bodies_below_quarts(db: dbmod.Database) -> None:
    # the app's MAX_CONTENT_LENGTH stays 1 MiB: only the webhook's own count can refuse this
    async with serve(db, max_body_bytes=2000) as h:
        body = json.dumps(update(7, text="a" * 1000)).encode()
        body += b" " * (2001 - len(body))
        status, _, _ = await exchange(h.port, [head(None, chunked=True), *chunked(body, 100)])
        assert status == 413
        status, _, _ = await exchange(h.port, [head(None, chunked=True), *chunked(body[:-1], 100)])
        assert status == 200
        assert await inbox_count(db) == 1


async def test_body_of_exactly_one_mib_is_accepted(db: dbmod.Database) -> None:
    async with serve(db) as h:
        upd = update(5)
        base = len(json.dumps(upd).encode())
        upd["padding"] = ""
        filler = MiB - len(json.dumps(upd).encode())
        upd["padding"] = "p" * filler
        body = json.dumps(upd).encode()
        assert len(body) == MiB and base < MiB
        status, _, _ = await exchange(h.port, [head(None, chunked=True), *chunked(body)])
        assert status == 200
        assert await inbox_count(db) == 1


async def test_transfer_encoding_beats_a_content_length(db: dbmod.Database) -> None:
    # both headers: the chunked framing counts (a short Content-Length must not cut the body)
    async with serve(db) as h:
        body = json.dumps(update(8)).encode()
        status, _, _ = await exchange(h.port, [head(10, chunked=True), *chunked(body, 10)])
        assert status == 200
        assert await inbox_count(db) == 1


@pytest.mark.slow
async def test_slow_body_is_408(db: dbmod.Database) -> None:
    async with serve(db, body_timeout=0.5) as h:
        status, body, took = await exchange(h.port, [head(100), b'{"update_id": 1'])
        assert status == 408
        assert json.loads(body)["error"] == "request body timeout"
        assert 0.4 <= took < 3.0
        # a dribbling client hits the total deadline, not an idle timeout
        dribble = [head(40), *[b" "] * 39]
        status, _, took = await exchange(h.port, dribble, gap=0.05)
        assert status == 408
        assert took < 3.0
        assert await inbox_count(db) == 0


# --- content -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b"{bad json",
        b"",
        b"\xff\xfe\x00",
        b"NaN",
        b'{"update_id": 1e999}',
        b"[" * 5000,
        # a key twice: which one counts is up to the parser, so it is refused
        b'{"update_id": 1, "update_id": 2, "message": {}}',
        json.dumps(update(1)).replace('"text"', '"text": "a", "text"').encode(),
        # invalid UTF-8 (a lone continuation byte, an overlong form) and UTF-16 JSON
        json.dumps(update(1))
        .replace("hello", "he\\u00ffllo")
        .encode()
        .replace(b"\\u00ff", b"\x80"),
        json.dumps(update(1)).encode().replace(b"hello", b"he\xc0\xafllo"),
        json.dumps(update(1)).encode("utf-16"),
    ],
)
async def test_malformed_json_is_400(db: dbmod.Database, body: bytes) -> None:
    async with serve(db) as h:
        resp = await post(h, body)
        assert resp.status_code == 400
        assert resp.json() == {"ok": False, "error": "malformed JSON"}
        assert await inbox_count(db) == 0


@pytest.mark.parametrize(("field", "limit"), [("text", 4096), ("caption", 1024)])
async def test_a_text_longer_than_telegram_allows_is_400(
    db: dbmod.Database, field: str, limit: int
) -> None:
    def with_field(update_id: int, value: str) -> dict[str, Any]:
        body = update(update_id)
        del body["message"]["text"]
        body["message"][field] = value
        return body

    async with serve(db) as h:
        at_limit = await post(h, with_field(1, "x" * limit))
        over = await post(h, with_field(2, "x" * (limit + 1)))
        # Telegram counts UTF-16 units: an emoji is two, so half the limit in emoji is the limit
        emoji_over = await post(h, with_field(3, "😀" * (limit // 2) + "x"))
        edited = update(4)
        edited["edited_message"] = edited.pop("message")
        edited["edited_message"]["text"] = "x" * (limit + 1)
        edited_over = await post(h, edited)
        assert at_limit.status_code == 200
        assert over.status_code == 400
        assert over.json() == {"ok": False, "error": "text longer than Telegram allows"}
        assert emoji_over.status_code == 400
        assert edited_over.status_code == (400 if field == "text" else 200)
        assert await inbox_count(db) == (1 if field == "text" else 2)


@pytest.mark.parametrize(
    "obj",
    [
        [],
        "update",
        {"foo": 1},
        {"update_id": "1"},
        {"update_id": True},
        {"update_id": 1, "message": {"chat": {"id": CHAT}}},
        {"update_id": 1, "message": {"message_id": 1, "date": 1, "chat": "x"}},
        {"update_id": 1, "message": update(1)["message"], "callback_query": {"id": "a"}},
        {**update(2**63), "update_id": 2**63},
    ],
)
async def test_non_update_json_is_400(db: dbmod.Database, obj: Any) -> None:
    async with serve(db) as h:
        resp = await post(h, obj)
        assert resp.status_code == 400
        assert await inbox_count(db) == 0
        assert h.notified == []


async def test_disallowed_chats_and_unknown_kinds_are_acked_and_dropped(
    db: dbmod.Database,
) -> None:
    async with serve(db) as h:
        assert (await post(h, update(1, chat_id=999))).status_code == 200
        inline_cb = {"update_id": 2, "callback_query": {"id": "c", "from": {"id": 1}, "data": "d"}}
        assert (await post(h, inline_cb)).status_code == 200
        channel = {"update_id": 3, "channel_post": {"message_id": 1, "chat": {"id": CHAT}}}
        assert (await post(h, channel)).status_code == 200
        assert (await post(h, {"update_id": 4})).status_code == 200
        assert await inbox_count(db) == 0
        assert h.notified == []


async def test_accepted_update_is_in_the_inbox_when_the_200_arrives(
    db: dbmod.Database,
) -> None:
    async with serve(db) as h:
        body = update(10, text="remember this \x00 please")
        resp = await post(h, body)
        assert resp.status_code == 200
        assert resp.json() == {"ok": True}
        row = await inbox.get_by_key(db, CHAT, "update:10")
        assert row is not None
        assert (row.status, row.chat_id, row.update_id, row.kind) == (
            "pending",
            CHAT,
            10,
            "message",
        )
        assert row.payload["message"]["text"] == "remember this \ufffd please"
        assert h.notified == [CHAT]
        assert h.inbox_ids == [row.id]
        cb = {
            "update_id": 11,
            "callback_query": {
                "id": "cbq-1",
                "from": {"id": CHAT},
                "message": {"message_id": 5, "date": 0, "chat": {"id": CHAT, "type": "private"}},
                "data": "yes",
            },
        }
        assert (await post(h, cb)).status_code == 200
        row = await inbox.get_by_key(db, CHAT, "update:11")
        assert row is not None and row.kind == "callback_query"
        assert h.notified == [CHAT, CHAT]


async def test_duplicates_are_acked_once_stored_once_notified_once(db: dbmod.Database) -> None:
    async with serve(db) as h:
        for _ in range(3):
            assert (await post(h, update(20))).status_code == 200
        # the same message under a new update id (e.g. a retry through another path)
        assert (await post(h, {**update(20), "update_id": 21})).status_code == 200
        assert await inbox_count(db) == 1
        assert h.notified == [CHAT]
    # after a restart the cache is empty: the inbox's unique key is the safety net
    async with serve(db) as h2:
        assert (await post(h2, update(20))).status_code == 200
        assert await inbox_count(db) == 1
        assert h2.notified == []


@pytest.mark.slow
async def test_concurrent_updates_are_all_stored_before_their_acks(db: dbmod.Database) -> None:
    async with serve(db) as h:
        statuses: dict[int, int] = {}
        stored_at_ack: dict[int, bool] = {}

        async def one(update_id: int) -> None:
            statuses[update_id] = (await post(h, update(update_id))).status_code
            stored_at_ack[update_id] = (
                await inbox.get_by_key(db, CHAT, f"update:{update_id}")
            ) is not None

        async with trio.open_nursery() as nursery:
            for i in range(100, 140):
                nursery.start_soon(one, i)
        assert set(statuses.values()) == {200}
        assert all(stored_at_ack.values())
        assert await inbox_count(db) == 40
        assert sorted(h.inbox_ids) == sorted(
            r["id"] for r in await db.fetch("SELECT id FROM inbox")
        )


async def test_other_methods_and_paths(db: dbmod.Database) -> None:
    async with serve(db) as h, h.client() as client:
        resp = await client.get(WEBHOOK_PATH, headers={SECRET_HEADER: SECRET})
        assert resp.status_code == 405
        assert resp.headers["allow"] == "POST"
        # everything else is still the quart app's
        assert (await client.get("/healthz")).status_code == 200
        assert (await client.post("/api/telegram/x", content=b"{}")).status_code == 404
    assert await inbox_count(db) == 0


async def test_client_gone_mid_body_stores_nothing_and_the_server_goes_on(
    db: dbmod.Database,
) -> None:
    async with serve(db) as h:
        stream = await trio.open_tcp_stream("127.0.0.1", h.port)
        await stream.send_all(head(500) + b'{"update_id": 1')
        await trio.sleep(0.1)
        await stream.aclose()
        await trio.sleep(0.1)
        assert (await post(h, update(2))).status_code == 200
        assert await inbox_count(db) == 1


async def test_notify_failure_still_acks_a_stored_update(db: dbmod.Database) -> None:
    def broken(row_id: int, upd: Update) -> None:
        raise RuntimeError("router down")

    async with serve(db, notify=broken) as h:
        assert (await post(h, update(30))).status_code == 200
        assert await inbox.open_chats(db) == [CHAT]


@attrs.define
class FlakyDb:
    """A real database that refuses every query while ``down`` is set."""

    real: dbmod.Database
    down: bool = True

    def _check(self) -> None:
        if self.down:
            raise DatabaseUnavailable("connection lost: injected")

    async def execute(self, query: str, *args: Any) -> str:
        self._check()
        return await self.real.execute(query, *args)

    async def fetch(self, query: str, *args: Any) -> list[Any]:
        self._check()
        return await self.real.fetch(query, *args)

    async def fetchrow(self, query: str, *args: Any) -> Any:
        self._check()
        return await self.real.fetchrow(query, *args)

    async def fetchval(self, query: str, *args: Any) -> Any:
        self._check()
        return await self.real.fetchval(query, *args)


async def test_database_failure_is_503_and_the_retry_gets_through(db: dbmod.Database) -> None:
    flaky = FlakyDb(db)
    async with serve(flaky) as h:
        resp = await post(h, update(40))
        assert resp.status_code == 503
        assert h.notified == []
        assert await inbox_count(db) == 0
        flaky.down = False
        # Telegram's retry must not be taken for a duplicate of the failed attempt
        assert (await post(h, update(40))).status_code == 200
        assert await inbox_count(db) == 1
        assert h.notified == [CHAT]


async def test_real_database_error_is_503(db: dbmod.Database) -> None:
    await db.execute("ALTER TABLE inbox RENAME TO inbox_gone")
    async with serve(db) as h:
        assert (await post(h, update(41))).status_code == 503
        # bad input is still a 4xx while storage is broken
        assert (await post(h, b"nope")).status_code == 400
    await db.execute("ALTER TABLE inbox_gone RENAME TO inbox")


# --- hostile input property test -------------------------------------------------------------


class ThreadedServer:
    """The webhook on its own trio thread (own database pool), reused across examples."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self.url = ""
        self._ready: queue.Queue[str | BaseException] = queue.Queue()
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:
            self.error = exc
            self._ready.put(exc)

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with dbmod.asyncio_loop(), dbmod.open_database(self.database_url) as db:
            await apply_migrations(db)
            async with trio.open_nursery() as nursery:
                writer: InboxWriter = await nursery.start(InboxWriter(db).run)
                app = _build_app(
                    db, [], DedupeCache(), [], notify=lambda *_: None, insert=writer.insert_update
                )
                config = hypercorn_config("127.0.0.1", 0)
                serve_fn = partial(
                    hypercorn.trio.serve, app, config, shutdown_trigger=self._stop.wait
                )
                binds = await nursery.start(serve_fn)
                self._ready.put(binds[0])
                await self._stop.wait()
                await writer.aclose()

    def __enter__(self) -> ThreadedServer:
        self._thread.start()
        got = self._ready.get(timeout=60)
        if isinstance(got, BaseException):
            raise got
        self.url = got
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None and self._stop is not None:
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join(timeout=30)
        assert not self._thread.is_alive()
        if self.error is not None:
            raise self.error


@pytest.fixture
def threaded_server(database_url: str) -> Iterator[ThreadedServer]:
    with ThreadedServer(database_url) as server:
        yield server


json_leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats()
    | st.text()
)
json_values = st.recursive(
    json_leaves,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=25,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, child in value.items():
            out += _paths(child, (*prefix, key))
    return out


def _mutate(base: dict[str, Any], path: tuple[Any, ...], new: Any, delete: bool) -> Any:
    doc = json.loads(json.dumps(base))
    target = doc
    for key in path[:-1]:
        target = target[key]
    if delete:
        del target[path[-1]]
    else:
        target[path[-1]] = new
    return doc


@st.composite
def mutated_updates(draw: st.DrawFn) -> Any:
    chat = draw(st.sampled_from([CHAT, CHAT, 1, -100123]))
    base = update(draw(st.integers(0, 2**40)), chat_id=chat, text=draw(st.text(max_size=50)))
    if draw(st.booleans()):
        base = {
            "update_id": base["update_id"],
            "callback_query": {
                "id": draw(st.text(max_size=8)),
                "from": {"id": 1},
                "message": {"message_id": 1, "date": 0, "chat": {"id": chat, "type": "private"}},
            },
        }
    path = draw(st.sampled_from(_paths(base)))
    return _mutate(base, path, draw(json_values), draw(st.booleans()))


hostile_bodies = st.one_of(
    json_values.map(lambda v: json.dumps(v).encode()),
    mutated_updates().map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=300),
    st.sampled_from(
        [b"[" * 3000, b'{"a":' * 3000, b'{"update_id": 1, "message": ' + b"[" * 990, b"1e999"]
    ),
)
_alive_ids = iter(range(10**12, 10**13))


@pytest.mark.slow
@settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=hostile_bodies)
def test_hostile_json_never_causes_a_5xx(threaded_server: ThreadedServer, body: bytes) -> None:
    headers = {SECRET_HEADER: SECRET, "Content-Type": "application/json"}
    with httpx.Client(base_url=threaded_server.url, timeout=10) as client:
        resp = client.post(WEBHOOK_PATH, content=body, headers=headers)
        assert resp.status_code in (200, 400), (resp.status_code, body[:200])
        event(f"status {resp.status_code}")
        # and the server still accepts real updates
        alive = client.post(WEBHOOK_PATH, json=update(next(_alive_ids)), headers=headers)
        assert alive.status_code == 200
