"""Nothing leaves the window uncompacted, through the real compaction path: the real agent and
compactor on PostgreSQL, the real SDK against the fake Anthropic API (turns answered with short
texts, compaction requests with valid extraction JSON); and the maintenance sweep over a backlog
left by a database from before the rule."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import pytest
import trio
from fakes.anthropic_api import FakeAnthropic
from fakes.extraction import ScriptedExtractor

from actors.agent.handler import Agent, sql_agent
from actors.agent.turn import TurnInput
from actors.compactor import CompactorActor, sql_compactor
from actors.settings import Settings, load_settings
from memory.compaction.backlog import CompactionSweep, SqlBacklog
from memory.conversation.messages import ChatMessage, insert_rows, recent_window
from memory.conversation.window import CompactionRule
from memory.embeddings.providers import LocalEmbedder
from memory.llm.anthropic_provider import AnthropicLLM
from runtime.db import Database

CHAT = 6060601
OTHER = 6060602
TZ = "Europe/Madrid"


@asynccontextmanager
async def bot(
    db: Database, fake: FakeAnthropic, **env: str
) -> AsyncIterator[tuple[Agent, CompactorActor, Settings]]:
    """The agent and the compactor wired as ``engram serve`` wires them (default settings),
    the compactor running."""
    settings = load_settings({"TIMEZONE": TZ, **env}, dotenv=None)
    async with (
        AnthropicLLM(api_key=fake.api_key, base_url=fake.base_url, db=db, timeout=10) as llm,
        trio.open_nursery() as nursery,
    ):
        agent = sql_agent(
            db,
            llm,
            timezone=TZ,
            context_token_budget=settings.context_token_budget,
            episode_budget=settings.episode_budget_tokens,
        )
        compactor = sql_compactor(db, llm, LocalEmbedder(), settings, tools=agent.tools)
        agent.on_over_budget = compactor.request
        await nursery.start(compactor.run)
        yield agent, compactor, settings
        nursery.cancel_scope.cancel()


async def say(db: Database, agent: Agent, compactor: CompactorActor, n: int, text: str) -> str:
    """One turn as the chat actor runs it (rows committed, then the after-commit hook), until
    its compaction settles."""
    reply = await agent.run_turn(TurnInput(CHAT, text, (n,), (n,), (f"update:{n}",)))
    async with db.transaction() as conn:
        if reply.persist is not None:
            await reply.persist(conn)
    if reply.after_commit is not None:
        await reply.after_commit()
    await compactor.wait_idle()
    return reply.text


async def uncompacted_ids(db: Database, chat_id: int = CHAT) -> list[int]:
    rows = await db.fetch(
        "SELECT id FROM chat_messages WHERE chat_id = $1 AND compacted_at IS NULL "
        "ORDER BY created_at, id",
        chat_id,
    )
    return [r["id"] for r in rows]


async def assert_episodes_cover_the_compacted_rows(db: Database, chat_id: int) -> int:
    """Every compacted row lies in exactly one episode, whose span (ids, times, count) is
    exactly its chunk's; the episodes' count."""
    compacted = await db.fetch(
        "SELECT id, created_at FROM chat_messages WHERE chat_id = $1 "
        "AND compacted_at IS NOT NULL ORDER BY id",
        chat_id,
    )
    episodes = await db.fetch(
        "SELECT * FROM episodes WHERE chat_id = $1 ORDER BY first_message_id", chat_id
    )
    covered: list[int] = []
    for ep in episodes:
        rows = [r for r in compacted if ep["first_message_id"] <= r["id"] <= ep["last_message_id"]]
        assert len(rows) == ep["message_count"] > 0
        assert rows[0]["id"] == ep["first_message_id"] and rows[-1]["id"] == ep["last_message_id"]
        assert ep["started_at"] == min(r["created_at"] for r in rows)
        assert ep["ended_at"] == max(r["created_at"] for r in rows)
        covered += [r["id"] for r in rows]
    assert covered == [r["id"] for r in compacted]  # in order, none twice, none missing
    return len(episodes)


@pytest.mark.slow
async def test_600_short_messages_every_row_in_the_window_or_compacted(
    db: Database, fake_claude: FakeAnthropic
) -> None:
    """The defect: 200 rows of short messages are ~14,000 tokens, far under the 24,000 budget,
    so compaction never ran and rows fell out of the window unseen. Now every turn's
    compaction leaves every uncompacted row in the next window."""
    extractor = ScriptedExtractor()
    fake_claude.responder = extractor
    fake_claude.default_text = "Noted, thanks for telling me."
    async with bot(db, fake_claude) as (agent, compactor, settings):
        rule = CompactionRule.from_settings(settings)
        for n in range(1, 601):
            await say(db, agent, compactor, n, f"Message {n}: a short note about my day.")
            left = await uncompacted_ids(db)
            assert len(left) <= rule.window_rows, n
    window = await recent_window(db, CHAT, rule.window_rows)  # what the next turn shows
    assert [r.id for r in window] == left  # every uncompacted row, nothing older left out
    total = await db.fetchval("SELECT count(*) FROM chat_messages WHERE chat_id = $1", CHAT)
    assert total == 1200
    episodes = await assert_episodes_cover_the_compacted_rows(db, CHAT)
    assert episodes == len(extractor.spans) >= (1200 - rule.window_rows) // 40
    statuses = {r["status"] for r in await db.fetch("SELECT status FROM compaction_runs")}
    assert statuses == {"ok"}
    assert len(left) > rule.keep_recent  # compacted by rows, not down to keep_recent
    first = await db.fetchval("SELECT summary FROM episodes ORDER BY id LIMIT 1")
    assert first.startswith('User wrote from "Message 1: a short note')


def rows(chat_id: int, n: int, start: datetime) -> list[ChatMessage]:
    return [
        ChatMessage(
            role="user" if i % 2 == 0 else "assistant",
            content=f"old note {i}",
            created_at=start + timedelta(minutes=i),
        )
        for i in range(n)
    ]


async def test_the_sweep_compacts_an_old_backlog_oldest_first_a_chunk_a_pass(
    db: Database, fake_claude: FakeAnthropic
) -> None:
    """A database from before the rule: 300 and 260 uncompacted rows. Each sweep pass
    compacts one chunk of each (the oldest chat first) until both fit the window; a chat idle
    for COMPACTION_IDLE_AFTER is compacted down to keep_recent in one pass."""
    now = datetime.now(UTC)
    await insert_rows(db, CHAT, rows(CHAT, 300, now - timedelta(days=30)))
    await insert_rows(db, OTHER, rows(OTHER, 260, now - timedelta(days=40)))
    fake_claude.responder = extractor = ScriptedExtractor()
    async with bot(
        db, fake_claude, COMPACTION_IDLE_AFTER=str(300 * 86400), WINDOW_MESSAGES="200"
    ) as (_, c, s):
        rule = CompactionRule.from_settings(s)
        sweep = CompactionSweep(SqlBacklog(db), c.compact, rule, interval=3600)
        first = await sweep.run_once()
        assert [(chat, reason) for chat, reason, _ in first.chats] == [
            (OTHER, "rows"),
            (CHAT, "rows"),
        ]
        assert (len(await uncompacted_ids(db)), len(await uncompacted_ids(db, OTHER))) == (260, 220)
        await sweep.run_once()
        third = await sweep.run_once()
        assert [chat for chat, _, _ in third.chats] == [CHAT]  # OTHER fits now: not due
        assert (len(await uncompacted_ids(db)), len(await uncompacted_ids(db, OTHER))) == (180, 180)
        assert (await sweep.run_once()).chats == ()  # nothing due
    # idle after 6 h: these are 30 days old
    async with bot(db, fake_claude, WINDOW_MESSAGES="200") as (_, c, s):
        idle = CompactionSweep(
            SqlBacklog(db), c.compact, CompactionRule.from_settings(s), interval=3600
        )
        result = await idle.run_once()
    assert [(chat, reason) for chat, reason, _ in result.chats] == [(OTHER, "idle"), (CHAT, "idle")]
    assert len(await uncompacted_ids(db)) == len(await uncompacted_ids(db, OTHER)) == 20
    for chat in (CHAT, OTHER):
        await assert_episodes_cover_the_compacted_rows(db, chat)
    assert [len(span) for span in extractor.spans][:2] == [40, 40]
