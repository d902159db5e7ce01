"""The crash test, reduced (``bench/crash.py``: 3 kills, 60 updates over 6 chats, PostgreSQL
stopped and crashed, the Bot API rate-limited then down for 10 s): every promise holds —
nothing lost but visibly uncertain, nothing sent twice, nothing skipped, nothing left open."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from crash import Config, run_all, summary


@pytest.mark.slow
async def test_reduced_crash_bench_meets_every_goal() -> None:
    results = await run_all(
        Config(updates=60, chats=6, kills=3, outage=10.0, settle=120.0, quiet=True)
    )
    print(summary(results))
    assert [r.scenario for r in results] == ["a", "b", "c"]
    for r in results:
        assert r.acked == r.updates == 60, r.line()
        assert r.lost == 0, r.line()
        assert r.duplicated == 0, r.line()
        assert r.skipped == 0, r.line()
        assert r.stuck == 0, r.line()
        assert r.uncertain <= r.in_flight, r.line()
        assert r.exits == 0, r.line()  # outages are waited out, never escalated
        assert r.met
