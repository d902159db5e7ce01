"""The VaultWriter's timing on a MockClock (in-memory writes, no database): a chat is written
VAULT_DEBOUNCE after its first mark with every mark in between; a failing write is logged and
retried with backoff without reaching whoever marked; the sweep marks every chat at start;
the compactor marks a chat it compacted; VAULT=off builds no writer at all."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from actors.compactor import CompactorActor
from actors.settings import load_settings
from actors.vault.writer import VaultWriter, sql_vault_writer
from memory.compaction.run import CompactionOutcome


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


class Disk:
    """An in-memory write: when each chat was written; fails ``fail`` times first."""

    def __init__(self, fail: int = 0) -> None:
        self.writes: list[tuple[int, float]] = []
        self.fail = fail
        self.attempts = 0

    async def __call__(self, chat_id: int) -> None:
        self.attempts += 1
        await trio.sleep(0.01)  # the write takes a little while
        if self.fail:
            self.fail -= 1
            raise OSError(28, "No space left on device")
        self.writes.append((chat_id, trio.current_time()))


async def test_marks_within_the_debounce_are_written_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    disk = Disk()
    lags: list[float] = []
    writer = VaultWriter(disk, debounce=2.0, on_written=lambda c, lag: lags.append(lag))
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        start = trio.current_time()
        writer.mark(1)
        await trio.sleep(0.5)
        writer.mark(1)  # written with the first
        writer.mark(2)
        await trio.sleep(1.0)
        writer.mark(1)
        await trio.sleep(5)
        assert [c for c, _ in disk.writes] == [1, 2]
        assert disk.writes[0][1] == pytest.approx(start + 2.01)
        assert disk.writes[1][1] == pytest.approx(start + 2.5 + 0.01)  # its own debounce
        assert lags[0] == pytest.approx(2.01)
        writer.mark(1)  # a later change: written again
        await trio.sleep(3)
        assert [c for c, _ in disk.writes] == [1, 2, 1]
        nursery.cancel_scope.cancel()


async def test_a_mark_during_a_write_is_written_after_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    disk = Disk()
    writer = VaultWriter(disk, debounce=1.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        writer.mark(1)
        await trio.sleep(1.005)  # the write is in progress
        writer.mark(1)
        await trio.sleep(3)
        assert [c for c, _ in disk.writes] == [1, 1]
        nursery.cancel_scope.cancel()


async def test_a_failed_write_is_retried_with_backoff_and_never_raised(
    autojump_clock: trio.testing.MockClock,
) -> None:
    disk = Disk(fail=3)
    writer = VaultWriter(disk, debounce=0.0, retry_base=5.0, retry_cap=60.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        start = trio.current_time()
        writer.mark(7)  # returns at once, whatever the disk does
        assert trio.current_time() == start
        await trio.sleep(100)
        # failed at ~0, retried after 5, 10, 20 s: written at ~35 s
        assert disk.attempts == 4 and writer.failures == 3
        assert [c for c, _ in disk.writes] == [7]
        assert disk.writes[0][1] == pytest.approx(start + 35.04, abs=0.05)
        assert writer.pending == 0
        nursery.cancel_scope.cancel()


async def test_the_sweep_marks_every_chat_at_start_and_then_periodically(
    autojump_clock: trio.testing.MockClock,
) -> None:
    disk = Disk()

    async def chats() -> list[int]:
        return [3, 4]

    writer = VaultWriter(disk, debounce=1.0, chats=chats, sweep_interval=3600)
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        await trio.sleep(10)
        assert sorted(c for c, _ in disk.writes) == [3, 4]
        await trio.sleep(3600)
        assert sorted(c for c, _ in disk.writes) == [3, 3, 4, 4]
        nursery.cancel_scope.cancel()


def test_vault_off_builds_no_writer(tmp_path: Path) -> None:
    on = load_settings({"ENGRAM_HOME": str(tmp_path)}, dotenv=None)
    off = load_settings({"ENGRAM_HOME": str(tmp_path), "VAULT": "off"}, dotenv=None)
    assert isinstance(sql_vault_writer(on, db=None), VaultWriter)  # type: ignore[arg-type]
    assert sql_vault_writer(off, db=None) is None  # type: ignore[arg-type]
    assert not (tmp_path / "vault").exists()


async def test_the_compactor_marks_the_chat_after_a_round_that_compacted() -> None:
    rounds = {5: ["ok", "not_needed"], 6: ["failed"]}

    async def compact(chat_id: int) -> CompactionOutcome:
        return CompactionOutcome(rounds[chat_id].pop(0), chat_id)

    marked: list[int] = []
    compactor = CompactorActor(compact, on_compacted=marked.append)
    async with trio.open_nursery() as nursery:
        await nursery.start(compactor.run)
        compactor.request(5)
        compactor.request(6)
        await compactor.wait_idle()
        nursery.cancel_scope.cancel()
    assert marked == [5]  # once for chat 5's compacting round; never for a failed one
