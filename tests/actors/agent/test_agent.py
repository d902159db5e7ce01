"""The agent's turn loop under MockClock through in-memory fakes (guardrails, partial answers,
failures, budget, retrieval), then through the strict fake Anthropic and OpenAI servers with the
real SDKs and a real database (rows stored, usage rows, sorry replies)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, cast

import attrs
import pytest
import structlog
import trio
from fakes.anthropic_api import check_messages

from actors.agent.context import DEGRADED_NOTE
from actors.agent.handler import Agent
from actors.agent.images import IMAGE_TOO_LARGE, IMAGES_REFUSED
from actors.agent.tool_loop import (
    CAP_NOTE,
    NOTHING_DONE,
    SORRY_FAILED,
    STOP_REASONS,
    Guardrails,
    LoopState,
    ToolLoop,
    tool_specs,
)
from actors.agent.turn import TurnInput, TurnReply
from actors.chat.drafts import ChatProgress
from actors.chat.wakes import RunningTurns
from actors.errors import ModelUnavailable
from memory.conversation.messages import ChatMessage, SqlConversationStore, repair_rows
from memory.errors import (
    LLMError,
    LLMInvalidResponse,
    LLMOverloaded,
    LLMRateLimited,
    LLMRequestError,
    LLMUnavailable,
)
from memory.llm.anthropic_provider import message_params
from memory.llm.protocol import (
    Completion,
    ImageBlock,
    Message,
    OnEvent,
    StreamEvent,
    System,
    TextBlock,
    TextDelta,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
    system_text,
)
from memory.retrieval.retriever import RetrievedMemory
from memory.tools.registry import Tool, ToolContext, ToolRegistry
from memory.tools.results import STORAGE_CAP
from memory.tools.schema import spec
from runtime.db import Connection
from runtime.errors import DatabaseError

CHAT = 4242
TZ = "Europe/Madrid"
NOW = datetime(2026, 2, 19, 11, 33, tzinfo=UTC)

# --- in-memory fakes -------------------------------------------------------------------------


@attrs.define
class MemoryConversation:
    """ConversationStore in memory (chat_messages semantics: unique external id per chat)."""

    chats: dict[int, list[ChatMessage]] = attrs.field(factory=dict)
    next_id: int = 1

    def _add(self, chat_id: int, row: ChatMessage) -> int:
        row_id, self.next_id = self.next_id, self.next_id + 1
        self.chats.setdefault(chat_id, []).append(attrs.evolve(row, id=row_id))
        return row_id

    async def add_user(
        self, chat_id: int, text: str, external_id: str | None, created_at: datetime
    ) -> int:
        rows = self.chats.setdefault(chat_id, [])
        for i, row in enumerate(rows):
            if external_id is not None and row.external_message_id == external_id:
                rows[i] = attrs.evolve(row, content=text)
                return cast(int, row.id)
        new = ChatMessage(
            role="user", content=text, created_at=created_at, external_message_id=external_id
        )
        return self._add(chat_id, new)

    async def recent(self, chat_id: int, limit: int) -> list[ChatMessage]:
        return repair_rows(self.chats.get(chat_id, [])[-limit:])

    async def add_user_and_recent(
        self, chat_id: int, text: str, external_id: str | None, created_at: datetime, limit: int
    ) -> tuple[int, list[ChatMessage]]:
        user_id = await self.add_user(chat_id, text, external_id, created_at)
        return user_id, [r for r in await self.recent(chat_id, limit) if r.id != user_id]

    async def add_rows(self, conn: Connection, chat_id: int, rows: Sequence[ChatMessage]) -> None:
        for row in rows:
            self._add(chat_id, row)

    def roles(self, chat_id: int = CHAT) -> list[str]:
        return [r.role for r in self.chats.get(chat_id, [])]


@attrs.frozen
class Request:
    system: str
    messages: list[Message]
    tools: list[str]
    at: float


IDS = itertools.count(1)
Step = Completion | LLMError | Callable[[int], Completion]


@attrs.define
class ScriptedLLM:
    """An LLM playing ``script`` (then ``default(n)``), each call taking ``delay`` seconds.
    Every request is checked the way the strict fake Anthropic API checks it."""

    script: list[Step] = attrs.field(factory=list)
    default: Callable[[int], Completion] | None = None
    delay: float = 1.0
    requests: list[Request] = attrs.field(factory=list)
    #: while set, every call fails with it (the model is down)
    failing: LLMError | None = None

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
        assert purpose == "agent" and chat_id == CHAT
        check_messages(message_params(messages))
        self.requests.append(
            Request(
                system_text(system), list(messages), [t.name for t in tools], trio.current_time()
            )
        )
        await trio.sleep(self.delay)
        if self.failing is not None:
            raise self.failing
        step = self.script.pop(0) if self.script else self.default
        if step is None:
            return text("(default)")
        if isinstance(step, LLMError):
            raise step
        return step if isinstance(step, Completion) else step(len(self.requests))


def text(answer: str) -> Completion:
    return Completion((TextBlock(answer),), "end_turn", 100, 10, "fake")


def calls(*uses: tuple[str, dict[str, Any]], say: str | None = None) -> Completion:
    blocks: list[Any] = [TextBlock(say)] if say else []
    blocks += [ToolUseBlock(f"toolu_{next(IDS)}", name, args) for name, args in uses]
    return Completion(tuple(blocks), "tool_use", 100, 10, "fake")


@attrs.frozen
class LookupInput:
    query: str = attrs.field(metadata=spec(min_length=1))


@attrs.frozen
class NoInput:
    pass


@attrs.define
class Tools:
    """Fake tools: ``lookup`` (instant, long result), ``today`` (the context's date),
    ``slow`` (takes 200 s)."""

    executed: list[tuple[str, Any]] = attrs.field(factory=list)

    def registry(self) -> ToolRegistry:
        async def lookup(ctx: ToolContext, inp: LookupInput) -> dict[str, Any]:
            self.executed.append(("lookup", inp.query))
            return {"query": inp.query, "text": "x" * 2000}

        async def today(ctx: ToolContext, inp: NoInput) -> dict[str, Any]:
            self.executed.append(("today", ctx.today))
            return {"today": ctx.today}

        async def slow(ctx: ToolContext, inp: NoInput) -> str:
            self.executed.append(("slow", None))
            await trio.sleep(200)
            return "finally"

        return ToolRegistry(
            [
                Tool("lookup", "Look something up.", LookupInput, lookup),
                Tool("today", "Today's date.", NoInput, today),
                Tool("slow", "Takes long.", NoInput, slow),
            ]
        )


def make_agent(llm: ScriptedLLM, **options: Any) -> tuple[Agent, MemoryConversation, Tools]:
    store, tools = MemoryConversation(), Tools()
    agent = Agent(
        llm=llm,
        conversation=store,
        tools=tools.registry(),
        tool_db=cast(Any, None),
        timezone=TZ,
        clock=lambda: NOW,
        **options,
    )
    return agent, store, tools


def turn(message: str = "hello", update: int = 1) -> TurnInput:
    return TurnInput(CHAT, message, (update,), (update + 100,), (f"update:{update}",))


async def persist(reply: TurnReply) -> None:
    if reply.persist is not None:
        await reply.persist(cast(Connection, None))


# --- the loop -----------------------------------------------------------------------------------


async def test_tool_chain_answers_and_stores_pairs(autojump_clock: Any) -> None:
    llm = ScriptedLLM([calls(("lookup", {"query": "sleep"}), say="Let me look."), text("Badly.")])
    agent, store, tools = make_agent(llm)
    reply = await agent.run_turn(turn("How did I sleep?"))
    assert reply.text == "Badly." and reply.parse_mode is None
    assert tools.executed == [("lookup", "sleep")]
    assert store.roles() == ["user"]  # the rest waits for the outbox transaction
    await persist(reply)
    user, call_row, result_row, final = store.chats[CHAT]
    assert (user.content, user.external_message_id) == ("How did I sleep?", "update:1")
    assert call_row.content == "Let me look." and call_row.tool_calls[0].name == "lookup"
    assert result_row.tool_call_id == call_row.tool_calls[0].id
    assert result_row.tool_name == "lookup" and len(result_row.content) <= STORAGE_CAP
    assert final.content == "Badly." and final.tool_calls == ()
    first, second = llm.requests
    assert "Now: Thursday, 19 February 2026, 12:33 (Europe/Madrid" in first.system
    assert first.tools == ["lookup", "today", "slow"]
    assert first.messages == [Message.user("How did I sleep?", cache="5m")]  # a breakpoint
    [result] = second.messages[-1].blocks  # the model sees the whole result
    assert isinstance(result, ToolResultBlock) and len(result.content) > 2000


async def test_next_turn_sees_the_window_and_tool_context_uses_the_clock(
    autojump_clock: Any,
) -> None:
    llm = ScriptedLLM([calls(("today", {})), text("It is the 19th.")])
    agent, _, tools = make_agent(llm)
    await persist(await agent.run_turn(turn("What day is it?")))
    assert tools.executed == [("today", NOW.date())]
    await persist(await agent.run_turn(turn("thanks", update=2)))
    system = llm.requests[-1].system
    assert "─── Thursday, 19 February 2026 ───" in system
    assert "[12:33, just now] User: What day is it?" in system
    assert "Assistant called today {}" in system and '<untrusted source="today">' in system
    assert "Assistant: It is the 19th." in system
    assert "User: thanks" not in system  # the new message is the request's, not the window's
    assert llm.requests[-1].messages == [Message.user("thanks", cache="5m")]


async def test_fifteen_tool_calls_at_most(autojump_clock: Any) -> None:
    llm = ScriptedLLM(default=lambda n: calls(("lookup", {"query": f"q{n}"}), say=f"Step {n}"))
    agent, store, tools = make_agent(llm)
    reply = await agent.run_turn(turn())
    assert len(tools.executed) == 15
    assert len(llm.requests) == 16  # one more chance to answer after the 15th result
    assert TextBlock(CAP_NOTE) in llm.requests[-1].messages[-1].blocks
    assert reply.text == f"Step 16\n\n({STOP_REASONS['tool_limit']}.)"
    await persist(reply)
    assert store.roles().count("tool_result") == 15
    assert repair_rows(store.chats[CHAT]) == store.chats[CHAT]  # only complete pairs stored


async def test_cap_counts_calls_within_one_answer(autojump_clock: Any) -> None:
    many = calls(*[("lookup", {"query": f"q{i}"}) for i in range(20)])
    llm = ScriptedLLM([many, text("unused")])
    agent, store, tools = make_agent(llm, guardrails=Guardrails(max_tool_calls=15))
    reply = await agent.run_turn(turn())
    assert len(tools.executed) == 15 and len(llm.requests) == 1
    assert reply.text == NOTHING_DONE.format(reason=STOP_REASONS["tool_limit"])
    await persist(reply)
    [assistant] = [r for r in store.chats[CHAT] if r.role == "assistant"]
    assert len(assistant.tool_calls) == 15  # the 5 never run are dropped


async def test_identical_call_twice_in_a_row_breaks(autojump_clock: Any) -> None:
    llm = ScriptedLLM(
        [
            calls(("lookup", {"query": "a"}), say="Let me check."),
            calls(("lookup", {"query": "b"})),
            calls(("lookup", {"query": "a"})),  # not in a row: fine
            calls(("lookup", {"query": "a"}), say="Checking again."),
            text("unused"),
        ]
    )
    agent, store, tools = make_agent(llm)
    reply = await agent.run_turn(turn())
    assert [q for _, q in tools.executed] == ["a", "b", "a"]
    assert len(llm.requests) == 4
    assert reply.text == f"Checking again.\n\n({STOP_REASONS['repeated_call']}.)"
    await persist(reply)
    assert store.roles() == ["user"] + ["assistant", "tool_result"] * 3 + ["assistant"]
    assert store.chats[CHAT][-1].content == "Checking again."
    assert store.chats[CHAT][-1].tool_calls == ()


async def test_wall_clock_cap_returns_the_partial_answer(autojump_clock: Any) -> None:
    llm = ScriptedLLM(
        default=lambda n: calls(("lookup", {"query": f"q{n}"}), say=f"Step {n}"), delay=50
    )
    agent, store, _ = make_agent(llm)
    start = trio.current_time()
    reply = await agent.run_turn(turn())
    assert trio.current_time() - start == pytest.approx(120)
    assert len(llm.requests) == 3  # the third (t=100 s) is cut at 120 s
    assert reply.text == f"Step 2\n\n({STOP_REASONS['time_limit']}.)"
    await persist(reply)
    assert store.roles() == ["user", "assistant", "tool_result", "assistant", "tool_result"]


async def test_wall_clock_cap_cuts_a_slow_tool(autojump_clock: Any) -> None:
    llm = ScriptedLLM([calls(("lookup", {"query": "a"}), ("slow", {}), say="Working on it.")])
    agent, store, _ = make_agent(llm, guardrails=Guardrails(turn_seconds=60))
    start = trio.current_time()
    reply = await agent.run_turn(turn())
    assert trio.current_time() - start == pytest.approx(60)
    assert reply.text == f"Working on it.\n\n({STOP_REASONS['time_limit']}.)"
    await persist(reply)
    _, assistant, result = store.chats[CHAT]
    assert [c.name for c in assistant.tool_calls] == ["lookup"]  # the unfinished call dropped
    assert result.tool_name == "lookup"


BUSY = LLMOverloaded("overloaded", provider="fake", model="fake", status=529)


async def test_a_transient_model_error_is_retried_within_the_turn(autojump_clock: Any) -> None:
    down = LLMUnavailable("connection refused", provider="fake", model="fake")
    script: list[Step] = [calls(("lookup", {"query": "a"}), say="Looking."), BUSY, down]
    llm = ScriptedLLM([*script, text("Found it.")])
    agent, store, _ = make_agent(llm, guardrails=Guardrails(model_retry_base=10.0))
    t0 = trio.current_time()
    with structlog.testing.capture_logs() as logs:
        reply = await agent.run_turn(turn("hi"))
    assert reply.text == "Found it."
    at = [round(r.at - t0, 3) for r in llm.requests]
    assert at[1] == 1 and 8 <= at[2] - 2 <= 10 and 16 <= at[3] - at[2] - 1 <= 20  # jittered
    await persist(reply)  # the tool call made before the outage is kept, not repeated
    assert store.roles() == ["user", "assistant", "tool_result", "assistant"]
    retries = [(e["cause"], e["attempt"]) for e in logs if e["event"] == "agent.model_retrying"]
    assert retries == [("LLMOverloaded", 1), ("LLMUnavailable", 2)]


async def test_a_429_waits_its_retry_after(autojump_clock: Any) -> None:
    limited = LLMRateLimited(
        "slow down", provider="fake", model="fake", status=429, retry_after=7.0
    )
    llm = ScriptedLLM([limited, text("Now.")])
    agent, _, _ = make_agent(llm)
    t0 = trio.current_time()
    assert (await agent.run_turn(turn("hi"))).text == "Now."
    assert [round(r.at - t0, 3) for r in llm.requests] == [0, 8]


async def test_a_model_down_through_the_turn_raises_model_unavailable(autojump_clock: Any) -> None:
    llm = ScriptedLLM(failing=BUSY)
    agent, store, _ = make_agent(llm)
    t0 = trio.current_time()
    with pytest.raises(ModelUnavailable) as info:
        await agent.run_turn(turn("hi"))
    assert info.value.cause is BUSY
    assert trio.current_time() - t0 <= 120  # within the turn's limit
    assert len(llm.requests) >= 5  # retried meanwhile
    assert store.roles() == ["user"]  # the user row stays; nothing else is stored


async def test_an_unusable_answer_says_sorry(autojump_clock: Any) -> None:
    broken = LLMInvalidResponse("bad", provider="fake", model="fake")
    agent, store, _ = make_agent(ScriptedLLM([broken]))
    reply = await agent.run_turn(turn("hi"))
    assert reply.text == SORRY_FAILED and reply.persist is None
    assert store.roles() == ["user"]


@pytest.mark.parametrize(
    ("provider", "status", "fix"),
    [
        ("anthropic", 401, "check ANTHROPIC_API_KEY"),
        ("anthropic", 403, "check ANTHROPIC_API_KEY"),
        ("anthropic", 404, "check ANTHROPIC_MODEL or ANTHROPIC_BASE_URL"),
        ("openai", 400, "check OPENAI_MODEL"),
    ],
)
async def test_a_permanent_model_error_says_sorry_at_once_and_names_the_setting(
    autojump_clock: Any, provider: str, status: int, fix: str
) -> None:
    refused = LLMRequestError("refused", provider=provider, model="m", status=status)
    llm = ScriptedLLM([refused])
    agent, _, _ = make_agent(llm)
    with structlog.testing.capture_logs() as logs:
        reply = await agent.run_turn(turn("hi"))
    assert reply.text == SORRY_FAILED and len(llm.requests) == 1
    [event] = [e for e in logs if e["event"] == "agent.model_rejected"]
    assert (event["fix"], event["status"], event["log_level"]) == (fix, status, "error")


async def test_rerun_of_a_turn_keeps_one_user_row(autojump_clock: Any) -> None:
    llm = ScriptedLLM([text("Here now.")], failing=BUSY)
    agent, store, _ = make_agent(llm)
    with pytest.raises(ModelUnavailable):
        await agent.run_turn(turn("hi"))
    llm.failing = None  # the model is back
    reply = await agent.run_turn(turn("hi"))  # the same update, processed again
    assert reply.text == "Here now."
    assert store.roles() == ["user"]
    assert "User: hi" not in llm.requests[-1].system


async def test_stop_cancels_the_turn_but_the_user_row_stays(autojump_clock: Any) -> None:
    agent, store, _ = make_agent(ScriptedLLM(delay=1000))
    with trio.move_on_after(5) as scope:
        await agent.run_turn(turn("hi"))
    assert scope.cancelled_caught and store.roles() == ["user"]


# --- budget and retrieval -------------------------------------------------------------------


async def test_over_budget_callback(autojump_clock: Any) -> None:
    called: list[int] = []

    async def over(chat_id: int) -> None:
        called.append(chat_id)

    agent, _, _ = make_agent(
        ScriptedLLM([text("a" * 400)]), context_token_budget=100_000, on_over_budget=over
    )
    reply = await agent.run_turn(turn())
    assert called == [] and reply.after_commit is None
    small, _, _ = make_agent(
        ScriptedLLM([text("ok")]), context_token_budget=200, on_over_budget=called.append
    )
    reply = await small.run_turn(turn())
    # asked for only once the chat actor has committed the turn's rows (the compactor's own
    # budget check must count them): by the reply's after-commit hook, not during the turn
    assert called == [] and reply.after_commit is not None
    await reply.after_commit()
    assert called == [CHAT]

    def broken(chat_id: int) -> None:
        raise RuntimeError("compactor gone")

    failing, _, _ = make_agent(
        ScriptedLLM([text("ok")]), context_token_budget=1, on_over_budget=broken
    )
    reply = await failing.run_turn(turn())
    assert reply.text == "ok" and reply.after_commit is not None
    await reply.after_commit()  # logged, not raised


@attrs.define
class Retriever:
    memory: RetrievedMemory | None = None
    delay: float = 0
    queries: list[tuple[int, str]] = attrs.field(factory=list)

    async def retrieve(self, chat_id: int, query: str) -> RetrievedMemory:
        self.queries.append((chat_id, query))
        await trio.sleep(self.delay)
        if self.memory is None:
            raise RuntimeError("embedding service down")
        return self.memory


async def test_retrieved_patterns_go_into_the_system_prompt(autojump_clock: Any) -> None:
    retriever = Retriever(RetrievedMemory("- Runs every Sunday morning"))
    llm = ScriptedLLM([text("ok")])
    agent, _, _ = make_agent(llm, retriever=retriever)
    await agent.run_turn(turn("Should I run today?"))
    assert retriever.queries == [(CHAT, "Should I run today?")]
    assert "- Runs every Sunday morning" in llm.requests[0].system
    assert DEGRADED_NOTE not in llm.requests[0].system


@pytest.mark.parametrize("retriever", [Retriever(None), Retriever(RetrievedMemory("x"), 60)])
async def test_failing_or_slow_retrieval_degrades(
    autojump_clock: Any, retriever: Retriever
) -> None:
    llm = ScriptedLLM([text("still here")])
    agent, _, _ = make_agent(llm, retriever=retriever, retrieval_timeout=10)
    start = trio.current_time()
    assert (await agent.run_turn(turn())).text == "still here"
    assert DEGRADED_NOTE in llm.requests[0].system
    assert trio.current_time() - start <= 12


async def test_retrieval_runs_while_the_user_row_is_stored(autojump_clock: Any) -> None:
    """Each side waits for the other to have started: sequential code would hang."""
    retrieving, storing = trio.Event(), trio.Event()

    class Store(MemoryConversation):
        async def add_user_and_recent(self, *args: Any) -> Any:
            storing.set()
            await retrieving.wait()
            return await super().add_user_and_recent(*args)

    class Recall(Retriever):
        async def retrieve(self, chat_id: int, query: str) -> RetrievedMemory:
            retrieving.set()
            await storing.wait()
            return await super().retrieve(chat_id, query)

    llm = ScriptedLLM([text("ok")])
    agent, _, _ = make_agent(llm, retriever=Recall(RetrievedMemory("- Swims on Fridays")))
    agent.conversation = Store()
    with trio.fail_after(5):
        assert (await agent.run_turn(turn())).text == "ok"
    assert "- Swims on Fridays" in llm.requests[0].system


async def test_a_failing_user_row_store_raises_its_own_error(autojump_clock: Any) -> None:
    class Broken(MemoryConversation):
        async def add_user_and_recent(self, *args: Any) -> Any:
            raise DatabaseError("database went away")

    agent, _, _ = make_agent(
        ScriptedLLM([text("ok")]), retriever=Retriever(RetrievedMemory("x"), 60)
    )
    agent.conversation = Broken()
    start = trio.current_time()
    with pytest.raises(DatabaseError, match="went away"):  # not wrapped in an exception group
        await agent.run_turn(turn())
    assert trio.current_time() - start < 1  # the slow retrieval was cancelled, not awaited


# --- the SQL store: user row and window in one statement ----------------------------------------


async def test_sql_user_row_and_window_in_one_statement(db: Any) -> None:
    store = SqlConversationStore(db)
    at = datetime(2024, 5, 1, 9, tzinfo=UTC)
    first_id, window = await store.add_user_and_recent(CHAT, "first", "u:1", at, 3)
    assert window == []  # an empty chat still gives the row id
    await store.add_rows(db, CHAT, [ChatMessage(role="assistant", content="a1", created_at=at)])
    for n in (2, 3):
        await store.add_user(CHAT, f"m{n}", f"u:{n}", at)
    user_id, window = await store.add_user_and_recent(CHAT, "hello", "u:4", at, 3)
    assert [r.content for r in window] == ["m2", "m3"]  # limit 3 = 2 before + the user row
    assert [r.content for r in await store.recent(CHAT, 3)] == ["m2", "m3", "hello"]
    # a re-run finds the same row and leaves it out of its window
    again_id, again = await store.add_user_and_recent(CHAT, "hello!", "u:4", at, 3)
    assert again_id == user_id and [r.content for r in again] == ["m2", "m3"]
    assert await db.fetchval("SELECT content FROM chat_messages WHERE id = $1", user_id) == "hello!"
    assert first_id < user_id


async def test_sql_window_leaves_out_compacted_rows(db: Any) -> None:
    store = SqlConversationStore(db)
    at = datetime(2024, 5, 1, 9, tzinfo=UTC)
    old_id = await store.add_user(CHAT, "summarised away", "u:1", at)
    await store.add_user(CHAT, "still fresh", "u:2", at)
    await db.execute("UPDATE chat_messages SET compacted_at = now() WHERE id = $1", old_id)
    _, window = await store.add_user_and_recent(CHAT, "hello", "u:3", at, 10)
    assert [r.content for r in window] == ["still fresh"]
    assert [r.content for r in await store.recent(CHAT, 10)] == ["still fresh", "hello"]
    stored = await db.fetchval("SELECT count(*) FROM chat_messages WHERE chat_id = $1", CHAT)
    assert stored == 3  # the compacted row is kept, only left out of the window


# --- the tool loop on its own -------------------------------------------------------------------


async def test_loop_repairs_an_orphan_tool_use_before_the_request(autojump_clock: Any) -> None:
    orphan = ToolUseBlock("toolu_orphan", "lookup", {"query": "food"})
    state = LoopState(
        [
            Message.user("What did I eat?"),
            Message.assistant(TextBlock("Let me check."), orphan),  # its result never came
            Message.user("Never mind. Hello!"),
        ]
    )
    llm = ScriptedLLM([text("Hello to you.")])
    registry = Tools().registry()
    ctx = ToolContext(db=cast(Any, None), embedder=None, chat_id=CHAT, timezone=TZ, now=NOW)
    await ToolLoop(llm, registry, tool_specs(registry), "system", ctx).run(state)
    assert state.final_text == "Hello to you." and state.error is None
    [request] = llm.requests
    check_messages(message_params(request.messages))  # raises on an unpaired tool_use
    assert not any(isinstance(b, ToolUseBlock) for m in request.messages for b in m.blocks)
    assert request.messages[0] == Message.user("What did I eat?")
    assert request.messages[-1] == Message.user("Never mind. Hello!")
    assert any(m.role == "assistant" and m.text == "Let me check." for m in request.messages)


# --- stopping a streamed turn (issue 23) ----------------------------------------------------------
# The person's Stop cancels the generation; what the model had written becomes the reply marked
# "(stopped)" and the conversation's last assistant row; a stop during a tool call keeps the text
# written before it; the next turn is normal.

WORDS = [f"word{n} " for n in range(200)]


@attrs.define
class StreamingLLM(ScriptedLLM):
    """Streams ``WORDS`` (one every 0.05 s) before answering with the scripted step."""

    streamed: list[int] = attrs.field(factory=list)

    async def complete(  # type: ignore[override]
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
        assert on_event is not None  # a chat turn streams
        sent = 0
        step = self.script[0] if self.script else None
        pieces = [step.text] if isinstance(step, Completion) and step.tool_uses else WORDS
        for word in pieces:
            on_event(TextDelta(word))
            sent += 1
            await trio.sleep(0.05)
        self.streamed.append(sent)
        return await super().complete(
            system=system,
            messages=messages,
            tools=tools,
            max_tokens=max_tokens,
            purpose=purpose,
            chat_id=chat_id,
        )


@attrs.define
class Events:
    seen: list[StreamEvent] = attrs.field(factory=list)

    def __call__(self, event: StreamEvent) -> None:
        self.seen.append(event)


async def test_stop_keeps_what_was_written_and_marks_it(autojump_clock: Any) -> None:
    llm = StreamingLLM([text("".join(WORDS))], delay=0)
    agent, store, _ = make_agent(llm)
    running = RunningTurns()
    progress = ChatProgress(CHAT, running)  # no draft: stopped by /stop
    streaming = attrs.evolve(turn("tell me a long story"), progress=_Streaming(progress))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_stop_after, running, 1.0)
        reply = await agent.run_turn(streaming)
    assert reply.text.endswith("\n\n(stopped)")
    written = reply.text.removesuffix("\n\n(stopped)")
    assert written == "".join(WORDS[: len(written.split())]).strip()
    assert 10 <= len(written.split()) <= 30  # about 1 s of 20 words a second
    await persist(reply)
    assert store.roles() == ["user", "assistant"]
    assert store.chats[CHAT][-1].content == written
    llm.script = [text("A short answer.")]
    again = await agent.run_turn(attrs.evolve(turn("and now?", 2), progress=_Streaming(progress)))
    assert again.text == "A short answer."


async def test_stop_during_a_tool_call_keeps_the_text_before_it(autojump_clock: Any) -> None:
    llm = StreamingLLM([calls(("slow", {}), say="Let me look."), text("never")], delay=0)
    agent, store, _ = make_agent(llm)
    running = RunningTurns()
    progress = _Streaming(ChatProgress(CHAT, running))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_stop_after, running, 2.0)  # the slow tool takes longer
        reply = await agent.run_turn(attrs.evolve(turn("look it up"), progress=progress))
    assert reply.text == "Let me look.\n\n(stopped)"
    await persist(reply)
    assert store.roles()[0] == "user" and "assistant" in store.roles()


async def test_stop_while_memory_is_read_answers_stopped(autojump_clock: Any) -> None:
    """A Stop before the model wrote anything (the retrieval is slow): within the second, the
    reply is "(stopped)", the person's message is stored, the model was never asked, and the
    next turn is normal."""
    llm = StreamingLLM([text("A short answer.")], delay=0)
    agent, store, _ = make_agent(llm, retriever=Retriever(RetrievedMemory("x"), 5.0))
    running = RunningTurns()
    progress = _Streaming(ChatProgress(CHAT, running))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_stop_after, running, 1.0)
        started = trio.current_time()
        reply = await agent.run_turn(attrs.evolve(turn("hello?"), progress=progress))
    assert trio.current_time() - started == pytest.approx(1.0)
    assert reply.text == "(stopped)" and llm.requests == []
    assert store.roles() == ["user"] and store.chats[CHAT][0].content == "hello?"
    agent.retriever = Retriever(RetrievedMemory("x"))
    again = await agent.run_turn(attrs.evolve(turn("and now?", 2), progress=progress))
    assert again.text == "A short answer." and store.roles()[-1] == "user"


@attrs.frozen
class _Streaming:
    """A chat progress that streams without a draft (the events are only counted)."""

    inner: ChatProgress
    events: Events = attrs.field(factory=Events)

    @property
    def streaming(self) -> bool:
        return True

    def on_event(self, event: StreamEvent) -> None:
        self.events(event)

    def stoppable(self) -> Any:
        return self.inner.stoppable()


async def _stop_after(running: RunningTurns, seconds: float) -> None:
    await trio.sleep(seconds)
    assert running.cancel(CHAT)


# --- photos (issue 23 item 4) ------------------------------------------------------------------

JPEG = b"\xff\xd8\xff\xe0photo-bytes"


async def test_the_photos_go_to_the_model_with_the_caption_and_are_not_stored(
    autojump_clock: Any,
) -> None:
    llm = ScriptedLLM([text("A cat!")])
    agent, store, _ = make_agent(llm)
    photo = attrs.evolve(turn("[photo] look"), images=(ImageBlock("image/jpeg", JPEG),))
    reply = await agent.run_turn(photo)
    assert reply.text == "A cat!"
    first = llm.requests[0].messages[-1]
    assert first.role == "user" and first.blocks[0] == ImageBlock("image/jpeg", JPEG)
    assert first.text == "[photo] look"
    assert [r.content for r in store.chats[CHAT] if r.role == "user"] == ["[photo] look"]


async def test_a_model_that_refuses_images_gets_one_clear_line(autojump_clock: Any) -> None:
    refused = LLMRequestError(
        "model does not support image input", provider="openai", model="m", status=400
    )
    llm = ScriptedLLM([refused])
    agent, store, _ = make_agent(llm)
    photo = attrs.evolve(turn("[photo] look"), images=(ImageBlock("image/jpeg", JPEG),))
    reply = await agent.run_turn(photo)
    assert reply.text == IMAGES_REFUSED
    assert [r.content for r in store.chats[CHAT] if r.role == "user"] == ["[photo] look"]
    plain = await make_agent(ScriptedLLM([refused]))[0].run_turn(turn("no photo"))
    assert plain.text == SORRY_FAILED


@pytest.mark.parametrize(
    "message",
    [
        "messages.0.content.0.image.source.base64: image exceeds 5 MB maximum: "
        "5592408 bytes > 5242880 bytes",
        "Image is too large: 12582912 bytes, the server takes at most 8388608",
    ],
)
async def test_a_photo_refused_for_its_size_is_answered_so(
    autojump_clock: Any, message: str
) -> None:
    """A provider refusing the photo for its size (a limit under the one photos.py chose by,
    e.g. a self-hosted server's) is not "can't look at images"."""
    refused = LLMRequestError(message, provider="anthropic", model="m", status=400)
    agent, store, _ = make_agent(ScriptedLLM([refused]))
    photo = attrs.evolve(turn("[photo] look"), images=(ImageBlock("image/jpeg", JPEG),))
    reply = await agent.run_turn(photo)
    assert reply.text == IMAGE_TOO_LARGE
    assert [r.content for r in store.chats[CHAT] if r.role == "user"] == ["[photo] look"]
