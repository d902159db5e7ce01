"""``engram serve``: compose every lifetime of the process.

    trio.run -> asyncio loop -> database (embedded or DATABASE_URL) -> migrations
      -> root nursery: shutdown coordinator (signals), actor system, hypercorn

The actor system is whatever the caller builds (the ``actors`` package composes the bot's); it
is started with ``nursery.start`` and hands back a :class:`SystemHandle` with the HTTP routes,
readiness checks and drain callbacks the rest of the process needs. The web app only receives
that handle; it starts no tasks of its own. Hot endpoints come as bare ASGI handlers
(``routes``), served in front of the quart-trio app by ``runtime.asgi.PathDispatcher``.
"""

from __future__ import annotations

import gc
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any, Protocol, TypeVar

import attrs
import trio
from quart import Blueprint

from runtime.asgi import AsgiApp, PathDispatcher
from runtime.db import Database
from runtime.errors import EngramError, leaf_exceptions
from runtime.http import ReadinessCheck, Report, create_app, database_readiness, hypercorn_config
from runtime.http_server import connection_cap, serve_http
from runtime.logs import get_logger
from runtime.migrate import apply_migrations
from runtime.process_settings import ProcessSettings
from runtime.shutdown import Shutdown

log = get_logger(__name__)


@attrs.frozen
class SystemHandle:
    """What a started actor system offers the process."""

    blueprints: Sequence[Blueprint] = ()
    routes: Mapping[str, AsgiApp] = attrs.field(factory=dict)  # exact path -> ASGI handler
    readiness: Sequence[tuple[str, ReadinessCheck]] = ()
    #: more of ``/readyz``'s body that does not decide readiness (name -> its JSON object)
    reports: Sequence[tuple[str, Report]] = ()
    drains: Sequence[tuple[str, Callable[[], Awaitable[object]]]] = ()


class ActorSystem(Protocol):
    async def run(self, *, task_status: trio.TaskStatus[SystemHandle]) -> None: ...


#: The settings a system is built from: the process's section or any class combining it with more.
S = TypeVar("S", bound=ProcessSettings)

#: Builds the actor system from the settings ``serve`` was given (the same object, same type).
SystemBuilder = Callable[[S, Database, Shutdown], ActorSystem]


class EmptySystem:
    """A system with no actors (``engram serve`` of the bare runtime, and tests)."""

    async def run(self, *, task_status: trio.TaskStatus[SystemHandle]) -> None:
        task_status.started(SystemHandle())
        await trio.sleep_forever()


async def serve(
    settings: S,
    database: Database,
    build_system: SystemBuilder[S],
    *,
    on_listening: Callable[[list[str]], None] | None = None,
    shutdown: Shutdown | None = None,
) -> int:
    """Run until SIGINT/SIGTERM (or ``shutdown.request_stop()``); returns the exit code."""
    applied = await apply_migrations(database)
    if applied:
        log.info("serve.migrated", applied=applied)
    shutdown = shutdown or Shutdown(deadline=settings.shutdown_deadline)
    async with trio.open_nursery() as root:
        await root.start(shutdown.run, root.cancel_scope)
        # the one place an outage ends the process: DB_OUTAGE_LIMIT seconds unreachable
        await root.start(
            partial(database.health.watch, partial(database.fetchval, "SELECT 1")),
            settings.db_outage_limit,
        )
        handle: SystemHandle = await root.start(build_system(settings, database, shutdown).run)
        for name, drain in handle.drains:
            shutdown.add_drain(name, drain)
        app: Any = create_app(  # the quart app, or the dispatcher in front of it
            [("database", database_readiness(database)), *handle.readiness],
            handle.blueprints,
            reports=handle.reports,
        )
        if handle.routes:
            app = PathDispatcher(app, handle.routes)
        config = hypercorn_config(
            settings.host, settings.port, keep_alive_timeout=settings.http_idle_timeout
        )
        try:
            binds: Any = await root.start(
                partial(
                    serve_http,
                    app,
                    config,
                    max_connections=connection_cap(settings.http_max_connections),
                    shutdown_trigger=shutdown.intake_stopped.wait,
                )
            )
        except* OSError as group:
            exc = leaf_exceptions(group)[0]
            reason = getattr(exc, "strerror", None) or str(exc)
            where = f"{settings.host}:{settings.port}"
            raise EngramError(f"cannot listen on {where}: {reason}") from None
        # start-up objects (modules, app, SDK clients) live for the whole process: keep them out
        # of every later full collection, so GC pauses scale with live requests only
        gc.collect()
        gc.freeze()
        log.info("serve.listening", binds=list(binds or []))
        if on_listening is not None:
            on_listening(list(binds or []))
    log.info("serve.stopped", exit_code=shutdown.exit_code)
    return shutdown.exit_code
