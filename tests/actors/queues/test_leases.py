"""ChatLeases and run_exclusive on trio's MockClock, over leases kept in memory (expiry on the
same clock): renewal each third of the ttl, release of chats idle here, a lost or unrenewable
lease no longer trusted, one job runner per name and a takeover when the holder goes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from functools import partial

import attrs
import trio
import trio.testing

from actors.queues.exclusive import run_exclusive
from actors.queues.lease_store import Acquired
from actors.queues.leases import ChatLeases
from runtime.errors import DatabaseUnavailable


@attrs.define
class MemoryLeases:
    """Leases of several runs in one dict, expiring on trio's clock."""

    rows: dict[object, tuple[str, float]] = attrs.field(factory=dict)
    down: bool = False
    renewals: int = 0
    acquires: int = 0

    def view(self, run: str) -> RunLeases:
        return RunLeases(self, run)

    def free(self, key: object, run: str) -> bool:
        row = self.rows.get(key)
        return row is None or row[0] == run or row[1] <= trio.current_time()


@attrs.define
class RunLeases:
    shared: MemoryLeases
    run: str

    def _check(self) -> None:
        if self.shared.down:
            raise DatabaseUnavailable("down")

    async def acquire(self, chat_id: int, ttl: float) -> Acquired:
        self._check()
        self.shared.acquires += 1
        await trio.sleep(0.01)
        if not self.shared.free(chat_id, self.run):
            return Acquired(False, holder=self.shared.rows[chat_id][0])
        fresh = self.shared.rows.get(chat_id, ("", 0.0))[0] != self.run
        self.shared.rows[chat_id] = (self.run, trio.current_time() + ttl)
        return Acquired(True, fresh, holder=self.run)

    async def renew(self, chat_ids: Iterable[int], ttl: float) -> set[int]:
        self._check()
        await trio.lowlevel.checkpoint()
        self.shared.renewals += 1
        mine = {c for c in chat_ids if self.shared.rows.get(c, ("", 0.0))[0] == self.run}
        for c in mine:
            self.shared.rows[c] = (self.run, trio.current_time() + ttl)
        return mine

    async def release(self, chat_ids: Sequence[int]) -> int:
        self._check()
        await trio.sleep(0.01)  # a release takes a moment: a hold meanwhile waits for it
        gone = [c for c in chat_ids if self.shared.rows.get(c, ("", 0.0))[0] == self.run]
        for c in gone:
            del self.shared.rows[c]
        return len(gone)

    async def acquire_named(self, name: str, ttl: float) -> bool:
        self._check()
        await trio.lowlevel.checkpoint()
        if not self.shared.free(name, self.run):
            return False
        self.shared.rows[name] = (self.run, trio.current_time() + ttl)
        return True

    async def release_named(self, name: str) -> None:
        if self.shared.rows.get(name, ("", 0.0))[0] == self.run:
            del self.shared.rows[name]


def exclusive(
    leases: RunLeases,
    name: str,
    job: Callable[..., Awaitable[None]],
    stop: trio.Event | None = None,
) -> Callable[..., Awaitable[None]]:
    return partial(run_exclusive, leases, name, 9, job, stop=stop)


