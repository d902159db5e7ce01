"""Summaries in view: the "Earlier in this conversation" section (local dates, newest last,
within its budget), its place in the context, the agent loading the episodes alongside the window
and the retrieval, and the episodes read back from PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import attrs
import pytest
import trio
import trio.testing

from actors.agent.context import (
    EPISODES_HEADER,
    PATTERNS_HEADER,
    build_context,
    episodes_section,
    estimate_tokens,
)
from actors.agent.handler import Agent
from actors.agent.turn import TurnInput
from actors.agent.window_text import HISTORY_HEADER
from memory.conversation.episodes import Episode, SqlEpisodes, episodes_to_load
from memory.conversation.messages import ChatMessage
from memory.llm.protocol import (
    Completion,
    Message,
    OnEvent,
    System,
    TextBlock,
    ToolSpec,
    system_text,
)
from memory.retrieval.retriever import RetrievedMemory
from memory.tools.registry import ToolRegistry
from runtime.db import Connection, Database

CHAT = 7070701
TZ = "Europe/Madrid"
NOW = datetime(2026, 3, 10, 9, 0, tzinfo=UTC)


def episode(n: int, start: datetime, minutes: int, summary: str) -> Episode:
    return Episode(n, summary, start, start + timedelta(minutes=minutes), 40)


EPISODES = [
    # 22:30-00:30 in Madrid (UTC+1): two local dates, one UTC date
    episode(2, datetime(2026, 3, 3, 21, 30, tzinfo=UTC), 120, "User planned the offsite."),
    episode(1, datetime(2026, 3, 1, 8, 0, tzinfo=UTC), 30, "User counted to twenty."),
    episode(3, datetime(2026, 3, 8, 17, 0, tzinfo=UTC), 45, "User  talked\nabout running."),
]


def test_the_section_shows_local_dates_newest_last() -> None:
    section = episodes_section(EPISODES, TZ, 800)
    assert section.splitlines() == [
        EPISODES_HEADER,
        "[2026-03-01] User counted to twenty.",
        "[2026-03-03 – 2026-03-04] User planned the offsite.",
        "[2026-03-08] User talked about running.",  # whitespace collapsed
    ]
    # in UTC the offsite episode is one day
    assert "[2026-03-03] User planned the offsite." in episodes_section(EPISODES, "UTC", 800)


@pytest.mark.parametrize("budget", [0, 10, 20, 25, 30, 35, 800])
def test_the_section_keeps_the_newest_within_its_budget(budget: int) -> None:
    section = episodes_section(EPISODES, TZ, budget)
    assert estimate_tokens(section) <= budget
    shown = section.splitlines()[1:]
    # the newest ones, never an older one in place of a newer one
    assert shown == episodes_section(EPISODES, TZ, 800).splitlines()[4 - len(shown) :]
    if not shown:
        assert section == ""


def test_the_section_fits_its_budget_for_many_episodes() -> None:
    many = [
        episode(i, NOW - timedelta(hours=5 * i), 30, f"User spoke of topic {i}. " * 3)
        for i in range(1, 60)
    ]
    section = episodes_section(many, TZ, 800)
    lines = section.splitlines()[1:]
    assert 8 <= len(lines) < 59 and estimate_tokens(section) <= 800
    assert lines[-1].endswith("topic 1. User spoke of topic 1. User spoke of topic 1.")
    assert len(lines) < episodes_to_load(800)  # a turn loads more than fit
    short = [episode(i, NOW - timedelta(hours=i), 1, "User slept.") for i in range(1, 200)]
    assert len(episodes_section(short, TZ, 800).splitlines()) - 1 <= episodes_to_load(800)


def test_the_section_sits_between_the_patterns_and_the_history() -> None:
    """(Since the context is ordered to be cached, the episodes come before the patterns: the
    stable parts first.)"""
    window = [ChatMessage(role="user", content="hello", created_at=NOW - timedelta(minutes=1))]
    with_episodes = build_context(
        now=NOW, timezone=TZ, memory=RetrievedMemory(), window=window, tools=[], episodes=EPISODES
    )
    system = with_episodes.system
    assert system.index(EPISODES_HEADER) < system.index(PATTERNS_HEADER)
    assert system.index(EPISODES_HEADER) < system.index(HISTORY_HEADER)
    assert with_episodes.episodes in system
    without = build_context(now=NOW, timezone=TZ, memory=RetrievedMemory(), window=window, tools=[])
    assert EPISODES_HEADER not in without.system and without.episodes == ""
    grown = with_episodes.estimated_tokens - without.estimated_tokens
    assert grown == pytest.approx(estimate_tokens(with_episodes.episodes), abs=2)
    off = build_context(
        now=NOW,
        timezone=TZ,
        memory=RetrievedMemory(),
        window=window,
        tools=[],
        episodes=EPISODES,
        episode_budget=0,
    )
    assert off.system == without.system


# --- the agent: episodes read alongside the window and the retrieval ---------------------------


@attrs.define
class Slow:
    """The window, the retrieval and the episodes, each taking ``delay`` seconds."""

    delay: float = 1.0
    asked: list[tuple[str, int]] = attrs.field(factory=list)
    fail: bool = False

    async def add_user_and_recent(
        self, chat_id: int, text: str, external_id: str | None, created_at: datetime, limit: int
    ) -> tuple[int, list[ChatMessage]]:
        await trio.sleep(self.delay)
        return 1, []

    async def add_user(self, *args: Any) -> int:
        return 1

    async def recent(self, chat_id: int, limit: int) -> list[ChatMessage]:
        return []

    async def add_rows(self, conn: Connection, chat_id: int, rows: Sequence[ChatMessage]) -> None:
        return None

    async def retrieve(self, chat_id: int, query: str) -> RetrievedMemory:
        await trio.sleep(self.delay)
        return RetrievedMemory()

    async def recent_episodes(self, chat_id: int, limit: int) -> Sequence[Episode]:
        self.asked.append(("episodes", limit))
        await trio.sleep(self.delay)
        if self.fail:
            raise RuntimeError("episodes table gone")
        return EPISODES


@attrs.define
class Episodes:
    slow: Slow

    async def recent(self, chat_id: int, limit: int) -> Sequence[Episode]:
        return await self.slow.recent_episodes(chat_id, limit)


@attrs.define
class Recorder:
    systems: list[str] = attrs.field(factory=list)
    at: list[float] = attrs.field(factory=list)

    async def complete(
        self,
        *,
        system: System,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        max_tokens: int,
        purpose: str,
        chat_id: int | None,
        on_event: OnEvent | None = None,
    ) -> Completion:
        self.systems.append(system_text(system))
        self.at.append(trio.current_time())
        return Completion((TextBlock("ok"),), "end_turn", 10, 10, "fake")


def agent(slow: Slow, llm: Recorder, budget: int = 800) -> Agent:
    return Agent(
        llm=llm,
        conversation=slow,
        tools=ToolRegistry([]),
        tool_db=cast(Any, None),
        timezone=TZ,
        clock=lambda: NOW,
        retriever=slow,
        episodes=Episodes(slow),
        episode_budget=budget,
    )


async def test_the_agent_reads_episodes_alongside_window_and_retrieval(
    autojump_clock: trio.testing.MockClock,
) -> None:
    slow, llm = Slow(), Recorder()
    start = trio.current_time()
    reply = await agent(slow, llm).run_turn(TurnInput(CHAT, "hi", (1,), (1,), ("update:1",)))
    assert reply.text == "ok"
    assert llm.at == [start + 1.0]  # three 1-second reads at once, not one after another
    assert slow.asked == [("episodes", episodes_to_load(800))]
    assert episodes_section(EPISODES, TZ, 800) in llm.systems[0]


async def test_a_failing_episode_read_shows_none(autojump_clock: trio.testing.MockClock) -> None:
    slow, llm = Slow(fail=True), Recorder()
    reply = await agent(slow, llm).run_turn(TurnInput(CHAT, "hi", (1,), (1,), ("update:1",)))
    assert reply.text == "ok" and EPISODES_HEADER not in llm.systems[0]


async def test_episodes_from_postgres_newest_first_this_chat_only(db: Database) -> None:
    for chat, ep in [(CHAT, e) for e in EPISODES] + [(CHAT + 1, EPISODES[0])]:
        await db.execute(
            "INSERT INTO episodes (chat_id, summary, started_at, ended_at, message_count) "
            "VALUES ($1, $2, $3, $4, $5)",
            chat,
            f"{ep.summary} ({chat})",
            ep.started_at,
            ep.ended_at,
            ep.message_count,
        )
    found = await SqlEpisodes(db).recent(CHAT, 10)
    assert [e.summary for e in found] == [
        f"User  talked\nabout running. ({CHAT})",
        f"User planned the offsite. ({CHAT})",
        f"User counted to twenty. ({CHAT})",
    ]
    assert [e.ended_at for e in found] == sorted((e.ended_at for e in EPISODES), reverse=True)
    assert [e.summary for e in await SqlEpisodes(db).recent(CHAT, 1)] == [found[0].summary]
    assert await SqlEpisodes(db).recent(CHAT, 0) == ()
