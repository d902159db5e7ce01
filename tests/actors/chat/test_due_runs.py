"""Due runs in the chat actor (issue 22): routine and reminder inbox rows taken by the real chat
actor on the real database, sent by the real sender to the strict fake Bot API. Ordered after
the person's message and never in its turn; a rule that finds nothing spends nothing; a brief's
text is sent as it is; a prompt runs a routine turn (the real agent, a scripted model) that may
decline, and a declined run — whatever the model wrote, a marker like NO_REPLY included — never
reaches sendMessage; every outcome is one proactive_runs row; a bad row is skipped, never a
crash."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest
import trio
from fakes.bot_api import FakeBotApi, run_fake_bot_api
from fakes.inbox import insert_text

from actors.agent.handler import Agent, sql_agent
from actors.agent.routine_turn import DECLINE, ROUTINE_NOTE
from actors.agent.turn import TurnInput, TurnReply
from actors.chat.actor import chat_factory
from actors.chat.deps import ChatDeps
from actors.chat.due_runs import REMINDER_MARK
from actors.chat.proactive import Proactive
from actors.chat.store import SqlChatStore
from actors.chat.wakes import Wake
from actors.queues import inbox
from actors.queues.outbox import OutboxRow
from actors.router import Router
from actors.scheduler.routine import INBOX_KIND, Brief, DueRun, Routine, RoutineContext, update_key
from actors.sender.actor import OutboxReady, SenderActor
from actors.sender.policy import SenderSettings
from actors.telegram.client import BotApiClient
from memory.llm.protocol import (
    Completion,
    Message,
    OnEvent,
    System,
    TextBlock,
    ToolSpec,
    ToolUseBlock,
)
from runtime.actor import Address
from runtime.db import Database
from runtime.errors import ActorError
from runtime.registry import Registry

CHAT = 22022
TZ = "Europe/Madrid"
DUE = datetime(2026, 3, 1, 17, 0, tzinfo=UTC)
FAST = SenderSettings(chat_interval=0.0, global_rate=1000, sweep_interval=None, jitter=0.0)
IDS = itertools.count(1)
#: what a model might say instead of (or beside) declining: none may reach the person
MARKERS = (
    "NO_REPLY",
    "HEARTBEAT_OK",
    "[SKIP]",
    "<none>",
    "  ",
    "",
    "no_reply",
    "SILENT.",
    "DECLINE",
)


# --- fakes ---------------------------------------------------------------------------------------


@attrs.define
class FakeRoutine:
    """A routine whose rule answers ``brief`` (counting its calls)."""

    name: str
    brief: Brief | None
    title: str = "A fake routine"
    default_schedule: str = "0 18 * * 0"
    seen: list[RoutineContext] = attrs.field(factory=list)

    async def decide(self, ctx: RoutineContext) -> Brief | None:
        self.seen.append(ctx)
        return self.brief


@attrs.define
class Echo:
    """The person's turns: echoed; records what it was given."""

    seen: list[TurnInput] = attrs.field(factory=list)

    async def run_turn(self, turn: TurnInput) -> TurnReply:
        self.seen.append(turn)
        return TurnReply(f"echo:{turn.text}")


@attrs.define
class ScriptedModel:
    """The agent's model: plays ``script``; records what it was asked."""

    script: list[Completion]
    requests: list[tuple[str, list[Message], list[str]]] = attrs.field(factory=list)

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
        text = system if isinstance(system, str) else "\n".join(b.text for b in system)
        self.requests.append((text, list(messages), [t.name for t in tools]))
        return self.script.pop(0)


def says(text: str) -> Completion:
    return Completion((TextBlock(text),), "end_turn", 100, 10, "fake")


def declines(reason: str, text: str = "") -> Completion:
    blocks: list[Any] = [TextBlock(text)] if text else []
    blocks.append(ToolUseBlock(f"toolu_{next(IDS)}", DECLINE, {"reason": reason}))
    return Completion(tuple(blocks), "tool_use", 100, 10, "fake")


class Quiet:
    async def send_chat_action(self, chat_id: int | str, action: str = "typing") -> None:
        pass

    async def answer_callback_query(self, callback_query_id: str, text: str | None = None) -> None:
        pass


# --- the process ---------------------------------------------------------------------------------


