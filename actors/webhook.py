"""``POST /api/telegram``: the hardened, durable Telegram webhook (a quart Blueprint).

Order of checks, each before any work the next one needs:

1. secret header, compared in constant time, before the body is touched -> 401. Repeated
   failures from one remote address are answered ever more slowly (``AuthFailureGuard``);
   correct requests are never delayed.
2. ``Content-Length`` above the limit -> 413 without reading the body.
3. the body, read incrementally with our own byte count and deadline: more than the limit
   -> 413 as soon as the excess arrives (chunked bodies too); not complete within
   ``body_timeout`` -> 408. (Quart buffers the body as it arrives and applies
   ``MAX_CONTENT_LENGTH`` only to what is buffered and ``BODY_TIMEOUT`` only to
   ``get_data``, so neither is relied on; its ``RequestEntityTooLarge`` is still honoured.)
4. JSON that is not a Telegram update -> 400 (bad input is never a 5xx).
5. the rest is ``actors.ingest.ingest``, shared with the long-polling loop: unknown update
   kinds -> 200, *not stored* (engram subscribes only to the kinds it handles, they carry no
   chat to check against the allowlist, nothing would process the row); chats outside the
   allowlist -> 200, dropped, logged; a hit in the in-memory ``DedupeCache`` -> 200 without a
   database round trip; otherwise INSERT into the inbox *before* the 200 (a duplicate update
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
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

import attrs
import structlog
import trio
from quart import Blueprint, Response, request
from werkzeug.exceptions import RequestEntityTooLarge

from actors.dedupe import DedupeCache
from actors.inbox import Queryable
from actors.ingest import Notify, ingest
from actors.telegram_errors import MalformedUpdate
from actors.telegram_types import parse_update
from runtime.errors import DatabaseError

log = structlog.get_logger(__name__)

WEBHOOK_PATH = "/api/telegram"
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
MAX_BODY_BYTES = 1024 * 1024
BODY_TIMEOUT = 30.0


@attrs.define
class AuthFailureGuard:
    """Counts failed secret checks per remote address and says how long to stall the 401.

    Up to ``threshold`` failures within ``window`` seconds cost nothing; each further one is
    delayed ``base_delay`` doubling up to ``max_delay``. At most ``max_tracked`` addresses are
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
        """Note a failure from ``remote`` at ``now``; returns the delay (seconds) to apply."""
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
        return min(self.max_delay, self.base_delay * 2.0 ** min(excess - 1, 32))

    def failures(self, remote: str, now: float) -> int:
        """Failures from ``remote`` within the window (for logs and tests)."""
        times = self._failures.get(remote)
        return 0 if times is None else sum(1 for t in times if t > now - self.window)


def _answer(status: int, error: str | None = None) -> Response:
    body: dict[str, Any] = {"ok": error is None}
    if error is not None:
        body["error"] = error
    return Response(json.dumps(body), status=status, content_type="application/json")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("number out of range")
    return value


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def decode_json(body: bytes) -> Any:
    """Strict JSON: no NaN/Infinity, no overflowing floats; ValueError on anything wrong."""
    try:
        return json.loads(body, parse_float=_finite_float, parse_constant=_reject_constant)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def _remote_address() -> str:
    client = request.scope.get("client")
    if client:
        return str(client[0])
    return "<unknown>"


async def _read_body(max_bytes: int, seconds: float) -> bytes | Response:
    """The request body, or the 408/413 response to send instead."""
    chunks: list[bytes] = []
    size = 0
    with trio.move_on_after(seconds) as scope:
        try:
            async for chunk in request.body:
                size += len(chunk)
                if size > max_bytes:
                    log.warning("webhook.body_too_large", received=size, limit=max_bytes)
                    return _answer(413, "payload too large")
                chunks.append(chunk)
        except RequestEntityTooLarge:
            log.warning("webhook.body_too_large", received=size, limit=max_bytes)
            return _answer(413, "payload too large")
    if scope.cancelled_caught:
        log.warning("webhook.body_timeout", received=size, timeout=seconds)
        return _answer(408, "request body timeout")
    return b"".join(chunks)


def webhook_blueprint(
    *,
    secret_token: str,
    allowed_chat_ids: frozenset[int],
    db: Queryable,
    notify: Notify,
    dedupe: DedupeCache,
    clock: Callable[[], float] = trio.current_time,
    body_timeout: float = BODY_TIMEOUT,
    max_body_bytes: int = MAX_BODY_BYTES,
    auth_guard: AuthFailureGuard | None = None,
    name: str = "telegram_webhook",
) -> Blueprint:
    """The Blueprint serving ``POST /api/telegram`` (see the module docstring)."""
    if not secret_token:
        raise ValueError("the webhook needs a non-empty secret token")
    expected = secret_token.encode("utf-8")
    guard = auth_guard if auth_guard is not None else AuthFailureGuard()
    bp = Blueprint(name, __name__)

    @bp.post(WEBHOOK_PATH)
    async def telegram_webhook() -> Response:
        remote = _remote_address()
        given = request.headers.get(SECRET_HEADER, "").encode("latin-1", "replace")
        if not hmac.compare_digest(given, expected):
            now = clock()
            delay = guard.record_failure(remote, now)
            log.warning(
                "webhook.unauthorized",
                remote=remote,
                header_present=SECRET_HEADER in request.headers,
                failures=guard.failures(remote, now),
                delay=delay,
            )
            if delay > 0:
                await trio.sleep(delay)
            return _answer(401, "unauthorized")

        length = request.content_length
        if length is not None and length > max_body_bytes:
            log.warning("webhook.body_too_large", content_length=length, limit=max_body_bytes)
            return _answer(413, "payload too large")
        body = await _read_body(max_body_bytes, body_timeout)
        if isinstance(body, Response):
            return body

        try:
            obj = decode_json(body)
        except ValueError as exc:
            log.warning("webhook.bad_json", remote=remote, size=len(body), reason=str(exc)[:200])
            return _answer(400, "malformed JSON")
        try:
            update = parse_update(obj)
        except MalformedUpdate as exc:
            log.warning("webhook.malformed_update", update_id=exc.update_id, reason=exc.reason)
            return _answer(400, "not a Telegram update")

        try:
            await ingest(
                db,
                update,
                obj,
                allowed_chat_ids=allowed_chat_ids,
                dedupe=dedupe,
                notify=notify,
                clock=clock,
                source="webhook",
            )
        except ValueError as exc:
            log.warning("webhook.unstorable", update_id=update.update_id, reason=str(exc)[:200])
            return _answer(400, "unstorable update")
        except DatabaseError as exc:
            log.error(
                "webhook.db_error",
                update_id=update.update_id,
                error_type=type(exc).__name__,
                error=str(exc)[:300],
            )
            return _answer(503, "storage unavailable")
        # stored, duplicate, chat not allowed or unknown kind: all acknowledged
        return _answer(200)

    return bp
