"""``POST /api/telegram``: the hardened, durable Telegram webhook (a bare ASGI handler).

It is served in front of the quart-trio app (``runtime.asgi.PathDispatcher``): the framework's
request and response machinery would cost more CPU than everything below together.

Order of checks, each before any work the next one needs:

1. secret header, compared in constant time, before the body is touched -> 401 at once.
   Failures are counted per remote address (``AuthFailureGuard``): past its threshold the
   answer is 429 with a ``Retry-After`` that grows with the count, still at once (holding the
   connection would let a flood of wrong secrets fill the server's connection slots and delay
   Telegram's own posts). Correct requests are never delayed. Methods other than POST -> 405.
2. ``Content-Length`` above the limit -> 413 without reading the body.
3. the body, read from ASGI ``receive()`` with our own byte count and deadline: more than the
   limit -> 413 as soon as the excess arrives (chunked bodies too; the rest is never read);
   not complete within ``body_timeout`` -> 408.
4. a body that is not strict JSON in UTF-8 (invalid UTF-8, a key twice in one object, NaN)
   or not a Telegram update -> 400 (bad input is never a 5xx); a message text longer than
   Telegram's own limit (4096 UTF-16 units) or a caption over 1024 -> 400, so it never
   reaches the model (Telegram itself cannot send one).
5. the rest is ``actors.telegram.ingest.ingest``, shared with the long-polling loop: unknown update
   kinds -> 200, *not stored* (engram subscribes only to the kinds it handles, they carry no
   chat to check against the allowlist, nothing would process the row); chats outside the
   allowlist -> 200 once kept for a later pairing (``strangers``: ``held_updates``, durable
   before the 200 like an inbox row); a hit in the in-memory ``DedupeCache`` -> 200 without a
   database round trip; otherwise INSERT into the inbox *before* the 200 (through the
   group-committing ``actors.queues.inbox_writer.InboxWriter`` in production; a duplicate update
   key -> 200 and nothing else), then ``notify(inbox_id, update)`` (synchronous, must not
   block). Keys enter the cache only once the update is stored, so a retry after a 503 is
   never mistaken for a duplicate. A database error -> 503, so Telegram retries later; a
   payload the inbox cannot store (ids outside BIGINT, nesting too deep) -> 400.

The secret value is never logged; log lines carry event names, the remote address, update ids.
"""

from __future__ import annotations

import hmac
import json
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Container
from typing import Any

import attrs
import structlog
import trio

from actors.queues.dedupe import DedupeCache
from actors.telegram.chunking import utf16_len
from actors.telegram.errors import MalformedUpdate
from actors.telegram.ingest import InsertUpdate, Notify, Strangers, ingest
from actors.telegram.types import Update, parse_update
from runtime import metrics
from runtime.asgi import Receive, Scope, Send, remote_address, send_response
from runtime.backoff import backoff_delay
from runtime.db import Queries
from runtime.errors import DatabaseError
from runtime.logs import log_this_one

log = structlog.get_logger(__name__)

WEBHOOK_PATH = "/api/telegram"
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
MAX_BODY_BYTES = 1024 * 1024
BODY_TIMEOUT = 30.0
#: Telegram's own limits on what a person can send (UTF-16 code units, as Telegram counts)
MAX_TEXT_UTF16 = 4096
MAX_CAPTION_UTF16 = 1024


@attrs.define
class AuthFailureGuard:
    """Counts failed secret checks per remote address and says how long the client should wait
    before trying again (the 429's ``Retry-After``).

    Up to ``threshold`` failures within ``window`` seconds cost nothing; each further one asks
    for ``base_delay`` doubling up to ``max_delay``. At most ``max_tracked`` addresses are
    remembered (least recently failing dropped first). A success does not clear the count:
    behind a reverse proxy every client shares one address, and Telegram's own successful
    calls must not reset an attacker's penalty.
    """

    threshold: int = 5
    window: float = 60.0
    base_delay: float = 0.25
    max_delay: float = 3.0
    max_tracked: int = 10_000
    _failures: OrderedDict[str, deque[float]] = attrs.field(factory=OrderedDict, init=False)

    def record_failure(self, remote: str, now: float) -> float:
        """Note a failure from ``remote`` at ``now``; returns the wait (seconds) to ask for,
        0 while under the threshold."""
        times = self._failures.pop(remote, None) or deque(maxlen=self.threshold + 32)
        while times and times[0] <= now - self.window:
            times.popleft()
        times.append(now)
        self._failures[remote] = times
        while len(self._failures) > self.max_tracked:
            self._failures.popitem(last=False)
        excess = len(times) - self.threshold
        if excess <= 0:
            return 0.0
        return backoff_delay(excess - 1, base=self.base_delay, cap=self.max_delay)

    def failures(self, remote: str, now: float) -> int:
        """Failures from ``remote`` within the window (for logs and tests)."""
        times = self._failures.get(remote)
        return 0 if times is None else sum(1 for t in times if t > now - self.window)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("number out of range")
    return value


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise ValueError("a key appears twice in one object")
    return obj


