"""The HTTP application (quart-trio) and its hypercorn configuration.

The app owns no tasks: :func:`runtime.serve.serve` starts the actor system and builds the app
from the :class:`~runtime.serve.SystemHandle` it hands back (its readiness checks and
blueprints; hot routes such as the Telegram webhook are bare ASGI handlers served in front of
the app by :class:`runtime.asgi.PathDispatcher`). ``GET /healthz`` says the process is alive;
``GET /readyz`` says the database answers, every migration is applied and every check of the
system passes (503 otherwise); the system's reports (the bot's heartbeat) are added to its body
and never change its status.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import trio
from hypercorn.config import Config
from quart import Blueprint, Response, jsonify
from quart_trio import QuartTrio

from runtime.db import Database
from runtime.errors import DatabaseError, DatabaseUnavailable
from runtime.migrate import migrations_current

ReadinessCheck = Callable[[], Awaitable[tuple[bool, str]]]
#: a part of ``/readyz``'s body that does not decide readiness (e.g. the bot's heartbeat)
Report = Callable[[], Mapping[str, Any]]

#: the largest WebSocket message a client may send (bytes): hypercorn closes the socket (1009)
#: past it; ``engram chat``'s frames are a few KB
WEBSOCKET_MAX_MESSAGE = 64 * 1024

#: seconds a handler of the app may wait for a request body (quart's BODY_TIMEOUT: 408 past
#: it); a handler that never reads the body answers at once and the connection closes
BODY_TIMEOUT = 10


def database_readiness(db: Database, timeout: float = 2.0) -> ReadinessCheck:
    """A readiness check: the database answers within ``timeout`` and migrations are current;
    while the pool cannot connect (``db.health``) it fails at once, naming the outage."""

    async def check() -> tuple[bool, str]:
        if db.health.down:  # the pool's connects fail: say so at once, without a timeout
            return False, f"database unreachable for {db.health.down_for():.0f} s"
        with trio.move_on_after(timeout):
            try:
                if not await migrations_current(db):
                    return False, "migrations not applied"
            except DatabaseUnavailable:  # a lost connection, before any connect has failed
                return False, "database unreachable"
            except DatabaseError as exc:
                return False, f"database error: {type(exc).__name__}"
            return True, "ok"
        return False, "database timeout"

    return check


def create_app(
    readiness: Iterable[tuple[str, ReadinessCheck]] = (),
    blueprints: Iterable[Blueprint] = (),
    *,
    max_body_bytes: int = 1024 * 1024,
    reports: Iterable[tuple[str, Report]] = (),
) -> QuartTrio:
    """Build the app. ``readiness`` is a list of named checks run by ``/readyz``; ``reports``
    add named objects to its body without deciding the status."""
    app = QuartTrio("engram")
    app.config["MAX_CONTENT_LENGTH"] = max_body_bytes
    app.config["BODY_TIMEOUT"] = BODY_TIMEOUT
    app.config["PROVIDE_AUTOMATIC_OPTIONS"] = False
    checks = list(readiness)
    extras = list(reports)

    @app.get("/healthz")
    async def healthz() -> Response:
        return jsonify({"status": "ok"})

    @app.get("/readyz")
    async def readyz() -> tuple[Response, int]:
        results: dict[str, str] = {}
        ready = True
        for name, check in checks:
            ok, detail = await check()
            results[name] = detail
            ready = ready and ok
        body: dict[str, Any] = {"status": "ready" if ready else "not ready", "checks": results}
        for name, report in extras:
            body[name] = dict(report())
        return jsonify(body), (200 if ready else 503)

    for bp in blueprints:
        app.register_blueprint(bp)
    return app


def hypercorn_config(host: str, port: int, **overrides: Any) -> Config:
    """Hypercorn settings for engram: one bind, no access log, short graceful timeout, no
    ``Server`` header (it names the server, and each header costs CPU on every response)."""
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = None
    config.include_server_header = False
    config.graceful_timeout = 5.0
    config.keep_alive_timeout = 75.0
    config.h11_max_incomplete_size = 16 * 1024
    config.websocket_max_message_size = WEBSOCKET_MAX_MESSAGE
    # no websocket_ping_interval: hypercorn's ping task outlives the socket's close by up to one
    # interval, holding its connection slot (tests/runtime/test_http_websocket.py)
    for key, value in overrides.items():
        setattr(config, key, value)
    return config