@asynccontextmanager
async def process(
    db: Database, turns: Any, bot: BotApiClient, routines: Sequence[Routine] = ()
) -> AsyncIterator[None]:
    """The sender, the chat registry and the router, as ``engram serve`` starts them."""
    async with trio.open_nursery() as nursery:
        sender: Address[OutboxReady] = await nursery.start(SenderActor(db, bot, settings=FAST).run)

        def ready(chat_id: int, row: OutboxRow | None) -> None:
            with suppress(ActorError):
                sender.send_nowait(OutboxReady(chat_id, row))

        proactive = Proactive(db=db, routines={r.name: r for r in routines}, timezone=TZ)
        deps = ChatDeps(
            store=SqlChatStore(db),
            turns=turns,
            bot=Quiet(),
            outbox_ready=ready,
            proactive=proactive,
        )
        registry: Registry[int, Wake] = Registry(
            "chats", chat_factory(deps), idle_timeout=600, key_name="chat_id"
        )
        await nursery.start(registry.run)
        router = Router(db, registry, Quiet(), deps.running, wakes=deps.wakes, sweep_interval=3600)
        await nursery.start(router.run)
        yield
        nursery.cancel_scope.cancel()


async def due(
    db: Database,
    name: str,
    *,
    job_id: int = 1,
    kind: str = "routine",
    payload: dict[str, Any] | None = None,
) -> int:
    run = DueRun(
        job_id=job_id,
        chat_id=CHAT,
        name=name,
        kind=kind,  # type: ignore[arg-type]
        due_at=DUE,
        payload=payload or {},
    )
    return await raw_due(db, update_key(job_id, DUE), run.to_payload())


async def raw_due(db: Database, key: str, payload: dict[str, Any]) -> int:
    row_id = await inbox.insert_update(db, key, None, CHAT, INBOX_KIND, payload)
    assert row_id is not None
    return row_id


async def proactive_on(db: Database) -> None:
    await db.execute("INSERT INTO chat_proactive (chat_id, active) VALUES ($1, true)", CHAT)


async def settled(db: Database, runs: int, sent: int) -> None:
    """Until no inbox or outbox row of the chat is open, ``runs`` runs are recorded and
    ``sent`` messages are sent."""
    with trio.fail_after(15):
        while True:
            open_in = await db.fetchval(
                "SELECT count(*) FROM inbox WHERE chat_id = $1 AND status IN "
                "('pending', 'processing')",
                CHAT,
            )
            open_out = await db.fetchval(
                "SELECT count(*) FROM outbox WHERE chat_id = $1 AND status IN "
                "('pending', 'sending')",
                CHAT,
            )
            done = await db.fetchval("SELECT count(*) FROM proactive_runs WHERE chat_id = $1", CHAT)
            out = await db.fetchval(
                "SELECT count(*) FROM outbox WHERE chat_id = $1 AND status = 'sent'", CHAT
            )
            if (open_in, open_out, done, out) == (0, 0, runs, sent):
                return
            await trio.sleep(0.02)


async def runs(db: Database) -> list[tuple[str, str, str | None, int]]:
    return [
        (r["name"], r["outcome"], r["reason"], r["model_calls"])
        for r in await db.fetch(
            "SELECT name, outcome, reason, model_calls FROM proactive_runs WHERE chat_id = $1 "
            "ORDER BY id",
            CHAT,
        )
    ]


@pytest.fixture
async def fake() -> AsyncIterator[FakeBotApi]:
    async with run_fake_bot_api() as server:
        yield server


@pytest.fixture
async def bot(fake: FakeBotApi) -> AsyncIterator[BotApiClient]:
    async with BotApiClient(fake.token, base_url=fake.base_url, timeout=5.0) as client:
        yield client


def agent(db: Database, model: ScriptedModel) -> Agent:
    return sql_agent(
        db,
        model,
        timezone=TZ,
        prompt_cache=None,
        clock=lambda: datetime(2026, 3, 1, 17, 0, 5, tzinfo=UTC),
    )


# --- order and the rule --------------------------------------------------------------------------


async def test_a_routine_comes_after_the_persons_message_and_never_joins_its_turn(
    db: Database, fake: FakeBotApi, bot: BotApiClient
) -> None:
    await proactive_on(db)
    await insert_text(db, CHAT, 1, "hello")
    await due(db, "weekly-recap")
    await insert_text(db, CHAT, 2, "and you?")
    routine = FakeRoutine("weekly-recap", Brief(text="Your week: 3 entries, 2 runs."))
    echo = Echo()
    async with process(db, echo, bot, [routine]):
        await settled(db, runs=1, sent=3)
    assert [t.text for t in echo.seen] == ["hello", "and you?"]  # two turns, the run between
    assert all(t.reason == "user_message" for t in echo.seen)
    assert fake.sent_texts(CHAT) == ["echo:hello", "Your week: 3 entries, 2 runs.", "echo:and you?"]
    assert await runs(db) == [("weekly-recap", "sent", None, 0)]
    [ctx] = routine.seen
    assert (ctx.chat_id, ctx.timezone) == (CHAT, TZ)
    stored = await db.fetchrow(
        "SELECT role, source, routine_name, content, summary FROM chat_messages "
        "WHERE chat_id = $1 AND source = 'routine'",
        CHAT,
    )
    assert stored is not None and dict(stored) == {
        "role": "assistant",
        "source": "routine",
        "routine_name": "weekly-recap",
        "content": "Your week: 3 entries, 2 runs.",
        "summary": "Your week: 3 entries, 2 runs.",
    }
    last = await db.fetchval("SELECT last_outcome FROM cron_jobs WHERE id = 1")
    assert last is None  # no such job here: the update touched nothing, and nothing failed


