"""Routine messages are memory (seed 004 "Phase 2.5", Tests 7–7e), on the real database: what a
routine sends is stored verbatim as an assistant row (source 'routine', its name) with a
2–3 sentence summary made when it is sent by the memory model (a short message is its own
summary, no model call); the window shows ``Assistant [<routine> @ HH:MM, age]: <summary>``,
so a 600-word routine costs it tens of tokens, not hundreds; two routine summaries and 15
messages all fit; recall_conversation returns the full text; forgetting a topic removes a
routine row whose summary or text mentions it, and nothing of it is left anywhere."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import trio
from db_scan import rows_containing

from actors.agent.context import build_context, estimate_tokens
from actors.agent.turn import TurnInput, TurnReply
from actors.agent.window_text import format_window
from actors.chat.actor import ChatActor
from actors.chat.deps import ChatDeps
from actors.chat.proactive import Proactive
from actors.chat.store import SqlChatStore
from actors.chat.wakes import Wake
from actors.queues import inbox
from actors.scheduler.routine import INBOX_KIND, Brief, DueRun, RoutineContext, update_key
from memory.conversation.messages import (
    ChatMessage,
    insert_routine_message,
    insert_rows,
    recent_window,
)
from memory.conversation.routine_summary import (
    PURPOSE,
    RoutineSummarizer,
    fallback_summary,
    is_own_summary,
)
from memory.errors import LLMUnavailable
from memory.llm.protocol import Completion, TextBlock
from memory.patterns.forgetting import count_messages_mentioning, delete_messages_mentioning
from memory.retrieval.retriever import RetrievedMemory
from memory.tools.memory_tools import memory_registry
from memory.tools.registry import ToolContext
from runtime.db import Database

CHAT = 22044
TZ = "Europe/Madrid"
SENT = datetime(2026, 3, 1, 6, 2, tzinfo=UTC)  # 07:02 in Madrid
NOW = SENT + timedelta(hours=8)
WEATHER = "drizzle turning to sunshine by noon, high of fourteen degrees"
SUMMARY = (
    "Morning briefing: two goal deadlines this week and a focus block suggested for the "
    "SingPass integration. Weather and three tasks were listed."
)


def briefing(words: int = 600) -> str:
    """A ~600-word morning briefing (under recall's 4000-character best snippet), with the
    weather sentence in its middle."""
    filler = [
        "plan",
        "the",
        "day",
        "calmly",
        "and",
        "keep",
        "the",
        "focus",
        "block",
        "for",
        "the",
        "integration",
        "work",
    ]
    body = [filler[i % len(filler)] for i in range(words - len(WEATHER.split()) - 4)]
    half = len(body) // 2
    return " ".join([*body[:half], "Weather", "today:", *WEATHER.split(), "Tasks", *body[half:]])


@attrs.define
class MemoryModel:
    """MEMORY_MODEL: answers ``answer`` (or raises ``error``); records its calls."""

    answer: str = SUMMARY
    error: Exception | None = None
    calls: list[dict[str, Any]] = attrs.field(factory=list)

    async def complete(self, **kw: Any) -> Completion:
        self.calls.append(kw)
        if self.error is not None:
            raise self.error
        return Completion((TextBlock(self.answer),), "end_turn", 900, 60, "fake-haiku")


@attrs.define
class Sends:
    name: str
    text: str
    title: str = "Morning summary"
    default_schedule: str = "0 7 * * *"

    async def decide(self, ctx: RoutineContext) -> Brief | None:
        return Brief(text=self.text)


class NoTurns:
    async def run_turn(self, turn: TurnInput) -> TurnReply:
        raise AssertionError("no turn expected")


class Quiet:
    async def send_chat_action(self, chat_id: int | str, action: str = "typing") -> None:
        pass


async def send_routine(db: Database, name: str, text: str, model: MemoryModel, job: int) -> None:
    """A due run of a routine that sends ``text``, through the real chat actor."""
    await db.execute(
        "INSERT INTO chat_proactive (chat_id, active) VALUES ($1, true) ON CONFLICT DO NOTHING",
        CHAT,
    )
    proactive = Proactive(
        db=db, routines={name: Sends(name, text)}, timezone=TZ, summarizer=RoutineSummarizer(model)
    )
    deps = ChatDeps(
        store=SqlChatStore(db),
        turns=NoTurns(),
        bot=Quiet(),
        outbox_ready=lambda *_: None,
        proactive=proactive,
        wall_clock=lambda: SENT,
    )
    run = DueRun(job_id=job, chat_id=CHAT, name=name, kind="routine", due_at=SENT)
    await inbox.insert_update(db, update_key(job, SENT), None, CHAT, INBOX_KIND, run.to_payload())
    await ChatActor(CHAT, deps).handle(Wake())


# --- Test 7: stored verbatim with a summary made when sent ---------------------------------------


async def test_7_a_long_routine_is_stored_verbatim_with_a_shorter_summary_by_the_memory_model(
    db: Database,
) -> None:
    text, model = briefing(), MemoryModel()
    await send_routine(db, "morning-summary", text, model, 1)
    row = await db.fetchrow(
        "SELECT role, source, routine_name, content, summary, created_at FROM chat_messages "
        "WHERE chat_id = $1",
        CHAT,
    )
    assert row is not None
    assert (row["role"], row["source"], row["routine_name"]) == (
        "assistant",
        "routine",
        "morning-summary",
    )
    assert row["content"] == text and row["summary"] == SUMMARY and row["created_at"] == SENT
    assert len(row["summary"]) < len(row["content"]) / 5
    [call] = model.calls
    assert call["purpose"] == PURPOSE and call["tools"] == [] and text in call["messages"][0].text
    # the summary call is the run's only model call, and recorded with it
    assert await db.fetchval("SELECT model_calls FROM proactive_runs WHERE chat_id = $1", CHAT) == 1
    sent = await db.fetchval("SELECT text FROM outbox WHERE chat_id = $1", CHAT)
    assert sent == text  # the person gets the whole message


async def test_a_short_routine_is_its_own_summary_and_a_failing_model_leaves_a_cut(
    db: Database,
) -> None:
    model = MemoryModel()
    short = "Heads-up: the team offsite is tomorrow, 15 March, at 9:00."
    assert is_own_summary(short)
    await send_routine(db, "event-reminders", short, model, 1)
    assert model.calls == []
    down = MemoryModel(error=LLMUnavailable("down", provider="anthropic", model="claude-haiku-4-5"))
    await send_routine(db, "morning-summary", briefing(), down, 2)
    summaries = [
        r["summary"]
        for r in await db.fetch(
            "SELECT summary FROM chat_messages WHERE chat_id = $1 ORDER BY id", CHAT
        )
    ]
    assert summaries == [short, fallback_summary(briefing())]
    assert len(summaries[1]) <= 301 and summaries[1].endswith("…")
    assert await db.fetchval("SELECT count(*) FROM outbox WHERE chat_id = $1", CHAT) == 2


# --- Tests 7b, 7d, 7e: the window shows the summary -----------------------------------------------


async def test_7b_the_window_shows_the_labelled_summary_and_a_600_word_routine_costs_60_tokens(
    db: Database,
) -> None:
    text = briefing()
    await send_routine(db, "morning-summary", text, MemoryModel(), 1)
    window = await recent_window(db, CHAT, 120)
    shown = format_window(window, TZ, NOW)
    assert f"Assistant [morning-summary @ 07:02, 8 hours ago]: {SUMMARY}" in shown
    assert WEATHER not in shown
    full = estimate_tokens(text)
    cost = estimate_tokens(shown)
    assert full > 500 and cost < 80, (full, cost)  # ~60 tokens, not ~500
    # the same in the context the model gets
    ctx = build_context(now=NOW, timezone=TZ, memory=RetrievedMemory(), window=window, tools=())
    assert SUMMARY in ctx.system and WEATHER not in ctx.system
    assert "recall_conversation has its full text" in ctx.system


async def test_7e_two_routine_summaries_and_15_messages_all_fit_the_window(db: Database) -> None:
    await send_routine(db, "morning-summary", briefing(), MemoryModel(), 1)
    check_in = briefing(300).replace("Weather", "Check-in")
    await send_routine(
        db,
        "smart-checkin",
        check_in,
        MemoryModel(
            answer="Checked in: two deadlines, three hours since the "
            "last message; suggested a focus session."
        ),
        2,
    )
    talk = [
        ChatMessage(
            role="user" if i % 2 == 0 else "assistant",
            content=f"message {i} about gardening",
            created_at=SENT + timedelta(minutes=10 + i),
        )
        for i in range(15)
    ]
    await insert_rows(db, CHAT, talk)
    window = await recent_window(db, CHAT, 20)  # fewer than 20 verbatim slots
    shown = format_window(window, TZ, NOW)
    assert "[morning-summary @ 07:02" in shown and "[smart-checkin @ 07:02" in shown
    assert all(f"message {i} about gardening" in shown for i in range(15))
    assert estimate_tokens(shown) < 400, estimate_tokens(shown)
    assert WEATHER not in shown


# --- Tests 7c, 7d: the full text through recall ---------------------------------------------------


async def test_7c_recall_conversation_returns_the_full_routine_text(db: Database) -> None:
    text = briefing()
    await send_routine(db, "morning-summary", text, MemoryModel(), 1)
    ctx = ToolContext(db=db, embedder=None, chat_id=CHAT, timezone=TZ, now=NOW)
    outcome = await memory_registry().call(
        "recall_conversation", {"query": "weather drizzle sunshine forecast"}, ctx
    )
    assert not outcome.is_error
    first = json.loads(outcome.content)["messages"][0]
    assert first["role"] == "assistant" and first["text"] == text
    assert WEATHER in first["text"] and len(first["text"]) > len(SUMMARY) * 5


# --- forgetting ---------------------------------------------------------------------------------


async def test_forgetting_removes_a_routine_row_by_its_summary_or_text_and_leaves_nothing(
    db: Database,
) -> None:
    await send_routine(db, "morning-summary", briefing(), MemoryModel(), 1)
    # a summary that says what the text does not (the model paraphrased): still found
    await insert_routine_message(
        db,
        CHAT,
        "weekly-recap",
        "A quiet week of notes and walks.",
        "The person mentioned Zanzibar plans twice.",
        SENT,
    )
    assert (await count_messages_mentioning(db, CHAT, "zanzibar")).messages == 1
    await db.execute("UPDATE outbox SET status = 'sent' WHERE chat_id = $1", CHAT)  # delivered
    async with db.transaction() as conn:
        gone = await delete_messages_mentioning(conn, CHAT, "zanzibar")
    assert gone.messages == 1
    assert await rows_containing(db, ["zanzibar"]) == {}
    async with db.transaction() as conn:
        gone = await delete_messages_mentioning(conn, CHAT, "drizzle")
    assert gone.messages == 1
    assert await rows_containing(db, ["drizzle"]) == {}
    assert await db.fetchval("SELECT count(*) FROM chat_messages WHERE chat_id = $1", CHAT) == 0


async def test_summaries_are_kept_out_of_other_chats(db: Database) -> None:
    await insert_routine_message(db, CHAT + 1, "weekly-recap", "other chat", "other chat", SENT)
    await send_routine(db, "morning-summary", "short one", MemoryModel(), 1)
    with trio.fail_after(5):
        window = await recent_window(db, CHAT, 120)
    assert [(r.routine_name, r.summary) for r in window] == [("morning-summary", "short one")]
