"""A slow-loris against a running ``engram serve``: hundreds of idle connections, some stuck in
the middle of their headers, must neither exhaust the process's descriptors nor stop it from
serving; idle ones are closed after HTTP_IDLE_TIMEOUT."""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import socket
from pathlib import Path

import httpx
import pytest
import trio
from engram_outside import Engram, free_port, post_update, serve_env, update_body
from fakes.bot_api import run_fake_bot_api

from runtime.http_server import connection_cap

CAP = 64
DESCRIPTORS = 256  # the server's own limit: without the cap, 400 sockets would exhaust it
ATTACKERS = 300
IDLE = 2.0
CHAT = 424242


def _descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _limit_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (DESCRIPTORS, DESCRIPTORS))


def _closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError as exc:  # reset
        return exc.errno in (errno.ECONNRESET, errno.EPIPE)


def test_connection_cap_fits_the_descriptor_limit() -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert connection_cap(10) == 10
    assert connection_cap(10**9) == max(8, soft - 128)


@pytest.mark.slow
async def test_slow_loris_neither_exhausts_descriptors_nor_stops_the_server(
    tmp_path: Path, database_url: str
) -> None:
    async with run_fake_bot_api() as bot_api:
        port = free_port()
        env = serve_env(
            tmp_path,
            bot_api=bot_api.base_url,
            model="http://127.0.0.1:9",
            port=port,
            chats=[CHAT],
            DATABASE_URL=database_url,
            HTTP_MAX_CONNECTIONS=str(CAP),
            HTTP_IDLE_TIMEOUT=str(IDLE),
        )
        engram = Engram(env, tmp_path / "engram.log")
        engram.preexec = _limit_descriptors
        await engram.start()
        attackers: list[socket.socket] = []
        try:
            await engram.wait_ready()
            assert engram.proc is not None
            pid = engram.proc.pid
            baseline = _descriptors(pid)
            for i in range(ATTACKERS):
                sock = socket.socket()
                sock.setblocking(False)
                sock.connect_ex(("127.0.0.1", port))
                attackers.append(sock)
                if i % 2:  # the classic slow loris: a request line and one header, then nothing
                    await trio.lowlevel.checkpoint()
                    with contextlib.suppress(OSError):
                        sock.send(b"POST /api/telegram HTTP/1.1\r\nHost: x\r\n")
            peak = 0
            for _ in range(int(IDLE / 0.1)):  # while the first attackers are held
                peak = max(peak, _descriptors(pid))
                await trio.sleep(0.1)
            async with httpx.AsyncClient(timeout=60) as client:
                # served once idle attackers are closed and the queue ahead has drained
                health = await client.get(f"http://127.0.0.1:{port}/healthz")
                # the database still gets descriptors: an update is stored (and acknowledged)
                stored = await post_update(client, port, update_body(1, chat=CHAT))
            closed = sum(_closed_by_server(s) for s in attackers)
            assert health.status_code == 200
            assert stored == 200
            assert engram.running
            assert peak <= baseline + CAP + 8, (baseline, peak)
            # every connection the server accepted sat idle and was closed after IDLE seconds
            assert closed >= CAP
        finally:
            for sock in attackers:
                sock.close()
            if engram.running:
                await engram.stop()
    assert "http.accept_failed" not in (tmp_path / "engram.log").read_text()
