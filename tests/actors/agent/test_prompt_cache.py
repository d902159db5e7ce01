"""The turn context built to be cached, end to end: the real agent (``sql_agent``) on the real
database, through the real Anthropic SDK, against the fake API's prompt cache.

Two turns a minute apart: the second request's prefix up to its last stable breakpoint is
byte-identical to the first's (tools, persona and instructions, the window's older blocks), the
first turn writes it and the second reads it (the ``api_usage`` rows say so, priced); within a
turn the tool loop's second call reads what its first call sent; PROMPT_CACHE_TTL=off sends no
breakpoint at all."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pytest
from fakes.anthropic_api import FakeAnthropic

from actors.agent.handler import Agent, sql_agent
from actors.agent.turn import TurnInput, TurnReply
from actors.agent.window_text import HISTORY_HEADER, LATEST_HEADER
from memory.conversation.messages import ChatMessage, insert_rows
from memory.llm.anthropic_provider import AnthropicLLM
from memory.llm.cost import DEFAULT_RATES, token_cost
from memory.llm.protocol import CacheTTL
from runtime.db import Database

CHAT = 5550777
TZ = "Europe/Madrid"
START = datetime(2026, 3, 3, 6, 0, tzinfo=UTC)  # 07:00 in Madrid


class Clock:
    """The agent's wall clock and the fake's cache clock, moved by the test."""

    def __init__(self) -> None:
        self.now = START + timedelta(hours=8)

    def __call__(self) -> datetime:
        return self.now

    def seconds(self) -> float:
        return (self.now - START).total_seconds()


@asynccontextmanager
async def agent_on(
    db: Database, fake: FakeAnthropic, clock: Clock, cache: CacheTTL | None = "5m"
) -> AsyncIterator[Agent]:
    fake.clock = clock.seconds
    async with AnthropicLLM(
        api_key=fake.api_key, base_url=fake.base_url, db=db, timeout=10.0
    ) as llm:
        yield sql_agent(db, llm, timezone=TZ, clock=clock, prompt_cache=cache)


async def seed(db: Database, rows: int = 30) -> None:
    """A morning's conversation: a briefing at 07:02, then exchanges a minute apart."""
    history = [
        ChatMessage(
            role="assistant",
            content="Morning briefing: sunny, 29 C, light wind.",
            created_at=START + timedelta(minutes=2),
        )
    ]
    for i in range(1, rows):
        role: Literal["user", "assistant"] = "user" if i % 2 else "assistant"
        text = f"Message {i} about the garden, the pool and the week's plans."
        history.append(
            ChatMessage(role=role, content=text, created_at=START + timedelta(minutes=5 + i))
        )
    await insert_rows(db, CHAT, history)


async def run(agent: Agent, db: Database, text: str, update: int) -> TurnReply:
    reply = await agent.run_turn(TurnInput(CHAT, text, (update,), (update,), (f"u:{update}",)))
    async with db.transaction() as conn:
        if reply.persist is not None:
            await reply.persist(conn)
    return reply


def stable_prefix(body: dict[str, Any]) -> str:
    """The request up to its last breakpoint before the messages, byte for byte: the tools and
    the system blocks through the last one with ``cache_control``."""
    system = body["system"]
    marked = [i for i, block in enumerate(system) if "cache_control" in block]
    assert marked, "no breakpoint in the system prompt"
    return json.dumps([body["tools"], system[: marked[-1] + 1]], ensure_ascii=False)


def breakpoints(body: dict[str, Any]) -> int:
    return json.dumps(body).count('"cache_control"')


async def usage_rows(db: Database) -> list[dict[str, Any]]:
    return [
        dict(r)
        for r in await db.fetch("SELECT * FROM api_usage WHERE purpose = 'agent' ORDER BY id")
    ]


