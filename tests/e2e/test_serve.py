"""``engram serve`` composition: health/readiness, clean shutdown, start-up failures."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import trio

from runtime import db as dbmod
from runtime.http import create_app, database_readiness, hypercorn_config
from runtime.process_settings import ProcessSettings
from runtime.serve import EmptySystem, serve
from runtime.settings import load_settings
from runtime.shutdown import Shutdown

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_serve_health_ready_and_clean_stop(raw_db: dbmod.Database) -> None:
    settings = load_settings(
        ProcessSettings, {"ENGRAM_PORT": "0", "SHUTDOWN_DEADLINE": "5"}, dotenv=None
    )
    shutdown = Shutdown(deadline=5, signals=())
    binds: list[str] = []
    codes: list[int] = []
    listening = trio.Event()

    def on_listening(urls: list[str]) -> None:
        binds.extend(urls)
        listening.set()

    async def run() -> None:
        codes.append(
            await serve(
                settings,
                raw_db,
                lambda s, d, sh: EmptySystem(),
                on_listening=on_listening,
                shutdown=shutdown,
            )
        )

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        with trio.fail_after(10):
            await listening.wait()
        async with httpx.AsyncClient(base_url=binds[0]) as client:
            health = await client.get("/healthz")
            ready = await client.get("/readyz")
        assert health.status_code == 200
        assert ready.status_code == 200
        assert ready.json()["checks"] == {"database": "ok"}
        shutdown.request_stop("test")
    assert codes == [0]
    # serve applied the migrations before listening
    assert await raw_db.fetchval("SELECT count(*) FROM schema_migrations") >= 1


async def test_readyz_is_503_without_migrations(raw_db: dbmod.Database) -> None:
    import hypercorn.trio

    app = create_app([("database", database_readiness(raw_db))])
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        from functools import partial

        binds = await nursery.start(
            partial(
                hypercorn.trio.serve,
                app,
                hypercorn_config("127.0.0.1", 0),
                shutdown_trigger=stop.wait,
            )
        )
        async with httpx.AsyncClient(base_url=binds[0]) as client:
            ready = await client.get("/readyz")
        stop.set()
    assert ready.status_code == 503
    assert ready.json()["checks"]["database"] == "migrations not applied"


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ENGRAM_", "TELEGRAM_", "DATABASE_URL"))
    }
    env["LOG_FORMAT"] = "json"
    env["TELEGRAM_BOT_TOKEN"] = "123456:TESTTOKENtesttoken_TESTTOKENtesttoken"
    env["TELEGRAM_SECRET_TOKEN"] = "webhook-secret"
    env["TELEGRAM_API_BASE_URL"] = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    env["ANTHROPIC_API_KEY"] = "sk-ant-test-key-not-real"
    env["ANTHROPIC_BASE_URL"] = f"http://127.0.0.1:{_free_port()}"
    env["EMBEDDING_PROVIDER"] = "local"
    env.update(extra)
    return env


@pytest.mark.slow
def test_unreachable_database_url_fails_fast_with_one_line(tmp_path: Path) -> None:
    url = f"postgresql://engram:topsecretpw@127.0.0.1:{_free_port()}/engram"
    # what the interpreter and the imports cost on this machine right now (the SDKs are heavy
    # and the machine may be loaded): the bound is on the time spent beyond that
    start = time.monotonic()
    subprocess.run([sys.executable, "-c", "import actors.cli.main"], check=True, timeout=60)
    startup = time.monotonic() - start
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "actors.cli", "serve"],
        env=_env(DATABASE_URL=url, DB_CONNECT_TIMEOUT="3", ENGRAM_HOME=str(tmp_path)),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60 + startup,
    )
    # DB_CONNECT_TIMEOUT is 3 s: it gives up after that, not after retrying for long
    assert time.monotonic() - start < startup + 3 + 8
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.startswith("engram:")]
    assert len(errors) == 1
    assert "cannot reach the database" in errors[0]
    assert "topsecretpw" not in proc.stderr + proc.stdout


@pytest.mark.slow
def test_sigterm_drains_and_exits_zero(tmp_path: Path, database_url: str) -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "actors.cli", "serve", "--webhook"],
        env=_env(DATABASE_URL=database_url, ENGRAM_PORT=str(port), ENGRAM_HOME=str(tmp_path)),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "server did not become ready"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    _, err = proc.communicate()
    assert code == 0, err
    assert "shutdown.requested" in err
    assert "system.get_me_failed" in err  # webhook mode starts without reaching Telegram
    assert "TESTTOKENtesttoken" not in err


@pytest.mark.parametrize("bad", ["ENGRAM_PORT=-5", "TIMEZONE=Nowhere/Else"])
def test_bad_setting_exit_2(tmp_path: Path, bad: str) -> None:
    name, value = bad.split("=")
    proc = subprocess.run(
        [sys.executable, "-m", "actors.cli", "serve"],
        env=_env(**{name: value}),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert name in proc.stderr


def test_escalation_inside_groups_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    from runtime.cli import exit_code_for
    from runtime.errors import EscalationError

    exc = ExceptionGroup(
        "outer",
        [ExceptionGroup("inner", [EscalationError("chats", 6, 60.0, RuntimeError("boom"))])],
    )
    assert exit_code_for(exc, ["boom-secret"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("engram: fatal: actor 'chats' crashed 6 times")
    assert err.count("\n") == 1


def test_escalated_supervisor_exits_process_nonzero() -> None:
    from runtime.cli import exit_code_for
    from runtime.supervisor import RestartPolicy, supervise

    async def crashing(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await trio.sleep(0.01)
        raise RuntimeError("always")

    async def main() -> None:
        policy = RestartPolicy(backoff_base=0.001, backoff_cap=0.001, max_restarts=2, window=60)
        async with trio.open_nursery() as nursery:
            await nursery.start(supervise, "crasher", crashing, policy)

    with pytest.raises(BaseException) as info:
        trio.run(main)
    assert exit_code_for(info.value) == 1


@pytest.mark.parametrize(
    ("missing", "extra"),
    [
        ("TELEGRAM_BOT_TOKEN", {"TELEGRAM_BOT_TOKEN": ""}),
        ("TELEGRAM_SECRET_TOKEN", {"TELEGRAM_SECRET_TOKEN": ""}),
        ("MODEL_RATES", {"MODEL_RATES": "claude-sonnet-4-5=cheap"}),
    ],
)
def test_serve_requires_telegram_settings(
    tmp_path: Path, missing: str, extra: dict[str, str]
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "actors.cli", "serve", "--webhook"],  # needs the secret too
        env=_env(**extra),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and missing in lines[0]


@pytest.mark.parametrize(
    ("missing", "extra"),
    [
        ("ANTHROPIC_API_KEY", {"ANTHROPIC_API_KEY": "", "LLM_PROVIDER": ""}),  # the default
        (
            "OPENAI_BASE_URL",
            {"LLM_PROVIDER": "openai", "OPENAI_API_KEY": "", "OPENAI_BASE_URL": ""},
        ),
    ],
)
def test_serve_without_llm_settings_exits_2_naming_the_variable(
    tmp_path: Path, missing: str, extra: dict[str, str]
) -> None:
    # were the check missing, start-up would go on and fail on the database instead (exit 1)
    unreachable = f"postgresql://engram:pw@127.0.0.1:{_free_port()}/engram"
    env = _env(DATABASE_URL=unreachable, DB_CONNECT_TIMEOUT="1", ENGRAM_HOME=str(tmp_path))
    env.update(extra)
    proc = subprocess.run(
        [sys.executable, "-m", "actors.cli", "serve"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"engram: configuration error: {missing}: ")
    assert proc.stdout == ""


@pytest.mark.slow
async def test_serve_purges_messages_compacted_past_the_retention(
    tmp_path: Path, database_url: str, db: dbmod.Database
) -> None:
    """``engram serve`` runs the purge job (its first pass at start): a message compacted more
    than MESSAGE_RETENTION_DAYS ago is deleted; a recently compacted one and an old uncompacted
    one stay."""
    ids = {}
    for name, age, compacted in (
        ("old_compacted", 9, True),
        ("recent_compacted", 2, True),
        ("old_uncompacted", 30, False),
    ):
        ids[name] = await db.fetchval(
            "INSERT INTO chat_messages (chat_id, role, content, created_at, compacted_at)"
            " VALUES (77, 'user', $1, now() - make_interval(days => $2),"
            " CASE WHEN $3 THEN now() - make_interval(days => $2) END) RETURNING id",
            name,
            age,
            compacted,
        )
    port = _free_port()
    env = _env(
        DATABASE_URL=database_url,
        ENGRAM_PORT=str(port),
        ENGRAM_HOME=str(tmp_path),
        MESSAGE_RETENTION_DAYS="7",
    )
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "actors.cli", "serve"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with trio.fail_after(60):
            while await db.fetchval(
                "SELECT count(*) FROM chat_messages WHERE id = $1", ids["old_compacted"]
            ):
                assert proc.returncode is None, "engram serve exited"
                await trio.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(20):
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    left = {r["id"] for r in await db.fetch("SELECT id FROM chat_messages")}
    assert left == {ids["recent_compacted"], ids["old_uncompacted"]}