def decode_json(body: bytes) -> Any:
    """Strict JSON in UTF-8: no invalid UTF-8, no key twice in one object, no NaN/Infinity, no
    overflowing floats; ValueError on anything wrong."""
    try:
        text = body.decode("utf-8")  # strict; json.loads(bytes) would also guess UTF-16/32
        return json.loads(
            text,
            parse_float=_finite_float,
            parse_constant=_reject_constant,
            object_pairs_hook=_unique_keys,
        )
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def oversized_text(update: Update) -> str | None:
    """What of ``update`` is longer than Telegram allows a person to send, or None."""
    msg = update.message or update.edited_message
    if msg is None:
        return None
    if msg.text is not None and utf16_len(msg.text) > MAX_TEXT_UTF16:
        return f"text of {utf16_len(msg.text)} UTF-16 units (Telegram's limit: {MAX_TEXT_UTF16})"
    if msg.caption is not None and utf16_len(msg.caption) > MAX_CAPTION_UTF16:
        return (
            f"caption of {utf16_len(msg.caption)} UTF-16 units "
            f"(Telegram's limit: {MAX_CAPTION_UTF16})"
        )
    return None


def _body(error: str | None) -> bytes:
    obj: dict[str, Any] = {"ok": error is None}
    if error is not None:
        obj["error"] = error
    return json.dumps(obj).encode()


OK = _body(None)
UNAUTHORIZED = _body("unauthorized")
TOO_MANY_FAILURES = _body("too many failed attempts")
TOO_LARGE = _body("payload too large")
BODY_TIMEOUT_BODY = _body("request body timeout")
BAD_JSON = _body("malformed JSON")
NOT_AN_UPDATE = _body("not a Telegram update")
TOO_LONG = _body("text longer than Telegram allows")
UNSTORABLE = _body("unstorable update")
UNAVAILABLE = _body("storage unavailable")
NOT_ALLOWED = _body("method not allowed")
INTERNAL = _body("internal error")
_SECRET_KEY = SECRET_HEADER.lower().encode("ascii")


class _Disconnected(Exception):
    """The client went away before the body was complete (nothing to answer)."""