async def test_renewed_while_used_released_when_idle(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shared = MemoryLeases()
    busy: set[int] = {1}
    taken: list[int] = []
    leases = ChatLeases(shared.view("a"), ttl=9, busy=busy.__contains__, on_taken=taken.append)
    async with trio.open_nursery() as nursery:
        await nursery.start(leases.run)
        assert await leases.hold(1) and await leases.hold(2)
        assert taken == [1, 2]
        assert await leases.hold(1)  # held: no second takeover
        assert taken == [1, 2]
        await trio.sleep(3.5)
        assert shared.renewals == 1  # each third of the ttl
        await trio.sleep(9)  # chat 2 unused for a ttl and not busy: released
        assert leases.held() == [1] and 2 not in shared.rows
        await trio.sleep(60)  # chat 1 busy (its actor lives): kept, renewed
        assert leases.holds(1) and shared.rows[1][1] > trio.current_time()
        busy.clear()
        await trio.sleep(9 + 3)
        assert leases.held() == [] and shared.rows == {}
        nursery.cancel_scope.cancel()


async def test_another_process_is_refused_until_expiry(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shared = MemoryLeases()
    a = ChatLeases(shared.view("a"), ttl=9, busy=lambda _c: True)
    b = ChatLeases(shared.view("b"), ttl=9, busy=lambda _c: True)
    async with trio.open_nursery() as nursery:
        await nursery.start(a.run)
        assert await a.hold(5)
        assert not await b.hold(5)
        await trio.sleep(30)  # a renews: b stays out
        assert not await b.hold(5)
        nursery.cancel_scope.cancel()  # a dies: its lease runs out
    started = trio.current_time()
    while not await b.hold(5):  # noqa: ASYNC110 - polling the (fake) database
        await trio.sleep(0.5)
    assert trio.current_time() - started <= 9 + 0.5 + 0.1  # its expiry, then one more try


async def test_a_lost_or_unrenewable_lease_is_not_trusted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shared = MemoryLeases()
    a = ChatLeases(shared.view("a"), ttl=9, busy=lambda _c: True)
    async with trio.open_nursery() as nursery:
        await nursery.start(a.run)
        assert await a.hold(5)
        shared.down = True  # renewals fail: trusted for 0.8 of the ttl, then not
        await trio.sleep(7)
        assert a.holds(5)
        await trio.sleep(0.3)
        assert not a.holds(5)
        shared.down = False
        shared.rows[5] = ("b", trio.current_time() + 100)  # meanwhile another took it
        await trio.sleep(3.1)  # the next renewal finds it gone
        assert a.held() == []
        assert not await a.hold(5)
        nursery.cancel_scope.cancel()


async def test_a_hold_during_a_release_waits_for_it(autojump_clock: trio.testing.MockClock) -> None:
    shared = MemoryLeases()
    a = ChatLeases(shared.view("a"), ttl=9)
    assert await a.hold(5)
    await trio.sleep(10)
    got: list[bool] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(a.tick)  # releases chat 5 (idle), which takes 0.01 s
        await trio.sleep(0.001)
        nursery.start_soon(lambda: _hold(a, 5, got))
    assert got == [True] and shared.rows[5][0] == "a"  # re-taken after the delete, not before


async def _hold(leases: ChatLeases, chat_id: int, out: list[bool]) -> None:
    out.append(await leases.hold(chat_id))


async def test_release_all_lets_go_and_takes_no_more(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shared = MemoryLeases()
    a = ChatLeases(shared.view("a"), ttl=9, busy=lambda _c: True)
    for chat_id in (1, 2, 3):
        assert await a.hold(chat_id)
    await a.release_all()
    assert shared.rows == {} and a.held() == []
    assert not await a.hold(4)


async def test_one_runner_per_name_and_a_takeover(autojump_clock: trio.testing.MockClock) -> None:
    shared = MemoryLeases()
    running: list[str] = []

    def job(who: str) -> Callable[..., Awaitable[None]]:
        async def run(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            running.append(who)
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                running.remove(who)

        return run

    async with trio.open_nursery() as outer:
        async with trio.open_nursery() as first:
            await first.start(exclusive(shared.view("a"), "jobs", job("a")))
            await outer.start(exclusive(shared.view("b"), "jobs", job("b")))
            await trio.sleep(60)
            assert running == ["a"]
            first.cancel_scope.cancel()  # a stops: its lease is released on the way out
        await trio.sleep(9 / 2 + 0.1)
        assert running == ["b"]
        outer.cancel_scope.cancel()


async def test_standing_by_ends_when_stopped(autojump_clock: trio.testing.MockClock) -> None:
    shared = MemoryLeases()
    shared.rows["poller"] = ("a", 10_000.0)
    stop = trio.Event()

    async def never(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        raise AssertionError("b must not poll while a holds the lease")

    async with trio.open_nursery() as nursery:
        await nursery.start(exclusive(shared.view("b"), "poller", never, stop))
        await trio.sleep(30)
        stop.set()
    assert shared.rows["poller"][0] == "a"


async def test_concurrent_holds_of_one_chat_take_it_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shared = MemoryLeases()
    taken: list[int] = []
    a = ChatLeases(shared.view("a"), ttl=9, on_taken=taken.append)
    got: list[bool] = []
    async with trio.open_nursery() as nursery:
        for _ in range(3):  # the router and the sender at once
            nursery.start_soon(_hold, a, 5, got)
    assert got == [True, True, True]
    assert shared.acquires == 1 and taken == [5]  # one statement, one takeover
