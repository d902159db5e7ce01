"""Phased shutdown: intake stop, drain, hard deadline, signals."""

from __future__ import annotations

import os
import signal

import attrs
import trio
import trio.testing

from runtime.registry import Registry
from runtime.shutdown import Shutdown


@attrs.frozen
class Job:
    seconds: float  # < 0: stuck forever


@attrs.define
class Worker:
    events: list[tuple[str, float, float]]

    async def handle(self, job: Job) -> None:
        try:
            if job.seconds < 0:
                await trio.sleep_forever()
            await trio.sleep(job.seconds)
        except trio.Cancelled:
            self.events.append(("cancelled", job.seconds, trio.current_time()))
            raise
        self.events.append(("done", job.seconds, trio.current_time()))


async def _system(
    shutdown: Shutdown, root: trio.Nursery, events: list[tuple[str, float, float]]
) -> Registry[int, Job]:
    await root.start(shutdown.run, root.cancel_scope)
    registry = Registry[int, Job]("workers", lambda key: Worker(events), idle_timeout=1000.0)
    await root.start(registry.run)
    shutdown.add_drain("workers", registry.aclose)
    return registry


async def test_drain_finishes_in_hand_and_buffered(autojump_clock: trio.abc.Clock) -> None:
    events: list[tuple[str, float, float]] = []
    shutdown = Shutdown(deadline=30.0, signals=())
    intake_seen_at: list[float] = []
    async with trio.open_nursery() as root:
        registry = await _system(shutdown, root, events)

        async def intake() -> None:  # stands for the HTTP server / poller
            await shutdown.intake_stopped.wait()
            intake_seen_at.append(trio.current_time())

        root.start_soon(intake)
        for seconds in (2.0, 1.0, 0.5):
            await registry.send(1, Job(seconds))
        await registry.send(2, Job(4.0))
        await trio.sleep(0.5)  # key 1 has a job in hand and two buffered
        shutdown.request_stop()
    assert shutdown.done.is_set()
    assert intake_seen_at == [0.5]
    assert sorted(events) == [
        ("done", 0.5, 3.5),
        ("done", 1.0, 3.0),
        ("done", 2.0, 2.0),
        ("done", 4.0, 4.0),
    ]
    assert trio.current_time() == 4.0  # finished as soon as drained, long before the deadline
    assert shutdown.clean
    assert shutdown.exit_code == 0


async def test_deadline_cancels_stuck_handler(autojump_clock: trio.abc.Clock) -> None:
    events: list[tuple[str, float, float]] = []
    shutdown = Shutdown(deadline=5.0, signals=())
    async with trio.open_nursery() as root:
        registry = await _system(shutdown, root, events)
        await registry.send(1, Job(-1.0))
        await registry.send(1, Job(1.0))  # buffered behind the stuck job: never runs
        await registry.send(2, Job(2.0))
        await trio.sleep(1.0)
        shutdown.request_stop()
    assert events == [("done", 2.0, 2.0), ("cancelled", -1.0, 6.0)]
    assert trio.current_time() == 6.0  # stop at 1.0 + deadline 5.0
    assert not shutdown.clean
    assert shutdown.exit_code == 1


async def test_failing_drain_is_not_clean(autojump_clock: trio.abc.Clock) -> None:
    shutdown = Shutdown(deadline=5.0, signals=())
    ran: list[str] = []

    async def broken() -> None:
        await trio.lowlevel.checkpoint()
        raise RuntimeError("drain failed")

    async def fine() -> None:
        await trio.sleep(1.0)
        ran.append("fine")

    async with trio.open_nursery() as root:
        await root.start(shutdown.run, root.cancel_scope)
        shutdown.add_drain("broken", broken)
        shutdown.add_drain("fine", fine)
        shutdown.request_stop()
    assert ran == ["fine"]  # later drains still run
    assert shutdown.exit_code == 1


async def test_sigterm_starts_shutdown_and_second_signal_forces(
    autojump_clock: trio.abc.Clock,
) -> None:
    events: list[tuple[str, float, float]] = []
    shutdown = Shutdown(deadline=60.0, signals=(signal.SIGTERM,))
    async with trio.open_nursery() as root:
        registry = await _system(shutdown, root, events)
        await registry.send(1, Job(-1.0))
        await trio.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)
        await shutdown.intake_stopped.wait()
        assert shutdown.stop.is_set()
        await trio.sleep(2.0)
        assert events == []  # still draining: the job is stuck
        os.kill(os.getpid(), signal.SIGTERM)
    assert events == [("cancelled", -1.0, 3.0)]  # forced at 3.0, not at the 61.0 deadline
    assert shutdown.exit_code == 1


async def test_sigterm_clean_exit() -> None:
    shutdown = Shutdown(deadline=5.0, signals=(signal.SIGINT, signal.SIGTERM))
    async with trio.open_nursery() as root:
        await root.start(shutdown.run, root.cancel_scope)
        os.kill(os.getpid(), signal.SIGTERM)
        await trio.sleep_forever()  # cancelled by the coordinator
    assert shutdown.exit_code == 0
