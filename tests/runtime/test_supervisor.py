"""One-for-one supervision: backoff timing, escalation, normal exit, stable addresses."""

from __future__ import annotations

import itertools

import attrs
import pytest
import trio
import trio.testing

from runtime.actor import Address, Mailbox, serve
from runtime.errors import (
    ActorStopped,
    DatabaseOutage,
    DatabaseUnavailable,
    EscalationError,
    QueryError,
)
from runtime.supervisor import RestartPolicy, is_database_outage, supervise


@attrs.define
class Flaky:
    """A child that crashes the first ``crashes`` times it starts, then returns normally."""

    crashes: int
    starts: list[float] = attrs.field(factory=list)

    async def start(self, *, task_status: trio.TaskStatus[None]) -> None:
        self.starts.append(trio.current_time())
        task_status.started()
        await trio.lowlevel.checkpoint()
        if len(self.starts) <= self.crashes:
            raise RuntimeError(f"crash {len(self.starts)}")


def _gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


def test_backoff_is_exponential_and_capped() -> None:
    policy = RestartPolicy(backoff_base=0.5, backoff_cap=3.0)
    assert [policy.backoff(n) for n in range(6)] == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]
    assert policy.backoff(10_000) == 3.0


async def test_restart_times_follow_backoff(autojump_clock: trio.abc.Clock) -> None:
    child = Flaky(crashes=6)
    policy = RestartPolicy(backoff_base=1.0, backoff_cap=10.0, max_restarts=10, window=1000.0)
    await supervise("flaky", child.start, policy)
    # six crashes -> six restarts, after 1, 2, 4, 8, 10 (capped), 10 seconds
    assert _gaps(child.starts) == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    # the seventh start returned normally and was not restarted
    assert len(child.starts) == 7


async def test_normal_return_is_not_restarted(autojump_clock: trio.abc.Clock) -> None:
    child = Flaky(crashes=0)
    await supervise("calm", child.start, RestartPolicy())
    assert child.starts == [0.0]


async def test_escalates_past_restart_limit(autojump_clock: trio.abc.Clock) -> None:
    child = Flaky(crashes=100)
    sibling_cancelled = trio.Event()

    async def sibling() -> None:
        try:
            await trio.sleep_forever()
        finally:
            sibling_cancelled.set()

    policy = RestartPolicy(backoff_base=1.0, backoff_cap=60.0, max_restarts=3, window=100.0)
    with pytest.RaisesGroup(EscalationError) as info:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sibling)
            await nursery.start(supervise, "doomed", child.start, policy)
    # crash at 0 -> restart at 1 -> crash -> restart at 3 -> crash -> restart at 7 -> crash #4
    assert child.starts == [0.0, 1.0, 3.0, 7.0]
    error = info.value.exceptions[0]
    assert isinstance(error, EscalationError)
    assert error.actor_name == "doomed"
    assert error.restarts == 4
    assert isinstance(error.__cause__, RuntimeError)
    assert sibling_cancelled.is_set()


async def test_crashes_outside_the_window_do_not_escalate(
    autojump_clock: trio.abc.Clock,
) -> None:
    child = Flaky(crashes=5)
    # backoff 10 s is longer than the 5 s window: never more than one crash inside it
    policy = RestartPolicy(backoff_base=10.0, backoff_cap=10.0, max_restarts=1, window=5.0)
    await supervise("slow-flaky", child.start, policy)
    assert len(child.starts) == 6


async def test_cancellation_is_not_a_crash(autojump_clock: trio.abc.Clock) -> None:
    starts: list[float] = []

    async def forever(*, task_status: trio.TaskStatus[None]) -> None:
        starts.append(trio.current_time())
        task_status.started()
        await trio.sleep_forever()

    with trio.move_on_after(5.0):
        await supervise("forever", forever, RestartPolicy())
    assert starts == [0.0]


@attrs.frozen
class Cmd:
    text: str


