"""Three ``engram serve`` processes on one PostgreSQL behind a round-robin proxy (issue 26,
``bench/replicas.py`` reduced): 30 chats × 3 messages, one process SIGKILLed and one SIGTERMed
mid-run, CHAT_LEASE_TTL 3 s. Every update answered once, each chat's replies in order, no turn
run twice, no lease left once the processes stopped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from fakes.recording import run_recording_bot, run_recording_model
from replicas_outside import (
    Cluster,
    Load,
    check,
    exits,
    play_faults,
    settle,
)

from runtime import db as dbmod

CHATS = [600_000 + i for i in range(30)]
TTL = 3


@pytest.mark.slow
async def test_three_processes_answer_every_update_once_in_order_through_a_kill_and_a_stop(
    database_url: str, tmp_path: Path
) -> None:
    out: dict[str, Any] = {}
    async with (
        run_recording_bot() as bot,
        run_recording_model() as model,
        dbmod.asyncio_loop(),
        dbmod.open_database(database_url, max_size=2) as db,
        Cluster(
            tmp_path,
            3,
            bot=bot,
            model=model,
            url=database_url,
            chats=CHATS,
            CHAT_LEASE_TTL=str(TTL),
        ) as cluster,
    ):
        load = Load(cluster, bot, CHATS, 3, reply_wait=2.0)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(play_faults, cluster, load, db, out)
            await load.run()
            await settle(load, db, 30)
            nursery.cancel_scope.cancel()
        await cluster.stop_all()
        checks = await check(load, model, db, exits(out))
    print(checks.line())
    assert "kill" in out and "term" in out  # both faults played mid-run
    assert checks.acked == checks.updates == 90, checks.line()
    assert checks.unanswered == 0, checks.line()
    assert checks.duplicated == 0, checks.line()
    assert checks.out_of_order == 0, checks.line()
    assert checks.turns_twice == checks.rerun_cut_off, checks.line()  # died with its process
    assert checks.rerun_cut_off <= 3, checks.line()
    assert checks.leases == 0, checks.line()
