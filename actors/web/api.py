"""The JSON API, ``/api/v1/`` (issue 25 item 3): memory search through the product's
retrieval, a pattern by id, episodes, usage aggregates, health; errors as
``{"error": {"code", "message"}}`` (:mod:`actors.web.errors`); the OpenAPI 3.1 document at
``/api/v1/openapi.json`` (:mod:`actors.web.openapi`). Tokens and chat scopes:
:mod:`actors.web.auth`. Off (nothing registered: 404) unless ``DASHBOARD_TOKEN`` is set.
"""

from __future__ import annotations

import time as clock
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import attrs
from quart import Blueprint, Response, g, jsonify, request

from actors.chat.memory_commands import MemoryServices
from actors.telegram.access import chat_summaries
from actors.telegram.webhook import AuthFailureGuard
from actors.web.auth import Scope, bearer, scope_of
from actors.web.errors import ApiError
from actors.web.openapi import document
from memory.conversation.episodes import episodes_page
from memory.llm.usage import usage_summary
from memory.patterns.views import search_patterns
from memory.patterns.why import explain
from runtime.errors import DatabaseError
from runtime.logs import get_logger

log = get_logger(__name__)

PREFIX = "/api/v1"
MAX_QUERY_CHARS = 500
MAX_LIMIT = 100
MAX_DAYS = 366
_ID_DIGITS = 19


def plain(value: Any) -> Any:
    """``value`` as JSON-ready data: attrs classes as objects, dates and times in ISO 8601."""
    if attrs.has(type(value)):
        return {k: plain(v) for k, v in attrs.asdict(value, recurse=False).items()}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | frozenset | set):
        return [plain(v) for v in value]
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    return value


def error_response(exc: ApiError) -> tuple[Response, int]:
    body = jsonify({"error": {"code": exc.code, "message": exc.message}})
    if exc.code == "unauthorized":
        body.headers["WWW-Authenticate"] = 'Bearer realm="engram"'
    return body, exc.status


def _int(raw: str | None, name: str, lo: int, hi: int, default: int | None = None) -> int | None:
    if raw is None or raw == "":
        return default
    text = raw.strip()
    digits = text.removeprefix("-")
    if not digits.isascii() or not digits.isdigit() or len(digits) > _ID_DIGITS:
        raise ApiError("bad_request", f"{name} must be an integer")
    value = int(text)
    if not lo <= value <= hi:
        raise ApiError("bad_request", f"{name} must be between {lo} and {hi}")
    return value


def _chat(raw: str) -> int:
    chat_id = _int(raw, "chat_id", -(2**63), 2**63 - 1)
    assert chat_id is not None
    scope: Scope = g.scope
    scope.check(chat_id)
    return chat_id


def _operator() -> None:
    if g.scope.chat_id is not None:
        raise ApiError("chat_forbidden", "only the operator's token sees the whole bot")


@attrs.frozen
class ApiDeps:
    """What the API reads: the memory services (database, embedder, retrieval settings), the
    token, the allowlist setting's chats and the heartbeat's latest report."""

    services: MemoryServices
    token: str
    allowed_chat_ids: Sequence[int] = ()
    health: Callable[[], Mapping[str, Any]] = dict
    guard: AuthFailureGuard = attrs.field(factory=AuthFailureGuard)


