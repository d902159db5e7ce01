"""Database outages are survived, not escalated: error mapping, the health watcher and its
limit, /readyz, the webhook's 503, and usage rows kept until the database is back — through a
real outage (``fakes.pg_proxy`` cuts every connection to the real PostgreSQL)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
import trio
from engram_outside import (
    Engram,
    free_port,
    post_update,
    run_echo_anthropic,
    serve_env,
    update_body,
)
from fakes.bot_api import run_fake_bot_api
from fakes.pg_proxy import PgProxy, run_pg_proxy

from actors.queues.dedupe import DedupeCache
from actors.queues.inbox_writer import InboxWriter
from actors.telegram.webhook import SECRET_HEADER, WEBHOOK_PATH, webhook_handler
from memory.llm.usage import log_api_usage
from memory.llm.usage_writer import open_usage_writer
from runtime import db as dbmod
from runtime.asgi import PathDispatcher
from runtime.cli import exit_code_for
from runtime.db_health import DatabaseHealth
from runtime.errors import DatabaseOutage, DatabaseUnavailable
from runtime.http import create_app, database_readiness, hypercorn_config
from runtime.http_server import serve_http
from runtime.migrate import apply_migrations

SECRET = "outage-secret"
CHAT = 31337


@pytest.mark.parametrize(
    "error",
    [
        asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed in the middle"),
        asyncpg.exceptions.ConnectionFailureError("connection failure"),
        asyncpg.exceptions.CannotConnectNowError("the database system is starting up"),
        asyncpg.exceptions.AdminShutdownError("terminating connection due to administrator"),
        asyncpg.exceptions.CrashShutdownError("terminating connection due to crash"),
        asyncpg.exceptions.TooManyConnectionsError("sorry, too many clients already"),
        asyncpg.exceptions.InterfaceError("cannot call Connection.fetch(): connection is closed"),
        asyncpg.exceptions.InternalClientError(
            "cannot switch to state 11; another operation (2) is in progress"
        ),
        ConnectionRefusedError(111, "Connection refused"),
        FileNotFoundError(2, "No such file or directory"),  # the Unix socket is gone
        ConnectionResetError(104, "Connection reset by peer"),
        TimeoutError(),
    ],
)
def test_connection_errors_are_database_unavailable(error: BaseException) -> None:
    assert isinstance(dbmod.map_error(error), DatabaseUnavailable)


def test_statement_errors_are_not_outages() -> None:
    for error in (
        asyncpg.exceptions.QueryCanceledError("canceling statement due to statement timeout"),
        asyncpg.exceptions.UndefinedColumnError("column x does not exist"),
        asyncpg.exceptions.InterfaceError("another operation is in progress"),
    ):
        assert not isinstance(dbmod.map_error(error), DatabaseUnavailable)


@asynccontextmanager
async def via_proxy(pg_server: Any, database_url: str) -> AsyncIterator[tuple[PgProxy, Any]]:
    async with (
        run_pg_proxy(pg_server, database_url) as proxy,
        dbmod.asyncio_loop(),
        dbmod.open_database(proxy.url, max_size=4, connect_timeout=3) as database,
    ):
        await apply_migrations(database)
        yield proxy, database


async def test_a_real_outage_is_unavailable_and_health_follows_the_connects(
    pg_server: Any, database_url: str
) -> None:
    async with via_proxy(pg_server, database_url) as (proxy, database):
        assert await database.fetchval("SELECT 1") == 1
        assert not database.health.down
        proxy.cut()
        # the pooled connection is lost mid-use, then every new connect is refused
        for _ in range(3):
            with pytest.raises(DatabaseUnavailable):
                await database.fetchval("SELECT 1")
        assert database.health.down and database.health.outages == 1
        assert "Error" in database.health.last_error
        ready = database_readiness(database)
        ok, detail = await ready()
        assert not ok and detail.startswith("database unreachable for ")
        proxy.restore()
        assert await database.fetchval("SELECT 2") == 2
        assert not database.health.down
        assert await ready() == (True, "ok")


async def test_watch_probes_until_back_and_gives_up_past_the_limit(
    autojump_clock: trio.abc.Clock,
) -> None:
    health = DatabaseHealth()
    reachable = False
    probes: list[float] = []

    async def probe() -> None:
        probes.append(trio.current_time())
        await trio.lowlevel.checkpoint()
        if not reachable:
            raise DatabaseUnavailable("refused")

    start = 0.0
    with pytest.RaisesGroup(DatabaseOutage) as info:
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(health.watch, probe, 300.0, probe_interval=2.0))
            await trio.sleep(50.0)
            assert probes == []  # nothing probed while the database is up
            health.connect_failed(DatabaseUnavailable("refused"))
            await trio.sleep(101.0)
            assert health.down and len(probes) == 50  # every 2 s
            reachable = True
            await trio.sleep(2.0)
            assert not health.down  # a probe got through: up again, the outage clock reset
            reachable = False
            health.connect_failed(DatabaseUnavailable("refused again"))
            start = trio.current_time()
            await trio.sleep_forever()
    assert trio.current_time() - start == 300.0
    assert str(info.value.exceptions[0]) == "database unreachable for 300 s"


async def test_a_probe_that_hangs_does_not_delay_giving_up(
    autojump_clock: trio.abc.Clock,
) -> None:
    health = DatabaseHealth()
    health.connect_failed(DatabaseUnavailable("no route"))
    with pytest.raises(DatabaseOutage):
        await health.watch(trio.sleep_forever, 30.0)
    assert trio.current_time() == 30.0


def test_the_outage_exit_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    error = ExceptionGroup("root", [DatabaseOutage("database unreachable for 300 s")])
    assert exit_code_for(error) == 1
    assert capsys.readouterr().err == "engram: database unreachable for 300 s\n"


@pytest.mark.slow
async def test_usage_rows_wait_for_the_database(pg_server: Any, database_url: str) -> None:
    async with via_proxy(pg_server, database_url) as (proxy, database):

        async def count() -> int:
            value: int = await database.fetchval("SELECT count(*) FROM api_usage")
            return value

        async with open_usage_writer(database, retry_base=0.05, retry_cap=0.2) as writer:
            proxy.cut()
            for i in range(5):
                await log_api_usage(
                    writer,
                    provider="anthropic",
                    model="claude-sonnet-4-5",
                    purpose=f"p{i}",
                    input_tokens=10,
                    output_tokens=1,
                )
            with trio.fail_after(10):
                while writer.retries < 3:  # noqa: ASYNC110 (the writer's own retries)
                    await trio.sleep(0.05)
            assert writer.written == 0 and writer.failed == 0  # kept, not dropped
            proxy.restore()
            with trio.fail_after(10):
                while writer.written < 5:  # noqa: ASYNC110
                    await trio.sleep(0.05)
        assert writer.failed == 0
        assert await count() == 5


def _update(update_id: int) -> bytes:
    message = {
        "message_id": update_id,
        "date": 1_700_000_000,
        "text": "hi",
        "chat": {"id": CHAT, "type": "private"},
        "from": {"id": CHAT, "is_bot": False, "first_name": "A"},
    }
    return json.dumps({"update_id": update_id, "message": message}).encode()


async def test_webhook_and_readyz_say_503_while_the_database_is_down(
    pg_server: Any, database_url: str
) -> None:
    async with via_proxy(pg_server, database_url) as (proxy, database):
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            writer: InboxWriter = await nursery.start(InboxWriter(database).run)
            webhook = webhook_handler(
                secret_token=SECRET,
                allowed_chat_ids=frozenset({CHAT}),
                db=database,
                notify=lambda inbox_id, update: None,
                dedupe=DedupeCache(),
                insert=writer.insert_update,
            )
            app = PathDispatcher(
                create_app([("database", database_readiness(database))]),
                {WEBHOOK_PATH: webhook},
            )
            binds = await nursery.start(
                partial(
                    serve_http,
                    app,
                    hypercorn_config("127.0.0.1", 0),
                    max_connections=16,
                    shutdown_trigger=stop.wait,
                )
            )
            headers = {SECRET_HEADER: SECRET, "Content-Type": "application/json"}
            async with httpx.AsyncClient(base_url=binds[0], timeout=10) as client:
                proxy.cut()
                down = await client.post(WEBHOOK_PATH, content=_update(1), headers=headers)
                ready = await client.get("/readyz")
                proxy.restore()
                retried = await client.post(WEBHOOK_PATH, content=_update(1), headers=headers)
                ready_again = await client.get("/readyz")
            stop.set()
            await writer.aclose()
        assert down.status_code == 503  # not stored: Telegram must resend
        assert ready.status_code == 503
        assert ready.json()["checks"]["database"].startswith("database unreachable for ")
        assert retried.status_code == 200
        assert ready_again.status_code == 200
        assert await database.fetchval("SELECT count(*) FROM inbox") == 1


@pytest.mark.slow
async def test_serve_waits_out_an_outage_then_gives_up_past_the_limit(
    pg_server: Any, database_url: str, tmp_path: Path
) -> None:
    """``engram serve`` from outside, its database behind the proxy: a 4 s cut is waited out
    (503s, /readyz names it, then the update is stored and answered; the process lives on,
    with RESTART_MAX 1); a cut longer than DB_OUTAGE_LIMIT (6 s) ends it with exit 1 and one
    line."""
    async with (
        run_pg_proxy(pg_server, database_url) as proxy,
        run_fake_bot_api() as bot_api,
        run_echo_anthropic() as model,
    ):
        env = serve_env(
            tmp_path,
            bot_api=bot_api.base_url,
            model=model.base_url,
            port=free_port(),
            chats=[CHAT],
            DATABASE_URL=proxy.url,
            DB_OUTAGE_LIMIT="6",
            RESTART_MAX="1",
            DB_CONNECT_TIMEOUT="2",
        )
        engram = Engram(env, tmp_path / "engram.log")
        await engram.start()
        try:
            await engram.wait_ready(limit=120)
            async with httpx.AsyncClient(timeout=10) as client:
                proxy.cut()
                statuses = [await post_update(client, engram.port, update_body(1, chat=CHAT))]
                ready = await client.get(f"http://127.0.0.1:{engram.port}/readyz")
                await trio.sleep(4)
                assert engram.running
                proxy.restore()
                with trio.fail_after(30):
                    while statuses[-1] != 200:
                        statuses.append(
                            await post_update(client, engram.port, update_body(1, chat=CHAT))
                        )
                        await trio.sleep(0.2)
                with trio.fail_after(30):
                    while not bot_api.sent_texts(CHAT):  # noqa: ASYNC110
                        await trio.sleep(0.1)
                proxy.cut()  # for good
                with trio.fail_after(60):
                    code = await engram.wait()
        finally:
            if engram.running:
                engram.kill()
    assert statuses[0] == 503 and statuses[-1] == 200
    assert ready.status_code == 503 and "unreachable" in ready.json()["checks"]["database"]
    assert bot_api.sent_texts(CHAT) == ["re 1"]
    assert code == 1
    err = [line for line in engram.tail(200).splitlines() if line.startswith("engram:")]
    assert err == ["engram: database unreachable for 6 s"]
