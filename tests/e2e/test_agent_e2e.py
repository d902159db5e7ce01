"""The agent through the real SDKs against the strict fake Anthropic and OpenAI servers on a real
database (tool chains, stored rows, usage rows, sorry replies, re-runs), and end to end through
the whole bot: fake Bot API update -> chat actor -> agent -> log_weight -> outbox -> sendMessage.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, date, datetime
from typing import Any

import pytest
import structlog
import trio
from fakes.anthropic_api import Failure as AnthropicFailure
from fakes.anthropic_api import FakeAnthropic
from fakes.bot_api import DEFAULT_TOKEN, run_fake_bot_api
from fakes.openai_api import CHAT_COMPLETIONS, FakeOpenAI, run_fake_openai
from fakes.openai_api import Failure as OpenAIFailure
from structlog.testing import capture_logs

from actors.agent.handler import Agent, sql_agent
from actors.agent.tool_loop import SORRY_FAILED, Guardrails
from actors.agent.turn import TurnInput, TurnReply
from actors.errors import ModelUnavailable
from actors.settings import load_settings
from actors.system import BotSystem
from actors.telegram.client import BotApiClient
from memory.llm.anthropic_provider import AnthropicLLM
from memory.llm.cost import DEFAULT_RATES, Rate, token_cost
from memory.llm.openai_provider import OpenAICompatibleLLM
from memory.tools.results import STORAGE_CAP, truncate_for_storage
from runtime.db import Database
from runtime.serve import serve
from runtime.shutdown import Shutdown

pytestmark = pytest.mark.slow  # the whole bot end to end (a few seconds each)

CHAT = 5550002
TZ = "Europe/Madrid"
NOW = datetime(2024, 6, 15, 23, 30, tzinfo=UTC)  # already 16 June, 01:30, in Madrid
OAI_MODEL = "gpt-4o-mini"
OAI_RATES = {**DEFAULT_RATES, OAI_MODEL: Rate(0.15, 0.60)}
RUNS = [
    ("e1", "2024-06-09T07:00:00+02:00", "Sunday run by the river, 10 km. " + "Legs heavy. " * 40),
    ("e2", "2024-06-02T07:30:00+02:00", "Long run in the hills, felt strong. " + "Sun. " * 60),
    ("e3", "2024-05-26T08:00:00+02:00", "Short run, knee hurt a bit. " + "Rain. " * 60),
]


async def add_runs(db: Database) -> None:
    for uuid, at, text in RUNS:
        await db.execute(
            "INSERT INTO entries (uuid, created_at, timezone, text, chat_id)"
            " VALUES ($1, $2, $3, $4, $5)",
            uuid,
            datetime.fromisoformat(at),
            TZ,
            text,
            CHAT,
        )


def turn(text: str, update: int = 100) -> TurnInput:
    return TurnInput(CHAT, text, (update,), (update + 1,), (f"update:{update}",))


async def commit(db: Database, reply: TurnReply) -> None:
    """What the chat actor does with the reply: persist hook inside a transaction."""
    async with db.transaction() as conn:
        if reply.persist is not None:
            await reply.persist(conn)


def system_of(body: dict[str, Any]) -> str:
    """A request's system prompt as one string (it is sent as text blocks)."""
    system = body["system"]
    return system if isinstance(system, str) else "\n\n".join(b["text"] for b in system)


async def chat_rows(db: Database) -> list[dict[str, Any]]:
    rows = await db.fetch("SELECT * FROM chat_messages WHERE chat_id = $1 ORDER BY id", CHAT)
    return [dict(r) for r in rows]


async def usage(db: Database) -> list[dict[str, Any]]:
    return [dict(r) for r in await db.fetch("SELECT * FROM api_usage ORDER BY id")]


@asynccontextmanager
async def claude_agent(
    db: Database,
    fake: FakeAnthropic,
    request_timeout: float = 5.0,
    guardrails: Guardrails | None = None,
) -> AsyncIterator[Agent]:
    async with AnthropicLLM(
        api_key=fake.api_key, base_url=fake.base_url, db=db, timeout=request_timeout
    ) as llm:
        options: dict[str, Any] = {} if guardrails is None else {"guardrails": guardrails}
        yield sql_agent(db, llm, timezone=TZ, clock=lambda: NOW, **options)


