"""``recall_conversation``: this chat's retained messages (full text) and episodes (full text and
vectors) on PostgreSQL, dated in the chat's time zone, never another chat's; and seed 004's
Tests 2 and 12 through the real agent and compaction against the fake Anthropic API (what the
model is shown: the request bodies the fake receives)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
import trio
from fakes.anthropic_api import FakeAnthropic
from fakes.extraction import ScriptedExtractor, is_extraction

from actors.agent.context import EPISODES_HEADER
from actors.agent.handler import Agent, sql_agent
from actors.agent.turn import TurnInput
from actors.agent.window_text import HISTORY_HEADER
from actors.compactor import CompactorActor, sql_compactor
from actors.settings import Settings, load_settings
from memory.compaction.backlog import CompactionSweep, SqlBacklog
from memory.conversation.messages import ChatMessage, insert_rows
from memory.conversation.window import CompactionRule
from memory.embeddings.providers import LocalEmbedder
from memory.embeddings.store import store_vectors
from memory.llm.anthropic_provider import AnthropicLLM
from memory.tools.conversation_tools import snippet
from memory.tools.memory_tools import memory_registry, memory_tools
from memory.tools.registry import ToolContext
from runtime.db import Database

CHAT = 8080801
OTHER = 8080802
TZ = "Europe/Madrid"
NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
ACCOUNT = "My AWS account number is 123456789012 for the dev environment"


def at(minutes: int) -> datetime:
    return datetime(2026, 3, 3, 22, 0, tzinfo=UTC) + timedelta(minutes=minutes)


async def seed(db: Database) -> dict[str, int]:
    """CHAT: the account number, then 300 other messages; the first 40 rows compacted into an
    episode. OTHER: its own account number, in the same words."""
    rows = [ChatMessage(role="user", content=ACCOUNT, created_at=at(0))]
    rows += [
        ChatMessage(
            role="user" if i % 2 else "assistant",
            content=f"chat line {i} about lunch",
            created_at=at(i),
        )
        for i in range(1, 301)
    ]
    await insert_rows(db, CHAT, rows)
    await insert_rows(
        db,
        OTHER,
        [
            ChatMessage(
                role="user",
                content="My AWS account number is 999999999999 for dev",
                created_at=at(5),
            ),
        ],
    )
    ids = [
        r["id"]
        for r in await db.fetch("SELECT id FROM chat_messages WHERE chat_id = $1 ORDER BY id", CHAT)
    ]
    await db.execute(
        "UPDATE chat_messages SET compacted_at = now() WHERE chat_id = $1 AND id <= $2",
        CHAT,
        ids[39],
    )
    episode = await db.fetchval(
        "INSERT INTO episodes (chat_id, summary, started_at, ended_at, message_count, "
        "first_message_id, last_message_id) VALUES ($1, $2, $3, $4, 40, $5, $6) RETURNING id",
        CHAT,
        "User gave the AWS dev account details, then talked about lunch.",
        at(0),
        at(39),
        ids[0],
        ids[39],
    )
    await db.execute(
        "INSERT INTO episodes (chat_id, summary, started_at, ended_at, message_count) "
        "VALUES ($1, 'User gave the AWS dev account of another chat.', $2, $2, 1)",
        OTHER,
        at(5),
    )
    return {"episode": int(episode), "first": ids[0], "last": ids[-1]}


def ctx(db: Database, chat_id: int = CHAT, embedder: Any = None) -> ToolContext:
    return ToolContext(db=db, embedder=embedder, chat_id=chat_id, timezone=TZ, now=NOW)


async def call(context: ToolContext, **args: Any) -> tuple[dict[str, Any], bool]:
    outcome = await memory_registry().call("recall_conversation", args, context)
    return json.loads(outcome.content), outcome.is_error


async def test_recall_finds_what_was_said_300_messages_ago_dated_in_this_chat_only(
    db: Database,
) -> None:
    seeded = await seed(db)
    body, err = await call(ctx(db), query="What's my AWS dev account number?")
    assert not err
    first = body["messages"][0]
    # 22:00 UTC on 3 March is 23:00 in Madrid
    assert first == {
        "at": "2026-03-03 23:00",
        "role": "user",
        "text": ACCOUNT,
        "compacted": True,
        "episode": seeded["episode"],
    }
    [episode] = body["episodes"]
    assert episode == {
        "id": seeded["episode"],
        "from": "2026-03-03 23:00",
        "to": "2026-03-03 23:39",
        "messages": 40,
        "summary": "User gave the AWS dev account details, then talked about lunch.",
    }
    assert body["timezone"] == TZ and body["degraded"] is True  # no embedder: words only
    assert "999999999999" not in json.dumps(body) and "another chat" not in json.dumps(body)
    # the other chat sees its own number only
    other, _ = await call(ctx(db, OTHER), query="AWS account number")
    assert [m["text"] for m in other["messages"]] == [
        "My AWS account number is 999999999999 for dev"
    ]
    assert "123456789012" not in json.dumps(other)


async def test_dates_are_local_and_inclusive(db: Database) -> None:
    await seed(db)
    # at(0) is 2026-03-03 23:00 in Madrid and at(70) 2026-03-04 00:10
    on_the_3rd, _ = await call(
        ctx(db), query="lunch", date_from="2026-03-03", date_to="2026-03-03", limit=20
    )
    assert on_the_3rd["messages"] and all(
        m["at"].startswith("2026-03-03") for m in on_the_3rd["messages"]
    )
    on_the_4th, _ = await call(ctx(db), query="lunch", date_from="2026-03-04", limit=20)
    assert on_the_4th["messages"] and all(
        m["at"].startswith("2026-03-04") for m in on_the_4th["messages"]
    )
    assert on_the_4th["episodes"] == []  # the episode ended on the 3rd, local time
    # no word to look for: the span's newest messages
    span, err = await call(ctx(db), query="", date_to="2026-03-03", limit=3)
    assert not err and [m["at"] for m in span["messages"]] == [
        "2026-03-03 23:59",
        "2026-03-03 23:58",
        "2026-03-03 23:57",
    ]
    nothing, err = await call(ctx(db), query="the what")
    assert err and nothing["field"] == "query"
    reversed_, err = await call(
        ctx(db), query="lunch", date_from="2026-03-05", date_to="2026-03-04"
    )
    assert err and reversed_["field"] == "date_from"


class Axis:
    """A 3-d embedder: each text points along the axis of the first keyword it contains."""

    model, dims = "axis-3", 3
    AXES: Mapping[str, int] = {"money": 0, "holiday": 1, "sleep": 2}

    async def embed(
        self, texts: Sequence[str], *, purpose: str, chat_id: int | None = None
    ) -> list[np.ndarray]:
        out = []
        for text in texts:
            v = np.zeros(3, dtype=np.float32)
            v[next((i for w, i in self.AXES.items() if w in text), 2)] = 1
            out.append(v)
        return out


async def test_episodes_are_found_by_meaning_too(db: Database) -> None:
    await seed(db)
    trip = await db.fetchval(
        "INSERT INTO episodes (chat_id, summary, started_at, ended_at, message_count) "
        "VALUES ($1, 'User planned two weeks in Portugal.', $2, $2, 12) RETURNING id",
        CHAT,
        at(400),
    )
    other = await db.fetchval(
        "INSERT INTO episodes (chat_id, summary, started_at, ended_at, message_count) "
        "VALUES ($1, 'User planned Japan.', $2, $2, 3) RETURNING id",
        OTHER,
        at(400),
    )
    async with db.connection() as conn:
        for episode, chat in ((trip, CHAT), (other, OTHER)):
            await store_vectors(
                conn,
                "episode_embeddings",
                "episode_id",
                [(episode, np.array([0, 1, 0], dtype=np.float32), chat)],
                Axis.model,
            )
    body, _ = await call(ctx(db, embedder=Axis()), query="holiday getaway")
    assert [e["id"] for e in body["episodes"]] == [trip]  # no shared word; the same meaning
    assert body["episodes"][0]["summary"] == "User planned two weeks in Portugal."
    words_only, _ = await call(ctx(db), query="holiday getaway")
    assert words_only["episodes"] == [] and words_only["degraded"] is True


async def test_seed_004_test_7c_the_full_text_of_what_the_bot_said_this_morning(
    db: Database,
) -> None:
    morning = datetime(2026, 3, 10, 7, 2, tzinfo=UTC)  # 08:02 in Madrid
    briefing = "Good morning! Your check-in: " + "two goals are due this week, " * 120
    await insert_rows(
        db,
        CHAT,
        [
            ChatMessage(
                role="assistant",
                content="Yesterday's check-in: all quiet.",
                created_at=morning - timedelta(days=1),
            ),
            ChatMessage(role="assistant", content=briefing, created_at=morning),
            ChatMessage(
                role="user", content="thanks, later", created_at=morning + timedelta(hours=1)
            ),
        ],
    )
    body, err = await call(ctx(db), query="check-in", date_from="2026-03-10")
    assert not err and len(briefing) > 3000
    [said] = body["messages"]
    assert said == {"at": "2026-03-10 08:02", "role": "assistant", "text": briefing.strip()}


def test_a_long_message_is_cut_around_the_words_that_matched() -> None:
    text = "Lots of words. " * 40 + "The account number is 42. " + "More words after. " * 40
    cut = snippet(text, ["account"], 120)
    assert cut.startswith("…") and cut.endswith("…") and len(cut) <= 120
    assert "account number is 42" in cut
    assert snippet("short", ["x"]) == "short"
    assert snippet(text, ["absent"], 50).startswith("Lots of words.")


def test_recall_conversation_is_one_of_the_memory_tools() -> None:
    names = [t.name for t in memory_tools()]
    assert names[-1] == "recall_conversation"
    spec = memory_registry().get("recall_conversation")
    assert spec is not None
    props = spec.spec()["input_schema"]["properties"]
    assert set(props) == {"query", "date_from", "date_to", "limit"}


# --- seed 004 Tests 2 and 12, through the agent ------------------------------------------------


def system_text(body: Mapping[str, Any]) -> str:
    system = body.get("system", "")
    return system if isinstance(system, str) else "".join(b["text"] for b in system)


def turn_requests(fake: FakeAnthropic, question: str) -> list[dict[str, Any]]:
    """The bodies of the turn requests (not compaction ones) carrying ``question``."""
    bodies = [r.body for r in fake.answered if not is_extraction(r.body)]
    return [b for b in bodies if question in json.dumps(b["messages"])]


def section(system: str, header: str) -> str:
    """The part of ``system`` from ``header`` to the next section header (or the end)."""
    start = system.index(header)
    rest = system[start + len(header) :]
    ends = [i for i in (rest.find("\n═══ "),) if i >= 0]
    return rest[: min(ends)] if ends else rest


@asynccontextmanager
async def bot(
    db: Database, fake: FakeAnthropic, clock: Any, **env: str
) -> AsyncIterator[tuple[Agent, CompactorActor, Settings]]:
    settings = load_settings({"TIMEZONE": TZ, **env}, dotenv=None)
    embedder = LocalEmbedder()
    async with (
        AnthropicLLM(api_key=fake.api_key, base_url=fake.base_url, db=db, timeout=10) as llm,
        trio.open_nursery() as nursery,
    ):
        agent = sql_agent(
            db,
            llm,
            timezone=TZ,
            clock=clock,
            embedder=embedder,
            context_token_budget=settings.context_token_budget,
            extra_tools=memory_tools(),
        )
        compactor = sql_compactor(db, llm, embedder, settings, tools=agent.tools)
        agent.on_over_budget = compactor.request
        await nursery.start(compactor.run)
        yield agent, compactor, settings
        nursery.cancel_scope.cancel()


async def say(db: Database, agent: Agent, compactor: CompactorActor, n: int, text: str) -> str:
    reply = await agent.run_turn(TurnInput(CHAT, text, (n,), (n,), (f"update:{n}",)))
    async with db.transaction() as conn:
        if reply.persist is not None:
            await reply.persist(conn)
    if reply.after_commit is not None:
        await reply.after_commit()
    await compactor.wait_idle()
    return reply.text


async def test_seed_004_test_2_message_1_is_in_an_episode_summary_after_compaction(
    db: Database, fake_claude: FakeAnthropic
) -> None:
    """22 short messages, then a quiet night: the idle compaction keeps the newest 40 rows
    (messages 3-22 and their replies) verbatim; message 1 is in "Earlier in this
    conversation", message 3 still in the history."""
    fake_claude.responder = ScriptedExtractor()
    fake_claude.default_text = "Got it."
    evening = datetime.now(UTC) - timedelta(hours=8)
    clock = [evening]
    async with bot(db, fake_claude, lambda: clock[0], COMPACTION_KEEP_RECENT="40") as (
        agent,
        compactor,
        settings,
    ):
        for n in range(1, 23):
            clock[0] = evening + timedelta(minutes=n)
            await say(db, agent, compactor, n, f"Message {n}")
        assert await db.fetchval("SELECT count(*) FROM episodes") == 0  # nothing due yet
        sweep = CompactionSweep(
            SqlBacklog(db), compactor.compact, CompactionRule.from_settings(settings), interval=3600
        )
        assert [(c, r) for c, r, _ in (await sweep.run_once()).chats] == [(CHAT, "idle")]
        clock[0] = datetime.now(UTC)
        fake_claude.queue_text("Message 3 was “Message 3”.")
        await say(db, agent, compactor, 23, "What was message number 3?")
        fake_claude.queue_text("Message 1 was summarised: you wrote “Message 1”.")
        await say(db, agent, compactor, 24, "What was message number 1?")
    [asked_3] = turn_requests(fake_claude, "What was message number 3?")
    system = system_text(asked_3)
    history = section(system, HISTORY_HEADER)
    earlier = section(system, EPISODES_HEADER)
    assert "User: Message 3\n" in history + "\n" and "User: Message 1\n" not in history + "\n"
    assert 'User wrote from "Message 1" to "Message 2" (2 messages).' in earlier
    assert system.index(EPISODES_HEADER) < system.index(HISTORY_HEADER)
    assert (
        await db.fetchval(
            "SELECT count(*) FROM chat_messages WHERE chat_id = $1 AND compacted_at IS NOT NULL",
            CHAT,
        )
        == 4
    )