def api_blueprint(deps: ApiDeps) -> Blueprint:
    bp = Blueprint("api_v1", __name__, url_prefix=PREFIX)
    s = deps.services

    @bp.errorhandler(ApiError)
    async def api_error(exc: ApiError) -> tuple[Response, int]:
        return error_response(exc)

    @bp.errorhandler(DatabaseError)
    async def database_error(exc: DatabaseError) -> tuple[Response, int]:
        log.warning("api.database_error", error=type(exc).__name__)
        return error_response(ApiError("unavailable", "the database is not available"))

    @bp.errorhandler(Exception)
    async def internal(exc: Exception) -> tuple[Response, int]:
        log.error("api.internal_error", exc_info=exc)
        return error_response(ApiError("internal", "internal error"))

    @bp.before_request
    async def authenticate() -> None:
        if request.path == f"{PREFIX}/openapi.json":
            return
        remote = request.remote_addr or "<unknown>"
        scope = scope_of(bearer(request.headers.get("Authorization")), deps.token)
        if scope is None:
            if deps.guard.record_failure(remote, clock.monotonic()) > 0:
                raise ApiError("too_many_failures", "too many failed attempts; wait")
            raise ApiError("unauthorized", "a valid bearer token is required")
        g.scope = scope

    @bp.get("/openapi.json")
    async def openapi() -> Response:
        return jsonify(document())

    @bp.get("/health")
    async def health() -> Response:
        _operator()
        report = dict(deps.health())
        database = "ok"
        try:
            await s.db.fetchval("SELECT 1")
        except DatabaseError:
            database = "unreachable"
        return jsonify(
            {
                "status": report.get("status", "pending"),
                "checked_at": report.get("checked_at"),
                "checks": report.get("checks", {}),
                "database": database,
            }
        )

    @bp.get("/chats")
    async def chats() -> Response:
        scope: Scope = g.scope
        if scope.chat_id is not None:
            found = await chat_summaries(s.db, [scope.chat_id])
            found = [c for c in found if c.chat_id == scope.chat_id]
        else:
            found = await chat_summaries(s.db, sorted(deps.allowed_chat_ids))
        items = [
            {"chat_id": c.chat_id, "messages": c.messages, "patterns": c.patterns} for c in found
        ]
        return jsonify({"chats": items})

    @bp.get("/chats/<chat>/patterns/search")
    async def search(chat: str) -> Response:
        chat_id = _chat(chat)
        query = " ".join(request.args.get("q", "").split())
        if not query or len(query) > MAX_QUERY_CHARS:
            raise ApiError("bad_request", f"q must be 1-{MAX_QUERY_CHARS} characters")
        limit = _int(request.args.get("limit"), "limit", 1, 50, 10)
        assert limit is not None
        items, degraded = await search_patterns(
            s.db,
            s.embedder,
            chat_id,
            query,
            now=datetime.now(UTC),
            timezone=s.timezone,
            thresholds=s.thresholds,
            lexicons=s.lexicons,
            planner=s.planner,
            limit=limit,
        )
        return jsonify(
            {"chat_id": chat_id, "query": query, "degraded": degraded, "patterns": plain(items)}
        )

    @bp.get("/chats/<chat>/patterns/<pattern>")
    async def pattern(chat: str, pattern: str) -> Response:
        chat_id = _chat(chat)
        pattern_id = _int(pattern, "pattern_id", 1, 2**63 - 1)
        assert pattern_id is not None
        detail = await explain(s.db, chat_id, pattern_id)
        if detail is None:  # another chat's pattern looks exactly like a missing one
            raise ApiError("not_found", f"no pattern {pattern_id} in chat {chat_id}")
        return jsonify(plain(detail))

    @bp.get("/chats/<chat>/episodes")
    async def episodes(chat: str) -> Response:
        chat_id = _chat(chat)
        limit = _int(request.args.get("limit"), "limit", 1, MAX_LIMIT, 20)
        before = _int(request.args.get("before"), "before", 1, 2**63 - 1)
        assert limit is not None
        rows = await episodes_page(s.db, chat_id, limit, before)
        nxt = rows[-1].id if len(rows) == limit else None
        return jsonify({"chat_id": chat_id, "episodes": plain(rows), "next_before": nxt})

    async def usage_of(chat_id: int | None) -> Response:
        days = _int(request.args.get("days"), "days", 1, MAX_DAYS, 30)
        assert days is not None
        until = datetime.now(UTC)
        summary = await usage_summary(
            s.db,
            since=until - timedelta(days=days),
            until=until,
            chat_id=chat_id,
            tz=s.timezone,
        )
        return jsonify(plain(summary))

    @bp.get("/chats/<chat>/usage")
    async def chat_usage(chat: str) -> Response:
        return await usage_of(_chat(chat))

    @bp.get("/usage")
    async def usage() -> Response:
        _operator()
        return await usage_of(None)

    every = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]

    @bp.route("/", methods=every, defaults={"rest": ""})
    @bp.route("/<path:rest>", methods=every)
    async def unknown(rest: str) -> Response:
        if request.method != "GET":
            raise ApiError("method_not_allowed", "the API is read-only: GET only")
        raise ApiError("not_found", "no such endpoint")

    return bp
