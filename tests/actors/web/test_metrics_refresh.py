"""The /metrics gauges' reading of the database (:class:`actors.web.metrics.Refresher`)."""

from __future__ import annotations

from typing import cast

import pytest
import trio
import trio.testing

from actors.web.metrics import Refresher
from runtime import metrics
from runtime.db import Queries


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def test_a_flood_of_scrapes_reads_the_database_once_a_second(
    autojump_clock: trio.testing.MockClock,
) -> None:
    class Counting:
        fetches = 0

        async def fetch(self, query: str, *args: object) -> list[dict[str, object]]:
            self.fetches += 1
            await trio.sleep(0.2)  # a slow count over every chat's rows
            return [{"q": "inbox", "status": "pending", "n": 3}]

    db = Counting()
    refresher = Refresher(cast(Queries, db), every=1.0)
    async with trio.open_nursery() as nursery:
        for _ in range(50):  # at once: one reading, the rest wait for it
            nursery.start_soon(refresher)
    assert db.fetches == 1
    await trio.sleep(0.5)
    await refresher()
    assert db.fetches == 1  # within the second: the last reading stands
    await trio.sleep(1.0)
    await refresher()
    assert db.fetches == 2
    assert metrics.INBOX_DEPTH.labels("pending")._value.get() == 3
