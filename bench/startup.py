"""Start-up time of ``engram serve`` from outside, with the embedded PostgreSQL already initialised.

A first run prepares ``ENGRAM_HOME`` (initdb, migrations) and stops. Then, per run: an update
is left open in the inbox (written with the server started and stopped again by this script,
so engram finds the server stopped, as after a reboot), ``engram serve`` (webhook mode) is
started against the fake Bot API and an echo model (``tests/fakes``), and the bench times

* ``ready_s``: process start to ``GET /readyz`` 200;
* ``first_reply_s``: process start to the fake Bot API reading the recovered update's reply;

and, separately, the wall time of ``engram --help``. Each figure is the median of ``--runs``.

    python bench/startup.py [--runs 5] [--smoke]

Last line: ``startup ready_s=<x> first_reply_s=<y> help_s=<z>``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import structlog
import trio

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from _smoke import add_smoke_flag, shrink  # noqa: E402
from engram_outside import (  # noqa: E402
    Engram,
    answered_ids,
    free_port,
    run_echo_anthropic,
    serve_env,
    update_body,
)
from fakes.bot_api import FakeBotApi, run_fake_bot_api  # noqa: E402

from actors.queues import inbox  # noqa: E402
from runtime import db as dbmod  # noqa: E402
from runtime.embedded_pg import embedded_postgres  # noqa: E402

CHAT = 777001


async def leave_open_update(home: Path, update_id: int) -> None:
    """The update in the inbox, unprocessed, and the embedded server stopped again."""
    body = update_body(update_id, chat=CHAT)
    async with (
        dbmod.asyncio_loop(),
        embedded_postgres(home, shared_buffers="128MB") as url,
        dbmod.open_database(url, max_size=1) as db,
    ):
        await inbox.insert_update(db, f"update:{update_id}", update_id, CHAT, "message", body)


async def first_reply(fake: FakeBotApi, update_id: int, started: float, limit: float) -> float:
    with trio.fail_after(limit):
        while True:
            for message in fake.sent.get(CHAT, []):
                if update_id in answered_ids(message.text):
                    return time.monotonic() - started
            await trio.sleep(0.002)


def help_wall_time() -> float:
    start = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "actors.cli", "--help"],
        cwd=REPO,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.monotonic() - start


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


async def main(runs: int) -> None:
    home = Path(tempfile.mkdtemp(prefix="engram-startup-"))
    work = home / "work"
    work.mkdir()
    try:
        async with run_fake_bot_api() as fake, run_echo_anthropic() as model:
            port = free_port()
            env = serve_env(
                home, bot_api=fake.base_url, model=model.base_url, port=port, chats=[CHAT]
            )
            engram = Engram(env, work / "engram.log", cwd=work)
            await engram.start()
            print(f"first run (initdb, migrations): ready in {await engram.wait_ready(120):.2f} s")
            await engram.stop()
            ready, replies = [], []
            for run in range(1, runs + 1):
                update_id = 1000 + run
                await leave_open_update(home, update_id)
                await engram.start()
                started = engram.started_at
                ready_s = await engram.wait_ready(60)
                reply_s = await first_reply(fake, update_id, started, 60)
                code = await engram.stop()
                ready.append(ready_s)
                replies.append(reply_s)
                print(
                    f"run {run}: ready {ready_s:.3f} s, first recovered reply {reply_s:.3f} s"
                    f" (exit {code}; load {load_average()})"
                )
    finally:
        shutil.rmtree(home, ignore_errors=True)
    helps = [help_wall_time() for _ in range(runs)]
    print("engram --help: " + ", ".join(f"{h:.3f}" for h in helps) + " s")
    print(
        f"startup ready_s={statistics.median(ready):.3f} "
        f"first_reply_s={statistics.median(replies):.3f} help_s={statistics.median(helps):.3f}"
    )


if __name__ == "__main__":
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))  # warnings up
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    add_smoke_flag(parser)
    args = parser.parse_args()
    shrink(parser, args, runs=1)
    trio.run(main, args.runs)