async def test_address_is_repointed_after_restart(autojump_clock: trio.abc.Clock) -> None:
    handled: list[tuple[int, str]] = []
    incarnations = 0

    async def start_child(*, task_status: trio.TaskStatus[Address[Cmd]]) -> None:
        nonlocal incarnations
        incarnations += 1
        me = incarnations
        box = Mailbox[Cmd](f"child-{me}", 8)

        async def handle(cmd: Cmd) -> None:
            await trio.lowlevel.checkpoint()
            if cmd.text == "boom":
                raise RuntimeError("boom")
            handled.append((me, cmd.text))

        with box.inbox as inbox:
            task_status.started(box.address)
            await serve(inbox, handle)

    policy = RestartPolicy(backoff_base=2.0, backoff_cap=2.0, max_restarts=5, window=60.0)
    async with trio.open_nursery() as nursery:
        address = await nursery.start(supervise, "child", start_child, policy)
        await address.send(Cmd("one"))
        await address.send(Cmd("boom"))
        await trio.sleep(1.0)  # crashed, in backoff: the old mailbox is gone
        with pytest.raises(ActorStopped):
            address.send_nowait(Cmd("lost"))
        await trio.sleep(1.5)  # restarted at t=2
        await address.send(Cmd("two"))
        await trio.sleep(0.5)
        address.close()
    assert handled == [(1, "one"), (2, "two")]


@attrs.define
class DbFlaky:
    """A child whose first ``outages`` starts fail on an unreachable database (alone or in a
    group), then one start fails with a bug, then it returns."""

    outages: int
    starts: list[float] = attrs.field(factory=list)

    async def start(self, *, task_status: trio.TaskStatus[None]) -> None:
        self.starts.append(trio.current_time())
        task_status.started()
        await trio.lowlevel.checkpoint()
        n = len(self.starts)
        if n <= self.outages:
            lost = DatabaseUnavailable("connection lost")
            raise lost if n % 2 else ExceptionGroup("two tasks", [lost, DatabaseUnavailable("x")])
        if n == self.outages + 1:
            raise RuntimeError("a real bug")


async def test_database_outages_are_restarted_without_charge(
    autojump_clock: trio.abc.Clock,
) -> None:
    child = DbFlaky(outages=12)
    policy = RestartPolicy(
        backoff_base=0.5, backoff_cap=30.0, max_restarts=1, window=1000.0, outage_backoff_cap=4.0
    )
    await supervise("sender", child.start, policy)  # 12 outages + 1 bug: no escalation
    gaps = _gaps(child.starts)
    # outage restarts double from the base, capped at the outage cap (not RESTART_BACKOFF_CAP)
    assert gaps[:12] == [0.5, 1.0, 2.0] + [4.0] * 9
    assert gaps[12] == 0.5  # the bug is the first charged crash: the budget's own backoff
    assert len(child.starts) == 14


async def test_a_mixed_crash_is_charged(autojump_clock: trio.abc.Clock) -> None:
    async def mixed(*, task_status: trio.TaskStatus[None]) -> None:
        task_status.started()
        await trio.lowlevel.checkpoint()
        raise ExceptionGroup("g", [DatabaseUnavailable("down"), RuntimeError("bug")])

    policy = RestartPolicy(backoff_base=0.1, backoff_cap=0.1, max_restarts=2, window=100.0)
    with pytest.RaisesGroup(EscalationError):
        async with trio.open_nursery() as nursery:
            await nursery.start(supervise, "mixed", mixed, policy)


def test_is_database_outage() -> None:
    assert is_database_outage(DatabaseUnavailable("x"))
    assert is_database_outage(ExceptionGroup("g", [ExceptionGroup("h", [DatabaseUnavailable("")])]))
    assert not is_database_outage(QueryError("syntax"))
    assert not is_database_outage(DatabaseOutage("database unreachable for 300 s"))