@pytest.mark.slow
async def test_seed_004_test_12_an_account_number_said_300_messages_ago(
    db: Database, fake_claude: FakeAnthropic
) -> None:
    """The number leaves the window (compacted by rows); the model finds it with
    recall_conversation."""
    fake_claude.responder = ScriptedExtractor()
    fake_claude.default_text = "Noted."
    start = datetime.now(UTC) - timedelta(hours=2)
    clock = [start]
    async with bot(db, fake_claude, lambda: clock[0]) as (agent, compactor, _):
        await say(db, agent, compactor, 1, ACCOUNT)
        for n in range(2, 302):
            clock[0] = start + timedelta(seconds=20 * n)
            await say(db, agent, compactor, n, f"Message {n}: lunch was fine.")
        clock[0] = datetime.now(UTC)
        fake_claude.queue_tool_use("recall_conversation", {"query": "AWS dev account number"})
        fake_claude.queue_text("Your AWS dev account number is 123456789012.")
        answer = await say(db, agent, compactor, 302, "What's my AWS dev account number?")
    assert answer == "Your AWS dev account number is 123456789012."
    asked, looked = turn_requests(fake_claude, "What's my AWS dev account number?")
    # out of the window (compacted); the model has the episodes and the tool
    assert "123456789012" not in section(system_text(asked), HISTORY_HEADER)
    assert EPISODES_HEADER in system_text(asked)
    assert "recall_conversation" in [t["name"] for t in asked["tools"]]
    [result] = [b for b in looked["messages"][-1]["content"] if b["type"] == "tool_result"]
    found = json.loads(
        result["content"] if isinstance(result["content"], str) else result["content"][0]["text"]
    )
    assert found["messages"][0]["text"] == ACCOUNT and found["messages"][0]["compacted"] is True
    assert await db.fetchval(
        "SELECT compacted_at IS NOT NULL FROM chat_messages WHERE content = $1", ACCOUNT
    )