# --- Anthropic -------------------------------------------------------------------------------


async def test_claude_tool_chain_round_trip(db: Database, fake_claude: FakeAnthropic) -> None:
    await add_runs(db)
    fake_claude.queue_tool_use(
        "search_entries", {"query": "run"}, text="Let me check.", input_tokens=900, output_tokens=50
    )
    fake_claude.queue_text("You ran three times lately.", input_tokens=1200, output_tokens=40)
    async with claude_agent(db, fake_claude) as agent:
        reply = await agent.run_turn(turn("When did I last run?"))
    assert reply.text == "You ran three times lately."
    assert [r["role"] for r in await chat_rows(db)] == ["user"]  # stored before the reply
    await commit(db, reply)

    user, call, result, final = await chat_rows(db)
    assert (user["role"], user["content"]) == ("user", "When did I last run?")
    assert user["external_message_id"] == "update:100"
    assert user["created_at"] == NOW
    [tool_call] = json.loads(call["tool_calls"])
    assert (call["role"], call["content"]) == ("assistant", "Let me check.")
    assert (tool_call["name"], tool_call["input"]) == ("search_entries", {"query": "run"})
    assert tool_call["id"].startswith("toolu_")
    assert (result["role"], result["tool_call_id"], result["tool_name"]) == (
        "tool_result",
        tool_call["id"],
        "search_entries",
    )
    sent = fake_claude.requests[1].messages[-1]["content"][0]
    assert sent["type"] == "tool_result" and sent["tool_use_id"] == tool_call["id"]
    assert len(sent["content"]) > STORAGE_CAP  # the model saw the whole result ...
    assert result["content"] == truncate_for_storage("search_entries", sent["content"])
    assert len(result["content"]) <= STORAGE_CAP and "e1" in result["content"]  # ... not storage
    assert (final["role"], final["content"], final["tool_calls"]) == (
        "assistant",
        "You ran three times lately.",
        None,
    )
    assert all(r["compacted_at"] is None for r in await chat_rows(db))

    first = fake_claude.requests[0].body
    assert "Now: Sunday, 16 June 2024, 01:30 (Europe/Madrid, UTC+02:00)" in system_of(first)
    assert "log_weight" in [t["name"] for t in first["tools"]]
    rows = await usage(db)
    assert [
        (r["purpose"], r["chat_id"], r["input_tokens"], r["output_tokens"], r["ok"]) for r in rows
    ] == [("agent", CHAT, 900, 50, True), ("agent", CHAT, 1200, 40, True)]
    # priced with their prompt-cache parts: the first call wrote the context, the second read it
    assert rows[0]["cache_write_tokens"] > 0 and rows[1]["cache_read_tokens"] > 0
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


@pytest.mark.parametrize(
    ("failure", "cause", "status"),
    [
        (AnthropicFailure.rate_limited(retry_after=None), "LLMRateLimited", 429),
        (AnthropicFailure.overloaded(), "LLMOverloaded", 529),
        (AnthropicFailure.server_error(500), "LLMUnavailable", 500),
        (AnthropicFailure.slow(3.0), "LLMTimeout", None),
    ],
    ids=["429", "529", "500", "timeout"],
)
async def test_claude_transient_failure_is_retried_within_the_turn(
    db: Database,
    fake_claude: FakeAnthropic,
    restore_logging: None,
    failure: AnthropicFailure,
    cause: str,
    status: int | None,
) -> None:
    # whatever an earlier test configured, warnings reach the capture
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        cache_logger_on_first_use=False,
    )
    fake_claude.fail_next(failure)
    fake_claude.queue_text("Here.")
    quick = Guardrails(model_retry_base=0.05)
    async with claude_agent(db, fake_claude, request_timeout=0.5, guardrails=quick) as agent:
        with capture_logs() as logs:
            reply = await agent.run_turn(turn("Are you there?"))
    assert reply.text == "Here."
    [event] = [e for e in logs if e["event"] == "agent.model_retrying"]
    assert (event["cause"], event["chat_id"], event["status"]) == (cause, CHAT, status)
    assert event["log_level"] == "warning" and event["attempt"] == 1
    assert [e["llm_calls"] for e in logs if e["event"] == "agent.turn"] == [1]
    calls = await usage(db)
    assert [(r["purpose"], r["ok"]) for r in calls] == [("agent", False), ("agent", True)]


