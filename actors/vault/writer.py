"""The VaultWriter: each chat's markdown vault rewritten after the commits that change it.

    commit (turn, command, button, compaction) -> writer.mark(chat_id)   (non-blocking)
    VaultWriter (singleton): a marked chat is written VAULT_DEBOUNCE seconds after its first
        mark (marks in between are written together), one chat at a time
        (:func:`memory.vault.incremental.write_chat_incremental`: only the files what
        changed since the chat's last write affects; the whole chat at start and once per
        sweep; each file atomically)

A failed write (database away, disk full, a permission) is logged and the chat retried with
capped backoff; nothing of it reaches a turn (``mark`` only records the chat). At start, and
then every ``sweep_interval`` (MAINTENANCE_INTERVAL), every chat is marked: what changed
without a hook (maintenance jobs, the ``engram`` CLI, another process) reaches the vault too,
and unchanged files are not rewritten.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs
import trio

from actors.settings import Settings
from memory.vault.data import vault_chats
from memory.vault.incremental import ChatState, write_chat_incremental
from memory.vault.settings import vault_root
from runtime.backoff import backoff_delay
from runtime.db import Database
from runtime.logs import get_logger

log = get_logger(__name__)

WriteChat = Callable[[int], Awaitable[object]]
ListChats = Callable[[], Awaitable[Sequence[int]]]


@attrs.define(eq=False)
class VaultWriter:
    """The vault writer actor (see the module docstring)."""

    write: WriteChat
    debounce: float = 2.0
    #: every chat with a vault (the start-up and periodic sweep); None: no sweep
    chats: ListChats | None = None
    sweep_interval: float | None = None
    retry_base: float = 5.0
    retry_cap: float = 300.0
    #: called after each write with the chat and the seconds since its first mark
    on_written: Callable[[int, float], None] | None = None
    written: int = 0
    failures: int = 0
    _due: dict[int, float] = attrs.field(init=False, factory=dict)
    _marked: dict[int, float] = attrs.field(init=False, factory=dict)
    _failed: dict[int, int] = attrs.field(init=False, factory=dict)
    _wake: trio.Event = attrs.field(init=False, factory=trio.Event)

    def mark(self, chat_id: int) -> None:
        """The chat's vault is out of date: write it after the debounce (returns at once)."""
        now = trio.current_time()
        self._marked.setdefault(chat_id, now)
        self._due.setdefault(chat_id, now + self.debounce)
        self._wake.set()

    @property
    def pending(self) -> int:
        return len(self._due)

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            if self.chats is not None:
                nursery.start_soon(self._sweep)
            task_status.started(self)
            await self._loop()

    async def _sweep(self) -> None:
        assert self.chats is not None
        failures = 0
        while True:
            try:
                for chat_id in await self.chats():
                    self.mark(chat_id)
            except Exception as exc:  # the database away: try again later
                log.warning("vault.sweep_failed", error=f"{type(exc).__name__}: {exc}")
                await trio.sleep(backoff_delay(failures, base=self.retry_base, cap=self.retry_cap))
                failures += 1
                continue
            failures = 0
            if self.sweep_interval is None:
                return
            await trio.sleep(self.sweep_interval)

    async def _loop(self) -> None:
        while True:
            now = trio.current_time()
            ready = sorted(c for c, at in self._due.items() if at <= now)
            if not ready:
                self._wake = trio.Event()
                with trio.move_on_at(min(self._due.values(), default=math.inf)):
                    await self._wake.wait()
                continue
            for chat_id in ready:
                await self._write(chat_id)

    async def _write(self, chat_id: int) -> None:
        del self._due[chat_id]
        first_mark = self._marked.pop(chat_id)
        try:
            await self.write(chat_id)
        except Exception as exc:  # logged and retried; a reply never depends on it
            self.failures += 1
            n = self._failed.get(chat_id, 0)
            self._failed[chat_id] = n + 1
            delay = backoff_delay(n, base=self.retry_base, cap=self.retry_cap)
            log.error(
                "vault.write_failed",
                chat_id=chat_id,
                error=f"{type(exc).__name__}: {exc}",
                retry_in=delay,
            )
            self._marked.setdefault(chat_id, first_mark)
            self._due[chat_id] = trio.current_time() + delay
            return
        self._failed.pop(chat_id, None)
        self.written += 1
        if self.on_written is not None:
            self.on_written(chat_id, trio.current_time() - first_mark)


def sql_vault_writer(settings: Settings, db: Database) -> VaultWriter | None:
    """The production writer (VAULT_DIR, VAULT_DEBOUNCE, TIMEZONE); None when VAULT=off."""
    if settings.vault != "on":
        return None
    root = vault_root(settings.vault_dir, settings.home)
    states: dict[int, ChatState] = {}  # per chat: what its last write saw and wrote

    async def write(chat_id: int) -> object:
        return await write_chat_incremental(
            db,
            root,
            chat_id,
            settings.timezone,
            states.setdefault(chat_id, ChatState()),
        )

    async def chats() -> list[int]:
        """Every chat with a vault, each due a whole write (the sweep's backstop)."""
        listed = await vault_chats(db)
        for chat_id in listed:
            states.setdefault(chat_id, ChatState()).full_due = True
        return listed

    return VaultWriter(
        write,
        debounce=settings.vault_debounce,
        chats=chats,
        sweep_interval=settings.maintenance_interval,
    )
