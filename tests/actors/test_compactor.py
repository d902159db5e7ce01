"""The CompactorActor: coalescing, bounded mailbox, rounds, failures and shutdown with an
in-memory compaction double; two compactors on two pools over one real database; and a turn
over budget through the real agent and the whole bot ending in a compaction."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
import trio
from fakes.anthropic_api import Failure, FakeAnthropic
from fakes.bot_api import DEFAULT_TOKEN, run_fake_bot_api

from actors.agent.handler import sql_agent
from actors.compactor import CompactorActor, WindowEstimate, sql_compactor
from actors.settings import load_settings
from actors.system import BotSystem
from actors.telegram.client import BotApiClient
from memory.compaction.run import CompactionOptions, CompactionOutcome, compact_chat
from memory.conversation.messages import ChatMessage, insert_rows
from memory.embeddings.providers import LocalEmbedder
from memory.journal.tools import journal_registry
from memory.llm.anthropic_provider import AnthropicLLM
from runtime import db as dbmod
from runtime.db import Database
from runtime.serve import serve
from runtime.shutdown import Shutdown

CHAT = 8880001
T0 = datetime(2024, 4, 7, 9, 0, tzinfo=UTC)


# --- the actor with an in-memory compaction ----------------------------------------------------


@attrs.define
class ScriptedCompaction:
    """Records calls; ``gate`` holds each call until set; ``script`` gives statuses per chat."""

    calls: list[int] = attrs.field(factory=list)
    gate: trio.Event | None = None
    entered: trio.Event = attrs.field(factory=trio.Event)
    script: dict[int, list[str]] = attrs.field(factory=dict)
    crash: set[int] = attrs.field(factory=set)

    async def __call__(self, chat_id: int) -> CompactionOutcome:
        self.calls.append(chat_id)
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        if chat_id in self.crash:
            raise RuntimeError("database went away")
        statuses = self.script.get(chat_id) or ["not_needed"]
        return CompactionOutcome(statuses.pop(0) if len(statuses) > 1 else statuses[0], chat_id)


async def test_requests_are_coalesced_and_served_one_at_a_time() -> None:
    compaction = ScriptedCompaction(gate=trio.Event())
    actor = CompactorActor(compaction)
    async with trio.open_nursery() as nursery:
        await nursery.start(actor.run)
        actor.request(1)
        await compaction.entered.wait()  # chat 1 in progress
        for chat in (2, 2, 1, 1, 2):
            actor.request(chat)
        assert actor.pending == 2
        compaction.gate.set()  # type: ignore[union-attr]
        await actor.wait_idle()
        nursery.cancel_scope.cancel()
    assert compaction.calls == [1, 2, 1]  # 1 again: messages may have arrived meanwhile


async def test_rounds_continue_while_each_compacts_something() -> None:
    compaction = ScriptedCompaction(script={7: ["ok", "ok", "not_needed"], 8: ["ok"]})
    actor = CompactorActor(compaction, max_rounds=4)
    async with trio.open_nursery() as nursery:
        await nursery.start(actor.run)
        actor.request(7)
        actor.request(8)
        await actor.wait_idle()
        nursery.cancel_scope.cancel()
    assert compaction.calls == [7, 7, 7, 8, 8, 8, 8]  # 8 stops at max_rounds
    assert [o.status for o in actor.outcomes][:3] == ["ok", "ok", "not_needed"]


async def test_a_failing_compaction_does_not_stop_the_actor() -> None:
    compaction = ScriptedCompaction(crash={1}, script={2: ["failed"], 3: ["not_needed"]})
    actor = CompactorActor(compaction)
    async with trio.open_nursery() as nursery:
        await nursery.start(actor.run)
        for chat in (1, 2, 3):
            actor.request(chat)
        await actor.wait_idle()
        nursery.cancel_scope.cancel()
    assert compaction.calls == [1, 2, 3]
    assert actor.failures == 2 and [o.status for o in actor.outcomes] == ["failed", "not_needed"]


async def test_full_mailbox_drops_requests() -> None:
    compaction = ScriptedCompaction(gate=trio.Event())
    actor = CompactorActor(compaction, capacity=2)
    async with trio.open_nursery() as nursery:
        await nursery.start(actor.run)
        actor.request(1)
        await compaction.entered.wait()
        for chat in (2, 3, 4, 5):
            actor.request(chat)
        assert actor.dropped == 2 and actor.pending == 2
        compaction.gate.set()  # type: ignore[union-attr]
        await actor.wait_idle()
        nursery.cancel_scope.cancel()
    assert compaction.calls == [1, 2, 3]


async def test_shutdown_finishes_the_one_in_hand_and_drops_the_queue() -> None:
    compaction = ScriptedCompaction(gate=trio.Event(), script={1: ["not_needed"]})
    actor = CompactorActor(compaction)
    closed = trio.Event()
    async with trio.open_nursery() as nursery:
        await nursery.start(actor.run)
        actor.request(1)
        await compaction.entered.wait()
        actor.request(2)

        async def close() -> None:
            await actor.aclose()
            closed.set()

        nursery.start_soon(close)
        await trio.sleep(0.05)
        assert not closed.is_set()  # waits for the compaction in hand
        actor.request(3)  # refused: stopping
        compaction.gate.set()  # type: ignore[union-attr]
        await closed.wait()
    assert compaction.calls == [1]
    assert [o.status for o in actor.outcomes] == ["not_needed"]


async def test_aclose_before_start_returns() -> None:
    actor = CompactorActor(ScriptedCompaction())
    with trio.fail_after(1):
        await actor.aclose()
    actor.request(1)
    assert actor.pending == 0


# --- two compactors, two pools, one database ----------------------------------------------------


def rows(n: int, size: int = 20) -> list[ChatMessage]:
    return [
        ChatMessage(
            role="user" if i % 2 == 0 else "assistant",
            content=f"message {i} " * size,
            created_at=T0 + timedelta(minutes=i),
        )
        for i in range(n)
    ]


EMPTY = json.dumps({"new_patterns": [], "episode_summary": "User chatted about little."})


async def wait_for(predicate: Any, limit: float = 15.0) -> None:
    with trio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110 - servers and actors change it
            await trio.sleep(0.02)


@pytest.mark.slow
async def test_two_compactors_on_two_pools_one_runs_one_skips(
    db: Database, database_url: str, fake_claude: FakeAnthropic
) -> None:
    await insert_rows(db, CHAT, rows(10))
    fake_claude.fail_next(Failure.slow(2.0))  # the first extraction takes a while
    fake_claude.queue_text(EMPTY)
    embedder = LocalEmbedder()
    opts = CompactionOptions(keep_recent=2, max_messages=40)
    async with (
        dbmod.open_database(database_url, max_size=2) as other_db,
        AnthropicLLM(api_key=fake_claude.api_key, base_url=fake_claude.base_url, db=db) as llm,
    ):

        def actor(pool: Database) -> CompactorActor:
            async def once(chat_id: int) -> CompactionOutcome:
                return await compact_chat(pool, llm, embedder, chat_id, options=opts)

            return CompactorActor(once)

        first, second = actor(db), actor(other_db)
        async with trio.open_nursery() as nursery:
            await nursery.start(first.run)
            await nursery.start(second.run)
            first.request(CHAT)
            await wait_for(lambda: len(fake_claude.requests) == 1)  # holding the lock
            second.request(CHAT)
            await wait_for(lambda: len(second.outcomes) == 1, limit=1.5)  # at once
            assert second.outcomes[0].status == "skipped"
            assert not first.outcomes  # still waiting for its model
            await first.wait_idle()
            nursery.cancel_scope.cancel()
    assert [o.status for o in first.outcomes] == ["ok", "not_needed"]
    assert first.outcomes[0].messages_compacted == 8
    assert len(fake_claude.requests) == 1
    statuses = [
        r["status"] for r in await db.fetch("SELECT status FROM compaction_runs ORDER BY id")
    ]
    assert sorted(statuses) == ["ok", "skipped"]


# --- the budget estimate and the whole bot ------------------------------------------------------


async def test_window_estimate_grows_with_the_window(db: Database) -> None:
    estimate = WindowEstimate(db, "Europe/Madrid", journal_registry(), clock=lambda: T0)
    empty = await estimate(CHAT)
    assert empty.tokens > 2000  # system prompt + tool definitions + the pattern allowance
    assert (empty.rows, empty.idle_seconds) == (0, 0)
    await insert_rows(db, CHAT, rows(10))
    grown = await estimate(CHAT)
    assert grown.tokens - empty.tokens >= sum(len(r.content) for r in rows(10)) // 4
    assert grown.rows == 10 and grown.idle_seconds == -9 * 60  # the clock is T0, the rows after


async def bot_turn(
    db: Database, fake_claude: FakeAnthropic, reply: str, **more: str
) -> tuple[list[int], list[str], CompactorActor]:
    """One "Good morning" turn through the whole bot (polling, the real agent on the fake
    Anthropic API answering ``reply``) with the compactor wired as ``engram serve`` wires it;
    returns once a compaction has run. Exit codes, sent texts and the compactor."""
    settings = load_settings(
        {
            "ENGRAM_PORT": "0",
            "TELEGRAM_BOT_TOKEN": DEFAULT_TOKEN,
            "TELEGRAM_SECRET_TOKEN": "compactor-e2e-secret",
            "TELEGRAM_ALLOWED_CHAT_IDS": str(CHAT),
            "SHUTDOWN_DEADLINE": "5",
            "COMPACTION_KEEP_RECENT": "4",
            "COMPACTION_CHUNK_MESSAGES": "100",
            **more,
        },
        dotenv=None,
    )
    fake_claude.queue_text(reply)  # the turn
    fake_claude.queue_text(EMPTY)  # the compaction's extraction
    shutdown = Shutdown(deadline=5, signals=())
    codes: list[int] = []
    async with (
        run_fake_bot_api() as bot_api,
        AnthropicLLM(api_key=fake_claude.api_key, base_url=fake_claude.base_url, db=db) as llm,
    ):
        agent = sql_agent(
            db, llm, timezone=settings.timezone, context_token_budget=settings.context_token_budget
        )
        compactor = sql_compactor(db, llm, LocalEmbedder(), settings, tools=agent.tools)
        agent.on_over_budget = compactor.request

        def build(s: Any, d: Database, sh: Shutdown) -> BotSystem:
            from actors.telegram.poller import Poller

            def bot() -> BotApiClient:
                return BotApiClient(DEFAULT_TOKEN, base_url=bot_api.base_url)

            system = BotSystem(
                s, d, sh, polling=True, turns=agent, bot_factory=bot, compactor=compactor
            )
            system.poller_factory = lambda *a, **k: Poller(*a, poll_timeout=1, **k)
            return system

        async def run() -> None:
            codes.append(await serve(settings, db, build, shutdown=shutdown))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            bot_api.push_message(CHAT, "Good morning")
            await wait_for(lambda: bot_api.sent_texts(CHAT))
            await wait_for(lambda: bool(compactor.outcomes))
            await compactor.wait_idle()
            shutdown.request_stop("test")
        return codes, bot_api.sent_texts(CHAT), compactor


async def test_turn_over_budget_ends_in_a_compaction(
    db: Database, fake_claude: FakeAnthropic
) -> None:
    await insert_rows(db, CHAT, rows(30, size=80))  # ~7,000 tokens: well over the budget
    history = [r["id"] for r in await db.fetch("SELECT id FROM chat_messages ORDER BY id")]
    codes, sent, compactor = await bot_turn(
        db, fake_claude, "Good morning!", CONTEXT_TOKEN_BUDGET="4000"
    )
    assert codes == [0]
    assert sent == ["Good morning!"]
    ok = next(o for o in compactor.outcomes if o.status == "ok")
    assert set(ok.compacted_ids) <= set(history) and len(ok.compacted_ids) >= 26
    compacted = await db.fetchval(
        "SELECT count(*) FROM chat_messages WHERE chat_id = $1 AND compacted_at IS NOT NULL", CHAT
    )
    assert compacted == len(ok.compacted_ids)
    assert await db.fetchval("SELECT count(*) FROM episodes WHERE chat_id = $1", CHAT) == 1
    purposes = [r["purpose"] for r in await db.fetch("SELECT purpose FROM api_usage ORDER BY id")]
    assert purposes[:2] == ["agent", "compaction"]


@pytest.mark.slow
async def test_the_turns_own_rows_crossing_the_budget_compact(
    db: Database, fake_claude: FakeAnthropic
) -> None:
    """The history alone is under the budget; the turn's long reply takes it over: the
    compaction asked for after the turn's commit finds the chat over budget (its own check,
    inside its lock, counts the committed reply) and compacts."""
    await insert_rows(db, CHAT, rows(30, size=20))
    # estimated as the agent lays it out (PROMPT_CACHE_TTL's default: older rows without ages)
    estimate = WindowEstimate(db, "Europe/Madrid", journal_registry(), cache="5m")
    budget = (await estimate(CHAT)).tokens + 200  # "Good morning" fits; 3,000 tokens do not
    codes, sent, compactor = await bot_turn(
        db, fake_claude, "sunny " * 2000, CONTEXT_TOKEN_BUDGET=str(budget)
    )
    assert codes == [0] and sent and sent[0].startswith("sunny")
    assert compactor.outcomes[0].status == "ok"