@pytest.mark.parametrize(
    ("failure", "cause"),
    [
        (AnthropicFailure.rate_limited(retry_after=30), "LLMRateLimited"),
        (AnthropicFailure.overloaded(), "LLMOverloaded"),
        (AnthropicFailure.slow(3.0), "LLMTimeout"),
    ],
    ids=["429", "529", "timeout"],
)
async def test_claude_down_through_the_turn_postpones_it_and_keeps_the_user_row(
    db: Database, fake_claude: FakeAnthropic, failure: AnthropicFailure, cause: str
) -> None:
    fake_claude.fail_next(failure)
    short = Guardrails(turn_seconds=5, model_retry_base=10)  # the first wait would pass the limit
    async with claude_agent(db, fake_claude, request_timeout=0.5, guardrails=short) as agent:
        with pytest.raises(ModelUnavailable) as info:
            await agent.run_turn(turn("Are you there?"))
    assert type(info.value.cause).__name__ == cause
    [row] = await chat_rows(db)
    assert (row["role"], row["content"], row["external_message_id"]) == (
        "user",
        "Are you there?",
        "update:100",
    )
    [call] = await usage(db)
    assert (call["purpose"], call["ok"], call["cost_usd"]) == ("agent", False, 0.0)


@pytest.mark.parametrize(
    ("failure", "status", "fix"),
    [
        (None, 401, "check ANTHROPIC_API_KEY"),
        (
            AnthropicFailure.error(403, "permission_error", "no access"),
            403,
            "check ANTHROPIC_API_KEY",
        ),
        (
            AnthropicFailure.error(404, "not_found_error", "model: claude-nope"),
            404,
            "check ANTHROPIC_MODEL or ANTHROPIC_BASE_URL",
        ),
    ],
    ids=["401-wrong-key", "403", "404"],
)
async def test_claude_refusing_our_requests_says_sorry_at_once_and_names_the_setting(
    db: Database,
    fake_claude: FakeAnthropic,
    restore_logging: None,
    failure: AnthropicFailure | None,
    status: int,
    fix: str,
) -> None:
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        cache_logger_on_first_use=False,
    )
    if failure is not None:
        fake_claude.fail_next(failure)
    key = "sk-ant-wrong" if failure is None else fake_claude.api_key
    async with AnthropicLLM(api_key=key, base_url=fake_claude.base_url, db=db, timeout=5.0) as llm:
        agent = sql_agent(db, llm, timezone=TZ, clock=lambda: NOW)
        with capture_logs() as logs:
            reply = await agent.run_turn(turn("Are you there?"))
    assert reply.text == SORRY_FAILED and len(fake_claude.requests) == 1  # at once, no retry
    [event] = [e for e in logs if e["event"] == "agent.model_rejected"]
    assert (event["status"], event["fix"], event["log_level"]) == (status, fix, "error")
    assert "sk-ant-wrong" not in str(event)