@attrs.define(eq=False)
class TelegramWebhook:
    """The ASGI handler of ``POST /api/telegram`` (see the module docstring)."""

    secret: bytes
    allowed_chat_ids: Container[int]
    db: Queries
    notify: Notify
    dedupe: DedupeCache
    insert: InsertUpdate | None = None
    clock: Callable[[], float] = trio.current_time
    body_timeout: float = BODY_TIMEOUT
    max_body_bytes: int = MAX_BODY_BYTES
    guard: AuthFailureGuard = attrs.field(factory=AuthFailureGuard)
    strangers: Strangers | None = None
    _refused: int = attrs.field(default=0, init=False)  # 429s answered, for the log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            await send_response(send, 405, NOT_ALLOWED, headers=[(b"allow", b"POST")])
            return
        headers: list[tuple[bytes, bytes]] = []
        started = time.perf_counter()
        try:
            status, body = await self._handle(scope, receive, headers)
        except _Disconnected:
            return
        except Exception as exc:  # a bug: answer like a framework would, and say so in the log
            log.error("webhook.internal_error", exc_info=exc)
            status, body = 500, INTERNAL
        await send_response(send, status, body, headers=headers)
        metrics.webhook_answered(status, time.perf_counter() - started)

    async def _handle(
        self, scope: Scope, receive: Receive, headers: list[tuple[bytes, bytes]]
    ) -> tuple[int, bytes]:
        """The status and body to answer with; extra response headers go into ``headers``."""
        given = b""
        has_secret = False
        length: bytes | None = None
        chunked = False
        for name, value in scope["headers"]:
            if name == _SECRET_KEY and not has_secret:
                given, has_secret = bytes(value), True
            elif name == b"content-length":
                length = bytes(value)
            elif name == b"transfer-encoding":
                chunked = True  # it beats Content-Length (RFC 9112 6.3)
        if not hmac.compare_digest(given, self.secret):
            return self._unauthorized(remote_address(scope), has_secret, headers)

        expected = None
        if length is not None and length.isdigit() and not chunked:
            expected = int(length)
        if expected is not None and expected > self.max_body_bytes:
            log.warning(
                "webhook.body_too_large", content_length=expected, limit=self.max_body_bytes
            )
            return 413, TOO_LARGE
        body = await self._read_body(receive, expected)
        if isinstance(body, tuple):
            return body

        try:
            obj = decode_json(body)
        except ValueError as exc:
            log.warning(
                "webhook.bad_json",
                remote=remote_address(scope),
                size=len(body),
                reason=str(exc)[:200],
            )
            return 400, BAD_JSON
        try:
            update = parse_update(obj)
        except MalformedUpdate as exc:
            log.warning("webhook.malformed_update", update_id=exc.update_id, reason=exc.reason)
            return 400, NOT_AN_UPDATE
        if (too_long := oversized_text(update)) is not None:
            log.warning("webhook.text_too_long", update_id=update.update_id, reason=too_long)
            return 400, TOO_LONG

        try:
            await ingest(
                self.db,
                update,
                obj,
                allowed_chat_ids=self.allowed_chat_ids,
                dedupe=self.dedupe,
                notify=self.notify,
                clock=self.clock,
                source="webhook",
                insert=self.insert,
                strangers=self.strangers,
            )
        except ValueError as exc:
            log.warning("webhook.unstorable", update_id=update.update_id, reason=str(exc)[:200])
            return 400, UNSTORABLE
        except DatabaseError as exc:
            log.error(
                "webhook.db_error",
                update_id=update.update_id,
                error_type=type(exc).__name__,
                error=str(exc)[:300],
            )
            return 503, UNAVAILABLE
        # stored, duplicate, chat not allowed or unknown kind: all acknowledged
        return 200, OK

    def _unauthorized(
        self, remote: str, header_present: bool, headers: list[tuple[bytes, bytes]]
    ) -> tuple[int, bytes]:
        """401, or 429 once the guard counts too many failures: at once either way."""
        now = self.clock()
        retry_after = self.guard.record_failure(remote, now)
        if retry_after > 0:
            self._refused += 1
        if retry_after == 0 or log_this_one(self._refused):  # a flood is not a log flood
            log.warning(
                "webhook.unauthorized",
                remote=remote,
                header_present=header_present,
                failures=self.guard.failures(remote, now),
                retry_after=retry_after,
                refused=self._refused,
            )
        if retry_after > 0:
            headers.append((b"retry-after", str(math.ceil(retry_after)).encode("ascii")))
            return 429, TOO_MANY_FAILURES
        return 401, UNAUTHORIZED

    async def _read_body(self, receive: Receive, expected: int | None) -> bytes | tuple[int, bytes]:
        """The request body, or the 408/413 answer to give instead. With a Content-Length
        (the server enforces it) reading stops at that many bytes, without waiting for the
        empty end-of-body message."""
        chunks: list[bytes] = []
        size = 0
        limit = self.max_body_bytes
        with trio.move_on_after(self.body_timeout) as scope:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise _Disconnected
                chunk = message.get("body", b"")
                if chunk:
                    size += len(chunk)
                    if size > limit:
                        log.warning("webhook.body_too_large", received=size, limit=limit)
                        return 413, TOO_LARGE
                    chunks.append(chunk)
                if size == expected or not message.get("more_body", False):
                    break
        if scope.cancelled_caught:
            log.warning("webhook.body_timeout", received=size, timeout=self.body_timeout)
            return 408, BODY_TIMEOUT_BODY
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def webhook_handler(
    *,
    secret_token: str,
    allowed_chat_ids: Container[int],
    db: Queries,
    notify: Notify,
    dedupe: DedupeCache,
    insert: InsertUpdate | None = None,
    clock: Callable[[], float] = trio.current_time,
    body_timeout: float = BODY_TIMEOUT,
    max_body_bytes: int = MAX_BODY_BYTES,
    auth_guard: AuthFailureGuard | None = None,
    strangers: Strangers | None = None,
) -> TelegramWebhook:
    """The ASGI handler serving ``POST /api/telegram`` (mount it at ``WEBHOOK_PATH`` with
    :class:`runtime.asgi.PathDispatcher`). ``insert`` stores one update (the group-committing
    :meth:`actors.queues.inbox_writer.InboxWriter.insert_update` in production); without it each
    update is its own INSERT on ``db``."""
    if not secret_token:
        raise ValueError("the webhook needs a non-empty secret token")
    return TelegramWebhook(
        secret=secret_token.encode("utf-8"),
        allowed_chat_ids=allowed_chat_ids,
        db=db,
        notify=notify,
        dedupe=dedupe,
        insert=insert,
        clock=clock,
        body_timeout=body_timeout,
        max_body_bytes=max_body_bytes,
        guard=auth_guard if auth_guard is not None else AuthFailureGuard(),
        strangers=strangers,
    )