async def test_a_rule_with_nothing_to_say_sends_nothing_and_calls_no_model(
    db: Database, fake: FakeBotApi, bot: BotApiClient
) -> None:
    await proactive_on(db)
    row = await due(db, "on-this-day")
    model = ScriptedModel([])
    routine = FakeRoutine("on-this-day", None)
    async with process(db, agent(db, model), bot, [routine]):
        await settled(db, runs=1, sent=0)
    assert await runs(db) == [("on-this-day", "skipped", "nothing to say", 0)]
    assert model.requests == [] and fake.calls_to("sendMessage") == []
    got = await inbox.get(db, CHAT, row)
    assert got is not None and got.status == "skipped"


async def test_a_reminder_is_sent_as_it_is_with_a_clock_and_no_model_even_with_proactive_off(
    db: Database, fake: FakeBotApi, bot: BotApiClient
) -> None:
    await due(db, "reminder-1", kind="reminder", payload={"text": "call mum"})
    model = ScriptedModel([])
    async with process(db, agent(db, model), bot):
        await settled(db, runs=1, sent=1)
    assert fake.sent_texts(CHAT) == [f"{REMINDER_MARK} call mum"]
    assert await runs(db) == [("reminder-1", "sent", None, 0)] and model.requests == []


async def test_gates_checked_again_proactive_off_and_a_paused_chat_send_nothing(
    db: Database, fake: FakeBotApi, bot: BotApiClient
) -> None:
    await due(db, "weekly-recap", job_id=1)
    routine = FakeRoutine("weekly-recap", Brief(text="recap"))
    async with process(db, Echo(), bot, [routine]):
        await settled(db, runs=1, sent=0)
    await db.execute(
        "INSERT INTO chat_proactive (chat_id, active, paused_at) VALUES ($1, true, now())", CHAT
    )
    await due(db, "reminder-2", job_id=2, kind="reminder", payload={"text": "water plants"})
    async with process(db, Echo(), bot, [routine]):
        await settled(db, runs=2, sent=0)
    assert await runs(db) == [
        ("weekly-recap", "skipped", "gate: proactive is off", 0),
        ("reminder-2", "skipped", "gate: paused: the chat blocked the bot", 0),
    ]
    assert routine.seen == [] and fake.calls_to("sendMessage") == []


async def test_unknown_routine_and_bad_payloads_are_skipped_and_the_chat_goes_on(
    db: Database, fake: FakeBotApi, bot: BotApiClient
) -> None:
    await proactive_on(db)
    await due(db, "no-such-routine")
    bad = [
        await raw_due(db, "run:bad:1", {"engram_run": {"kind": "routine"}}),
        await raw_due(db, "run:bad:2", {"engram_run": "nonsense"}),
        await raw_due(db, "run:bad:3", {"update_id": 5}),
        await raw_due(
            db,
            "run:bad:4",
            {
                "engram_run": {
                    "job_id": 1,
                    "chat_id": CHAT,
                    "name": "x",
                    "kind": "party",
                    "due_at": DUE.isoformat(),
                }
            },
        ),
        await raw_due(
            db,
            "run:bad:5",
            {
                "engram_run": {
                    "job_id": 1,
                    "chat_id": CHAT + 1,
                    "name": "x",
                    "kind": "routine",
                    "due_at": DUE.isoformat(),
                }
            },
        ),
    ]
    await insert_text(db, CHAT, 9, "still there?")
    echo = Echo()
    async with process(db, echo, bot):
        await settled(db, runs=1, sent=1)
    assert await runs(db) == [
        ("no-such-routine", "skipped", "unknown routine 'no-such-routine'", 0)
    ]
    assert fake.sent_texts(CHAT) == ["echo:still there?"]
    for row_id in bad:
        row = await inbox.get(db, CHAT, row_id)
        assert row is not None and row.status == "skipped" and row.attempts == 0
        assert row.last_error and ("payload" in row.last_error or "another chat" in row.last_error)


async def test_a_failing_rule_is_recorded_failed_never_a_crash(
    db: Database, fake: FakeBotApi, bot: BotApiClient
) -> None:
    @attrs.define
    class Broken(FakeRoutine):
        async def decide(self, ctx: RoutineContext) -> Brief | None:
            raise RuntimeError("boom")

    await proactive_on(db)
    await due(db, "weight-trend")
    await insert_text(db, CHAT, 3, "hi")
    async with process(db, Echo(), bot, [Broken("weight-trend", None)]):
        await settled(db, runs=1, sent=1)
    assert await runs(db) == [("weight-trend", "failed", "rule failed: RuntimeError", 0)]
    assert fake.sent_texts(CHAT) == ["echo:hi"]