async def test_the_second_turn_reads_the_prefix_the_first_wrote(
    db: Database, fake_claude: FakeAnthropic
) -> None:
    clock = Clock()
    await seed(db)
    fake_claude.queue_text("The briefing is 8 hours old: check a fresh forecast.")
    fake_claude.queue_text("Your plans: the garden, then the pool.")
    async with agent_on(db, fake_claude, clock) as agent:
        await run(agent, db, "Is the weather forecast still accurate?", 1)
        clock.now += timedelta(minutes=2)
        await run(agent, db, "And what were my plans?", 2)
    first, second = (r.body for r in fake_claude.answered)
    # byte-identical up to the last stable breakpoint, then what changes
    assert stable_prefix(second) == stable_prefix(first)
    assert first["system"][-1] != second["system"][-1]  # now, the latest rows
    # persona and instructions, the last older block, the new message (no profile or episodes
    # yet: their breakpoint is left out with them)
    assert [breakpoints(first), breakpoints(second)] == [3, 3]
    # the older rows carry their local time only; the latest ones their age (seed 004 6b)
    text = "\n".join(b["text"] for b in first["system"])
    assert HISTORY_HEADER in text and LATEST_HEADER in text
    assert "[07:02] Assistant: Morning briefing" in text
    latest = first["system"][-1]["text"]
    assert latest.index("Now: Tuesday, 3 March 2026, 15:00") < latest.index(LATEST_HEADER)
    assert "[07:34, 7 hours ago] User: Message 29" in latest
    # the first turn wrote the prefix, the second read it: as billed, and as recorded
    one, two = (r.cache for r in fake_claude.answered)
    assert one is not None and two is not None
    assert one.read == 0 and one.write > 2_000
    assert two.read > 2_000 and two.write < one.write // 4
    rows = await usage_rows(db)
    assert [(r["cache_read_tokens"], r["cache_write_tokens"]) for r in rows] == [
        (one.read, one.write),
        (two.read, two.write),
    ]
    for row in rows:
        expected = token_cost(
            DEFAULT_RATES,
            "claude-sonnet-4-6",
            row["input_tokens"],
            row["output_tokens"],
            cache_read_tokens=row["cache_read_tokens"],
            cache_write_tokens=row["cache_write_tokens"],
        )
        assert row["cost_usd"] == pytest.approx(expected.usd)
    assert rows[1]["cost_usd"] < rows[0]["cost_usd"] / 3


async def test_a_new_block_of_older_rows_reads_the_blocks_before_it(
    db: Database, fake_claude: FakeAnthropic
) -> None:
    """The window grows by a turn's rows: once they close a block, the breakpoint moves to it
    and the request still reads everything before (found by the lookback), writing little."""
    clock = Clock()
    await seed(db, rows=29)
    async with agent_on(db, fake_claude, clock) as agent:
        for update in range(1, 5):
            await run(agent, db, f"Question {update}?", update)
            clock.now += timedelta(minutes=1)
    texts = [[block["text"] for block in r.body["system"]] for r in fake_claude.answered]
    assert len(texts[-1]) > len(texts[0])  # older blocks were added
    for previous, current in itertools.pairwise(texts):
        # every block before the volatile one is sent again, unchanged, in the same place
        assert current[: len(previous) - 1] == previous[:-1]
    caches = [r.cache for r in fake_claude.answered]
    assert all(c is not None for c in caches)
    for cache in caches[1:]:
        assert cache is not None and cache.read > 2_000 and cache.write < 1_000


async def test_the_tool_loop_reads_what_its_first_call_sent(
    db: Database, fake_claude: FakeAnthropic
) -> None:
    clock = Clock()
    await seed(db)
    fake_claude.queue_tool_use("entry_stats", {}, text="Let me count.")
    fake_claude.queue_text("You have no entries yet.")
    async with agent_on(db, fake_claude, clock) as agent:
        await run(agent, db, "How many entries do I have?", 1)
    first, second = fake_claude.answered
    assert first.messages[-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert second.messages[-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in json.dumps(second.messages[:-1])  # one message breakpoint
    assert first.cache is not None and second.cache is not None
    # the second call reads the first's whole request (system and question) ...
    assert second.cache.read == first.cache.read + first.cache.write
    assert second.cache.write < 500  # ... and writes the tool call and its result


async def test_cache_off_sends_no_breakpoint_and_every_age(
    db: Database, fake_claude: FakeAnthropic
) -> None:
    clock = Clock()
    await seed(db)
    async with agent_on(db, fake_claude, clock, cache=None) as agent:
        await run(agent, db, "Hello?", 1)
    [request] = fake_claude.answered
    assert breakpoints(request.body) == 0
    text = "\n".join(b["text"] for b in request.body["system"])
    assert "[07:02, 8 hours ago] Assistant: Morning briefing" in text
    assert LATEST_HEADER not in text
    assert request.cache is not None and (request.cache.read, request.cache.write) == (0, 0)