async def test_rerun_after_failure_keeps_one_user_row_and_history(
    db: Database, fake_claude: FakeAnthropic
) -> None:
    fake_claude.fail_next(AnthropicFailure.overloaded())
    fake_claude.queue_text("Yes, here.")
    fake_claude.queue_text("You asked whether I was there.")
    short = Guardrails(turn_seconds=5, model_retry_base=10)
    async with (
        claude_agent(db, fake_claude, guardrails=short) as down,
        claude_agent(db, fake_claude) as agent,
    ):
        with pytest.raises(ModelUnavailable):
            await down.run_turn(turn("Are you there?"))
        reply = await agent.run_turn(turn("Are you there?"))  # the update is processed again
        await commit(db, reply)
        await commit(db, await agent.run_turn(turn("What did I ask?", update=101)))
    assert [(r["role"], r["content"]) for r in await chat_rows(db)] == [
        ("user", "Are you there?"),
        ("assistant", "Yes, here."),
        ("user", "What did I ask?"),
        ("assistant", "You asked whether I was there."),
    ]
    second, third = fake_claude.answered
    assert "User: Are you there?" not in system_of(second.body)
    assert "[01:30, just now] User: Are you there?" in system_of(third.body)
    assert "Assistant: Yes, here." in system_of(third.body)
    assert third.messages == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What did I ask?", "cache_control": {"type": "ephemeral"}}
            ],
        }
    ]


@pytest.mark.parametrize(
    ("bad_input", "message"),
    [
        ({"weight_kg": "heavy"}, "weight_kg must be a number, got a string"),
        ({}, "missing required field 'weight_kg'"),
    ],
    ids=["wrong-type", "missing-field"],
)
async def test_bad_tool_input_is_an_error_result_and_the_turn_goes_on(
    db: Database, fake_claude: FakeAnthropic, bad_input: dict[str, Any], message: str
) -> None:
    call_id = fake_claude.queue_tool_use("log_weight", bad_input, text="Logging it.")
    fake_claude.queue_text("Sorry, what was the number?")
    async with claude_agent(db, fake_claude) as agent:
        reply = await agent.run_turn(turn("I weighed heavy today"))
    assert reply.text == "Sorry, what was the number?"
    _, second = fake_claude.answered
    [result] = second.messages[-1]["content"]
    assert (result["type"], result["tool_use_id"], result.get("is_error")) == (
        "tool_result",
        call_id,
        True,
    )
    assert json.loads(result["content"]) == {"error": message, "field": "weight_kg"}
    assert await db.fetchval("SELECT count(*) FROM daily_metrics") == 0
    await commit(db, reply)
    rows = await chat_rows(db)
    assert [r["role"] for r in rows] == ["user", "assistant", "tool_result", "assistant"]
    assert rows[2]["tool_call_id"] == call_id and message in rows[2]["content"]


# --- OpenAI-compatible -----------------------------------------------------------------------


@asynccontextmanager
async def openai_agent(db: Database, fake: FakeOpenAI) -> AsyncIterator[Agent]:
    async with OpenAICompatibleLLM(
        api_key=fake.api_key,
        model=OAI_MODEL,
        base_url=fake.base_url,
        db=db,
        rates=OAI_RATES,
        timeout=5.0,
    ) as llm:
        yield sql_agent(
            db, llm, timezone=TZ, clock=lambda: NOW, guardrails=Guardrails(model_retry_base=0.05)
        )