# --- routine turns -------------------------------------------------------------------------------


async def test_a_prompt_runs_a_routine_turn_whose_reply_is_sent_and_stored_as_the_routines(
    db: Database, fake: FakeBotApi, bot: BotApiClient
) -> None:
    await proactive_on(db)
    await due(db, "nightly-reflection")
    model = ScriptedModel([says("How did today feel, in one word?")])
    routine = FakeRoutine("nightly-reflection", Brief(prompt="Ask for a short reflection."))
    async with process(db, agent(db, model), bot, [routine]):
        await settled(db, runs=1, sent=1)
    assert fake.sent_texts(CHAT) == ["How did today feel, in one word?"]
    assert await runs(db) == [("nightly-reflection", "sent", None, 1)]
    [(system, messages, tools)] = model.requests
    assert ROUTINE_NOTE in system and DECLINE in tools
    assert "Ask for a short reflection." in messages[0].text and "<routine" in messages[0].text
    rows = await db.fetch(
        "SELECT role, source, content FROM chat_messages WHERE chat_id = $1", CHAT
    )
    # the brief is not the person's words: the only row is the routine's message
    assert [tuple(r) for r in rows] == [
        ("assistant", "routine", "How did today feel, in one word?")
    ]


async def test_the_decline_tool_is_offered_on_routine_turns_only(
    db: Database, fake: FakeBotApi, bot: BotApiClient
) -> None:
    await insert_text(db, CHAT, 4, "hello")
    model = ScriptedModel([says("hi")])
    async with process(db, agent(db, model), bot):
        await settled(db, runs=0, sent=1)
    [(system, _, tools)] = model.requests
    assert DECLINE not in tools and ROUTINE_NOTE not in system


@pytest.mark.parametrize("said", [*MARKERS, "Here is your nightly reflection prompt!"])
async def test_a_declined_routine_never_reaches_send_message_whatever_the_model_wrote(
    db: Database, fake: FakeBotApi, bot: BotApiClient, said: str
) -> None:
    """The exhaustive check: the model declines beside any text (a marker, or a real message),
    or answers a bare marker without declining: nothing is queued, nothing sent."""
    await proactive_on(db)
    await due(db, "nightly-reflection", job_id=1)
    await due(db, "nightly-reflection-2", job_id=2)
    model = ScriptedModel([declines("they wrote an hour ago", said), says(said)])
    routines = [
        FakeRoutine("nightly-reflection", Brief(prompt="Reflect?")),
        FakeRoutine("nightly-reflection-2", Brief(prompt="Reflect?")),
    ]
    real_message = not MARKERS.count(said)
    async with process(db, agent(db, model), bot, routines):
        await settled(db, runs=2, sent=int(real_message))
    first, second = await runs(db)
    assert first == ("nightly-reflection", "declined", "they wrote an hour ago", 1)
    assert len(model.requests) == 2  # the decline ended its turn: no call after it
    if real_message:  # the second turn's real text, without a decline, is sent
        assert second[1] == "sent" and fake.sent_texts(CHAT) == [said]
    else:
        assert second == (
            "nightly-reflection-2",
            "declined",
            "no message (empty or marker reply)",
            1,
        )
        assert fake.calls_to("sendMessage") == []
        assert await db.fetchval("SELECT count(*) FROM outbox WHERE chat_id = $1", CHAT) == 0
    assert await db.fetchval(
        "SELECT count(*) FROM chat_messages WHERE chat_id = $1 AND source = 'routine'", CHAT
    ) == int(real_message)


async def test_a_failing_routine_turn_is_recorded_failed_and_sends_no_apology(
    db: Database, fake: FakeBotApi, bot: BotApiClient
) -> None:
    @attrs.define
    class Crashes:
        async def run_turn(self, turn: TurnInput) -> TurnReply:
            if turn.reason == "routine":
                raise RuntimeError("boom")
            return TurnReply(f"echo:{turn.text}")

    await proactive_on(db)
    await due(db, "nightly-reflection")
    await insert_text(db, CHAT, 5, "hi")
    routine = FakeRoutine("nightly-reflection", Brief(prompt="Reflect?"))
    async with process(db, Crashes(), bot, [routine]):
        await settled(db, runs=1, sent=1)
    assert await runs(db) == [("nightly-reflection", "failed", "turn failed: RuntimeError", 0)]
    assert fake.sent_texts(CHAT) == ["echo:hi"]
