"""What the dashboard's pages are built from (:class:`DashboardDeps`, made by the composition
root) and which chats a login may see."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs

from actors.chat.memory_commands import MemoryServices
from actors.dashboard.auth import Login
from actors.telegram.access import ChatSummary, chat_summaries
from runtime.db import Database
from runtime.http import Report


def utc_now() -> datetime:
    return datetime.now(UTC)


@attrs.frozen
class DashboardDeps:
    """The database and memory services, the token, the vault's folder, the heartbeat."""

    db: Database
    token: str
    services: MemoryServices
    vault_root: Path | None = None
    reports: Sequence[tuple[str, Report]] = ()
    #: TELEGRAM_ALLOWED_CHAT_IDS: chats listed even before they wrote
    allowed: frozenset[int] = frozenset()
    clock: Callable[[], datetime] = utc_now
    #: a chat's memory changed from the dashboard (the vault's writer marks it dirty)
    on_change: Callable[[int], Awaitable[object] | object] | None = None
    #: how many chat actors are running now
    live_actors: Callable[[], int] | None = None
    #: seconds between two polls of the live feed
    feed_interval: float = 2.0

    @property
    def timezone(self) -> str:
        return self.services.timezone

    async def visible_chats(self, login: Login) -> list[ChatSummary]:
        """The chats ``login`` may see, with their counts."""
        if login.chat_id is not None:
            return [
                s
                for s in await chat_summaries(self.db, [login.chat_id])
                if s.chat_id == login.chat_id
            ]
        return await chat_summaries(self.db, sorted(self.allowed))

    async def changed(self, chat_id: int) -> None:
        if self.on_change is None:
            return
        result: Any = self.on_change(chat_id)
        if inspect.isawaitable(result):
            await result
