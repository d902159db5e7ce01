"""The embedded server's tuning: ``shared_buffers`` applied on start, deferred while shared."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import trio

from runtime import db as dbmod
from runtime.embedded_pg import HOLDERS_FILE, _psql_value, embedded_postgres, tune
from runtime.errors import DatabaseUnavailable, SettingsError
from runtime.process_settings import ProcessSettings
from runtime.settings import load_settings


async def _shared_buffers(url: str) -> str:
    async with dbmod.asyncio_loop(), dbmod.open_database(url, max_size=1) as db:
        return str(await db.fetchval("SHOW shared_buffers"))


@pytest.mark.slow
async def test_fresh_server_runs_with_the_configured_shared_buffers(tmp_path: Path) -> None:
    async with embedded_postgres(tmp_path, "engram", shared_buffers="160MB") as url:
        assert await _shared_buffers(url) == "160MB"
    # a later start with another value restarts the server (this process is its only holder)
    async with embedded_postgres(tmp_path, "engram", shared_buffers="176MB") as url:
        assert await _shared_buffers(url) == "176MB"
    assert not (tmp_path / "postgres" / "postmaster.pid").exists()  # stopped on release


@pytest.mark.slow
def test_tuning_waits_for_the_next_start_while_another_process_holds_the_server(
    tmp_path: Path,
) -> None:
    import pgserver

    pgdata = tmp_path / "pg"
    server = pgserver.get_server(pgdata, cleanup_mode="stop")  # type: ignore[attr-defined]
    other = 2**22 + 12345  # a pid that is not ours: another engram process sharing the server
    server.global_process_id_list.get_and_add(other)
    try:
        assert tune(server, "144MB") is False
        assert _psql_value(server, "SHOW shared_buffers;") == "128MB"  # not restarted
        assert "144MB" in (pgdata / "postgresql.auto.conf").read_text()
        server.global_process_id_list.get_and_remove(other)
        assert tune(server, "144MB") is True
        assert _psql_value(server, "SHOW shared_buffers;") == "144MB"
        assert tune(server, "144MB") is True  # already so: nothing to do
    finally:
        server.global_process_id_list.get_and_remove(other)
        server.cleanup()
    assert server.global_process_id_list.get() == []


@pytest.mark.parametrize("raw", ["lots", "1 G", "64kB", "2PB", "-1MB"])
def test_a_bad_size_names_the_setting(raw: str) -> None:
    with pytest.raises(SettingsError, match="EMBEDDED_PG_SHARED_BUFFERS"):
        load_settings(ProcessSettings, {"EMBEDDED_PG_SHARED_BUFFERS": raw})


def test_sizes_in_postgres_units_are_accepted() -> None:
    assert load_settings(ProcessSettings, {}).embedded_pg_shared_buffers == "1GB"
    settings = load_settings(ProcessSettings, {"EMBEDDED_PG_SHARED_BUFFERS": " 512MB "})
    assert settings.embedded_pg_shared_buffers == "512MB"


@pytest.mark.slow
async def test_trio_is_not_blocked_while_the_server_starts(tmp_path: Path) -> None:
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.sleep(0.01)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(tick)
        async with embedded_postgres(tmp_path, "engram", shared_buffers="160MB"):
            pass
        nursery.cancel_scope.cancel()
    assert ticks > 5


@pytest.mark.slow
async def test_a_value_the_server_cannot_start_with_is_reported_and_replaceable(
    tmp_path: Path,
) -> None:
    async with embedded_postgres(tmp_path, "engram", shared_buffers="160MB"):
        pass
    with pytest.raises(DatabaseUnavailable, match="EMBEDDED_PG_SHARED_BUFFERS"):
        async with embedded_postgres(tmp_path, "engram", shared_buffers="900GB"):
            pass  # more than this machine can map: the server refuses to start
    # lowering the setting is enough: the stopped cluster gets the new value before it starts
    async with embedded_postgres(tmp_path, "engram", shared_buffers="176MB") as url:
        assert await _shared_buffers(url) == "176MB"


@pytest.mark.slow
def test_a_failed_restart_takes_the_value_back(tmp_path: Path) -> None:
    import pgserver

    pgdata = tmp_path / "pg"
    server = pgserver.get_server(pgdata, cleanup_mode="stop")  # type: ignore[attr-defined]
    try:
        with pytest.raises(DatabaseUnavailable, match=r"900GB.*it runs with 128MB"):
            tune(server, "900GB")
        assert _psql_value(server, "SHOW shared_buffers;") == "128MB"  # running again
    finally:
        server.cleanup()


@pytest.mark.slow
async def test_a_holder_that_died_does_not_keep_the_server_running(tmp_path: Path) -> None:
    """An engram process killed while holding the server never releases it; the next start
    drops it from the holders, so that process's exit still stops the server."""
    pgdata = tmp_path / "postgres"
    done = await trio.run_process(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_stdout=True
    )
    dead = int(done.stdout)
    async with embedded_postgres(tmp_path, "engram", shared_buffers="128MB"):
        holders = pgdata / HOLDERS_FILE
        holders.write_text(json.dumps([*json.loads(holders.read_text()), dead]))
    # released, but the dead "holder" is still listed: the server runs on
    assert (pgdata / "postmaster.pid").exists()
    assert json.loads((pgdata / HOLDERS_FILE).read_text()) == [dead]
    async with embedded_postgres(tmp_path, "engram", shared_buffers="128MB") as url:
        assert await _shared_buffers(url) == "128MB"
        assert dead not in json.loads((pgdata / HOLDERS_FILE).read_text())
    assert not (pgdata / "postmaster.pid").exists()  # the last live holder stopped it
