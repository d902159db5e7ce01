"""The OpenAPI 3.1 document of ``/api/v1/`` (served at ``/api/v1/openapi.json``; the tests
validate it and every response against it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, get_args

from actors.scheduler.health_checks import Severity
from actors.web.errors import CODES

_S = "#/components/schemas/"


def _obj(props: dict[str, Any], *, required: list[str] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": list(props) if required is None else required,
    }


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _S + name}


STR = {"type": "string"}
INT = {"type": "integer"}
NUM = {"type": "number"}
BOOL = {"type": "boolean"}
WHEN = {"type": "string", "format": "date-time"}
DAY = {"type": "string", "format": "date"}


def _null(schema: dict[str, Any]) -> dict[str, Any]:
    return {"oneOf": [schema, {"type": "null"}]}


SPEND = _obj(
    {
        "calls": INT,
        "failed": INT,
        "cost_usd": NUM,
        "input_tokens": INT,
        "output_tokens": INT,
        "duration_seconds": NUM,
        "cache_read_tokens": INT,
        "cache_write_tokens": INT,
    }
)

SCHEMAS: dict[str, Any] = {
    "Error": _obj(
        {"error": _obj({"code": {"type": "string", "enum": list(CODES)}, "message": STR})}
    ),
    "Health": _obj(
        {
            "status": {"type": "string", "enum": [*get_args(Severity), "pending"]},
            "checked_at": _null(WHEN),
            "checks": {
                "type": "object",
                "additionalProperties": _obj(
                    {
                        "severity": {"type": "string", "enum": list(get_args(Severity))},
                        "detail": STR,
                    }
                ),
            },
            "database": {"type": "string", "enum": ["ok", "unreachable"]},
        }
    ),
    "Chats": _obj(
        {
            "chats": {
                "type": "array",
                "items": _obj({"chat_id": INT, "messages": INT, "patterns": INT}),
            }
        }
    ),
    "Item": _obj(
        {
            "id": INT,
            "kind": STR,
            "content": STR,
            "status": STR,
            "core": BOOL,
            "occurs_on": _null(DAY),
            "occurs_at": _null(STR),
            "score": _null(NUM),
            "similarity": _null(NUM),
        }
    ),
    "Search": _obj(
        {
            "chat_id": INT,
            "query": STR,
            "degraded": BOOL,
            "patterns": {"type": "array", "items": _ref("Item")},
        }
    ),
    "Pattern": _obj(
        {
            "id": INT,
            "kind": STR,
            "content": STR,
            "status": STR,
            "status_reason": _null(STR),
            "strength": NUM,
            "confidence": NUM,
            "times_seen": INT,
            "contradictions": INT,
            "first_seen": WHEN,
            "last_seen": WHEN,
            "source": STR,
            "core": BOOL,
            "pinned_at": _null(WHEN),
            "occurs_on": _null(DAY),
            "occurs_at": _null(STR),
            "observations": {
                "type": "array",
                "items": _obj(
                    {
                        "evidence": STR,
                        "roles": {"type": "array", "items": STR},
                        "signal": STR,
                        "confidence": NUM,
                        "observed_at": WHEN,
                    }
                ),
            },
            "observation_count": INT,
            "entries": {
                "type": "array",
                "items": _obj(
                    {
                        "entry_uuid": STR,
                        "entry_date": _null(WHEN),
                        "source": STR,
                        "times_linked": INT,
                    }
                ),
            },
            "relations": {
                "type": "array",
                "items": _obj(
                    {
                        "relation": STR,
                        "direction": {"enum": ["in", "out"]},
                        "other_id": INT,
                        "other_content": STR,
                        "other_status": STR,
                    }
                ),
            },
            "aliases": {"type": "array", "items": STR},
            "audit": {
                "type": "array",
                "items": _obj(
                    {
                        "id": INT,
                        "pattern_id": INT,
                        "action": STR,
                        "old_status": STR,
                        "new_status": STR,
                        "reason": STR,
                        "actor": STR,
                        "other_pattern_id": _null(INT),
                        "at": WHEN,
                    }
                ),
            },
        }
    ),
    "Episodes": _obj(
        {
            "chat_id": INT,
            "episodes": {
                "type": "array",
                "items": _obj(
                    {
                        "id": INT,
                        "summary": STR,
                        "started_at": WHEN,
                        "ended_at": WHEN,
                        "message_count": INT,
                    }
                ),
            },
            "next_before": _null(INT),
        }
    ),
    "Spend": SPEND,
    "Usage": _obj(
        {
            "since": WHEN,
            "until": WHEN,
            "chat_id": _null(INT),
            "total": _ref("Spend"),
            "by_purpose": {"type": "object", "additionalProperties": _ref("Spend")},
            "by_model": {"type": "object", "additionalProperties": _ref("Spend")},
            "by_day": {
                "type": "array",
                "items": _obj({"day": DAY, "calls": INT, "cost_usd": NUM}),
            },
        }
    ),
}


def _errors(*codes: int) -> dict[str, Any]:
    return {
        str(c): {
            "description": next(k for k, v in CODES.items() if v == c),
            "content": {"application/json": {"schema": _ref("Error")}},
        }
        for c in codes
    }


def _get(
    summary: str,
    schema: str,
    *,
    params: Sequence[dict[str, Any]] = (),
    chat: bool = True,
    errors: tuple[int, ...] = (400,),
) -> dict[str, Any]:
    parameters = ([_CHAT] if chat else []) + list(params)
    return {
        "get": {
            "summary": summary,
            "parameters": parameters,
            "responses": {
                "200": {
                    "description": "OK",
                    "content": {"application/json": {"schema": _ref(schema)}},
                },
                **_errors(*errors, 401, 403, 429, 500, 503),
            },
        }
    }


def _q(name: str, schema: dict[str, Any], text: str, *, required: bool = False) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": required,
        "schema": schema,
        "description": text,
    }


_CHAT = {
    "name": "chat_id",
    "in": "path",
    "required": True,
    "schema": INT,
    "description": "The Telegram chat id; a chat token sees only its own chat.",
}
_PATTERN = {"name": "pattern_id", "in": "path", "required": True, "schema": INT}


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "engram API",
            "version": "1.0.0",
            "description": (
                "Read-only JSON API of an engram bot. Bearer token: DASHBOARD_TOKEN (every "
                "chat) or a chat token from `engram api-token --chat ID` (that chat only). "
                'Errors: {"error": {"code", "message"}} with a stable code.'
            ),
        },
        "servers": [{"url": "/api/v1"}],
        "security": [{"bearer": []}],
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": SCHEMAS,
        },
        "paths": {
            "/health": _get(
                "The heartbeat's checks and the database", "Health", chat=False, errors=()
            ),
            "/chats": _get("The chats the token sees", "Chats", chat=False, errors=()),
            "/chats/{chat_id}/patterns/search": _get(
                "Memory search through the bot's own retrieval (hybrid, weighted)",
                "Search",
                params=[
                    _q("q", STR, "The words to search for (1-500 characters).", required=True),
                    _q("limit", {**INT, "minimum": 1, "maximum": 50}, "At most (default 10)."),
                ],
            ),
            "/chats/{chat_id}/patterns/{pattern_id}": _get(
                "A pattern with its evidence, links, relations, aliases and history",
                "Pattern",
                params=[{**_PATTERN}],
                errors=(400, 404),
            ),
            "/chats/{chat_id}/episodes": _get(
                "The chat's episodes (compacted spans), newest first",
                "Episodes",
                params=[
                    _q("limit", {**INT, "minimum": 1, "maximum": 100}, "At most (default 20)."),
                    _q("before", INT, "The next page: episodes older than this one."),
                ],
            ),
            "/chats/{chat_id}/usage": _get(
                "The chat's model calls: totals by purpose, model and day",
                "Usage",
                params=[_q("days", {**INT, "minimum": 1, "maximum": 366}, "Default 30.")],
            ),
            "/usage": _get(
                "Every model call of the bot (operator token only)",
                "Usage",
                chat=False,
                params=[_q("days", {**INT, "minimum": 1, "maximum": 366}, "Default 30.")],
            ),
        },
    }
