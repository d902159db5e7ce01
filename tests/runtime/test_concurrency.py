"""runtime.concurrency.both: two results, the first error as is, the sibling cancelled."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from runtime.concurrency import both


async def test_both_results_come_back_in_order(autojump_clock: Any) -> None:
    order: list[str] = []

    async def slow() -> str:
        await trio.sleep(2)
        order.append("slow")
        return "first"

    async def fast() -> int:
        await trio.sleep(1)
        order.append("fast")
        return 2

    start = trio.current_time()
    assert await both(slow, fast) == ("first", 2)
    assert order == ["fast", "slow"] and trio.current_time() - start == 2  # concurrent


async def test_the_first_error_is_raised_as_is_and_the_other_cancelled(
    autojump_clock: Any,
) -> None:
    finished: list[str] = []

    async def boom() -> None:
        await trio.sleep(1)
        raise KeyError("gone")

    async def long() -> None:
        await trio.sleep(100)
        finished.append("long")

    start = trio.current_time()
    with pytest.raises(KeyError, match="gone"):
        await both(long, boom)
    assert finished == [] and trio.current_time() - start == 1


async def test_cancellation_from_outside_propagates(autojump_clock: Any) -> None:
    async def nap() -> None:
        await trio.sleep(100)

    with trio.move_on_after(1) as scope:
        await both(nap, nap)
    assert scope.cancelled_caught