async def test_openai_tool_chain_and_rate_limit(db: Database) -> None:
    await add_runs(db)
    async with run_fake_openai() as fake, openai_agent(db, fake) as agent:
        [call_id] = fake.queue_tool_calls(
            [("search_entries", {"query": "knee"})], prompt_tokens=800, completion_tokens=30
        )
        fake.queue_chat_text("Your knee hurt on 26 May.", prompt_tokens=1000, completion_tokens=20)
        reply = await agent.run_turn(turn("When did my knee hurt?"))
        assert reply.text == "Your knee hurt on 26 May."
        await commit(db, reply)
        fake.fail_next(CHAT_COMPLETIONS, OpenAIFailure.rate_limited(retry_after=None))
        fake.queue_chat_text("Again: 26 May.", prompt_tokens=1100, completion_tokens=8)
        again = await agent.run_turn(turn("And again?", update=101))
        assert again.text == "Again: 26 May."  # the 429 was waited out within the turn
        await commit(db, again)
        second = fake.calls_to(CHAT_COMPLETIONS)[1].params
    tool_message = second["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == call_id
    rows = await chat_rows(db)
    assert [r["role"] for r in rows] == [
        "user",
        "assistant",
        "tool_result",
        "assistant",
        "user",
        "assistant",
    ]
    assert json.loads(rows[1]["tool_calls"])[0]["id"] == call_id
    assert rows[2]["tool_call_id"] == call_id and len(rows[2]["content"]) <= STORAGE_CAP
    assert rows[2]["content"] == truncate_for_storage("search_entries", tool_message["content"])
    calls = await usage(db)
    assert [
        (r["provider"], r["purpose"], r["input_tokens"], r["output_tokens"], r["ok"]) for r in calls
    ] == [
        ("openai", "agent", 800, 30, True),
        ("openai", "agent", 1000, 20, True),
        ("openai", "agent", 0, 0, False),
        ("openai", "agent", 1100, 8, True),
    ]
    assert calls[0]["cost_usd"] == pytest.approx((800 * 0.15 + 30 * 0.60) / 1e6)


# --- the whole bot -----------------------------------------------------------------------------


async def wait_for(predicate: Any, limit: float = 15.0) -> None:
    """Poll a condition other servers change (no event to wait on)."""
    with trio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110
            await trio.sleep(0.05)


async def test_weight_message_end_to_end(db: Database, fake_claude: FakeAnthropic) -> None:
    settings = load_settings(
        {
            "ENGRAM_PORT": "0",
            "TELEGRAM_BOT_TOKEN": DEFAULT_TOKEN,
            "TELEGRAM_SECRET_TOKEN": "agent-e2e-secret",
            "TELEGRAM_ALLOWED_CHAT_IDS": str(CHAT),
            "SHUTDOWN_DEADLINE": "5",
        },
        dotenv=None,
    )
    fake_claude.queue_tool_use(
        "log_weight", {"weight_kg": 76.5}, input_tokens=700, output_tokens=30
    )
    fake_claude.queue_text("Logged 76.5 kg for today.", input_tokens=800, output_tokens=12)
    shutdown = Shutdown(deadline=5, signals=())
    codes: list[int] = []
    async with run_fake_bot_api() as bot_api, claude_agent(db, fake_claude) as agent:

        def build(s: Any, d: Database, sh: Shutdown) -> BotSystem:
            from actors.telegram.poller import Poller

            def bot() -> BotApiClient:
                return BotApiClient(DEFAULT_TOKEN, base_url=bot_api.base_url)

            system = BotSystem(s, d, sh, polling=True, turns=agent, bot_factory=bot)
            system.poller_factory = lambda *a, **k: Poller(*a, poll_timeout=1, **k)
            return system

        async def run() -> None:
            codes.append(await serve(settings, db, build, shutdown=shutdown))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            update = bot_api.push_message(CHAT, "I weighed 76.5 this morning")
            await wait_for(lambda: bot_api.sent_texts(CHAT))
            shutdown.request_stop("test")
        assert bot_api.sent_texts(CHAT) == ["Logged 76.5 kg for today."]
    assert codes == [0]
    metric = await db.fetchrow("SELECT chat_id, date, weight_kg FROM daily_metrics")
    assert metric is not None and dict(metric) == {
        "chat_id": CHAT,
        "date": date(2024, 6, 16),
        "weight_kg": 76.5,
    }
    outbox = await db.fetchrow("SELECT text, status FROM outbox WHERE chat_id = $1", CHAT)
    assert outbox is not None and dict(outbox) == {
        "text": "Logged 76.5 kg for today.",
        "status": "sent",
    }
    rows = await chat_rows(db)
    assert [r["role"] for r in rows] == ["user", "assistant", "tool_result", "assistant"]
    assert rows[0]["external_message_id"] == f"update:{update['update_id']}"
    assert json.loads(rows[2]["content"])["logged"] == {"date": "2024-06-16", "weight_kg": 76.5}
    assert [r["purpose"] for r in await usage(db)] == ["agent", "agent"]
    assert await db.fetchval("SELECT status FROM inbox") == "done"
