"""Pattern memory inside a turn, as `engram serve` wires it: the SqlPatternRetriever puts the
chat's own patterns in the system prompt, the memory tools are offered and act on this chat
only, and an entry the model opens becomes a tool-loop link of the injected patterns. Real
database, local embedder, the real anthropic SDK against the strict fake server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import pytest
from fakes.anthropic_api import FakeAnthropic

from actors.agent.handler import Agent, sql_agent
from actors.agent.turn import TurnInput
from memory.embeddings.providers import LocalEmbedder
from memory.embeddings.thresholds import thresholds_for
from memory.llm.anthropic_provider import AnthropicLLM
from memory.patterns.dedup import LLMAdjudicator
from memory.patterns.explicit import keep_apart, store_explicit_pattern
from memory.retrieval.retriever import SqlPatternRetriever
from memory.tools.memory_tools import memory_tools
from runtime.db import Database

CHAT, OTHER = 7710001, 7710002
TZ = "Europe/Madrid"
NOW = datetime(2025, 3, 1, 10, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder()


@asynccontextmanager
async def wired_agent(
    db: Database, fake: FakeAnthropic, embedder: LocalEmbedder
) -> AsyncIterator[Agent]:
    async with AnthropicLLM(api_key=fake.api_key, base_url=fake.base_url, db=db) as llm:
        thresholds = thresholds_for(embedder.model)
        yield sql_agent(
            db,
            llm,
            timezone=TZ,
            clock=lambda: NOW,
            embedder=embedder,
            retriever=SqlPatternRetriever(db, embedder, thresholds),
            extra_tools=memory_tools(LLMAdjudicator(llm), thresholds=thresholds),
        )


async def remember(db: Database, embedder: LocalEmbedder, chat_id: int, content: str) -> int:
    decision = await store_explicit_pattern(
        db, embedder, keep_apart, chat_id=chat_id, content=content, kind="behavior", now=NOW
    )
    assert decision.pattern_id is not None
    return decision.pattern_id


def turn(text: str, chat_id: int = CHAT, update: int = 500) -> TurnInput:
    return TurnInput(chat_id, text, (update,), (update + 1,), (f"update:{update}",))


async def test_turn_prompt_holds_this_chats_patterns_only(
    db: Database, fake_claude: FakeAnthropic, embedder: LocalEmbedder
) -> None:
    await remember(db, embedder, CHAT, "User sleeps badly after drinking coffee late")
    await remember(db, embedder, OTHER, "User sleeps badly after watching horror films late")
    fake_claude.queue_text("Maybe skip the evening coffee.")
    async with wired_agent(db, fake_claude, embedder) as agent:
        reply = await agent.run_turn(turn("Why do I sleep so badly?"))
    assert reply.text == "Maybe skip the evening coffee."
    system = str(fake_claude.requests[0].body["system"])
    assert "sleeps badly after drinking coffee late" in system
    assert "horror films" not in system
    offered = {t["name"] for t in fake_claude.requests[0].tools}
    assert {"recall_memory", "remember", "forget_memory", "search_entries"} <= offered


async def test_remember_tool_stores_in_the_turns_chat(
    db: Database, fake_claude: FakeAnthropic, embedder: LocalEmbedder
) -> None:
    fake_claude.queue_tool_use(
        "remember", {"fact": "User is training for a marathon in May", "kind": "goal"}
    )
    fake_claude.queue_text("Noted, good luck with the marathon.")
    async with wired_agent(db, fake_claude, embedder) as agent:
        await agent.run_turn(turn("Remember that I'm training for the May marathon"))
    rows = await db.fetch(
        "SELECT chat_id, kind, source FROM patterns WHERE content LIKE '%marathon%'"
    )
    assert [(r["chat_id"], r["kind"], r["source"]) for r in rows] == [(CHAT, "goal", "explicit")]


async def test_an_opened_entry_becomes_a_tool_loop_link(
    db: Database, fake_claude: FakeAnthropic, embedder: LocalEmbedder
) -> None:
    pattern = await remember(db, embedder, CHAT, "User runs along the river on Sundays")
    await db.execute(
        "INSERT INTO entries (uuid, created_at, timezone, text, chat_id)"
        " VALUES ($1, $2, $3, $4, $5)",
        "entry-river",
        datetime(2025, 2, 23, 8, tzinfo=UTC),
        TZ,
        "Sunday river run, 10 km.",
        CHAT,
    )
    fake_claude.queue_tool_use("get_entry", {"uuid": "entry-river"})
    fake_claude.queue_text("Your Sunday river run was 10 km.")
    async with wired_agent(db, fake_claude, embedder) as agent:
        await agent.run_turn(turn("How far was my Sunday run along the river?"))
    links = await db.fetch("SELECT pattern_id, entry_uuid, source FROM pattern_entries")
    assert [(r["pattern_id"], r["entry_uuid"], r["source"]) for r in links] == [
        (pattern, "entry-river", "tool_loop")
    ]


async def test_no_link_without_an_opened_or_cited_entry(
    db: Database, fake_claude: FakeAnthropic, embedder: LocalEmbedder
) -> None:
    await remember(db, embedder, CHAT, "User runs along the river on Sundays")
    fake_claude.queue_text("Sounds like a good habit.")
    async with wired_agent(db, fake_claude, embedder) as agent:
        await agent.run_turn(turn("I love my Sunday river runs"))
    assert await db.fetchval("SELECT count(*) FROM pattern_entries") == 0
