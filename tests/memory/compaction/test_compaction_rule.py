"""The compaction rule (nothing leaves the window uncompacted): its reasons, a property test of
the memory invariant through the real agent and the real compactor actor over an in-memory chat
(hypothesis over message sizes, tool calls, window sizes and counts), and the compaction sweep
(idle chats, old backlogs) under MockClock through in-memory fakes."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import attrs
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.agent.context import build_context
from actors.agent.handler import Agent
from actors.agent.tool_loop import tool_specs
from actors.agent.turn import TurnInput
from actors.compactor import CompactorActor
from actors.settings import load_settings
from memory.compaction.backlog import ChatBacklog, CompactionSweep
from memory.compaction.run import CompactionOutcome, select_chunk
from memory.conversation.messages import ChatMessage, repair_rows
from memory.conversation.window import MAX_TURN_ROWS, CompactionRule, WindowState
from memory.llm.protocol import (
    Completion,
    Message,
    OnEvent,
    System,
    TextBlock,
    ToolSpec,
    ToolUseBlock,
)
from memory.retrieval.retriever import RetrievedMemory
from memory.tools.registry import Tool, ToolContext, ToolRegistry
from memory.tools.schema import spec
from runtime.db import Connection
from runtime.errors import SettingsError

CHAT = 31337
TZ = "Europe/Madrid"
T0 = datetime(2026, 3, 2, 20, 0, tzinfo=UTC)


# --- the rule ------------------------------------------------------------------------------------


def test_reasons_in_order() -> None:
    rule = CompactionRule(token_budget=1000, keep_recent=20, idle_after=3600)
    assert rule.window_rows == 119  # a turn shows 119 rows before its new message
    assert rule.reason(WindowState(rows=119, tokens=1000)) is None
    assert rule.reason(WindowState(rows=120, tokens=10)) == "rows"
    assert rule.reason(WindowState(rows=120, tokens=10**6, idle_seconds=10**6)) == "rows"
    assert rule.reason(WindowState(rows=5, tokens=1001)) == "tokens"
    assert rule.reason(WindowState(rows=21, tokens=10, idle_seconds=3600)) == "idle"
    assert rule.reason(WindowState(rows=21, tokens=10, idle_seconds=3599)) is None
    assert rule.reason(WindowState(rows=20, tokens=10, idle_seconds=10**6)) is None


def test_keep_recent_must_leave_room_in_the_window() -> None:
    CompactionRule(token_budget=1000, keep_recent=118)
    with pytest.raises(ValueError, match="below the window's 119 rows"):
        CompactionRule(token_budget=1000, keep_recent=119)
    with pytest.raises(ValueError, match="below the window's 9 rows"):
        CompactionRule(token_budget=1000, keep_recent=9, window_limit=10)


def test_the_rule_from_settings() -> None:
    rule = CompactionRule.from_settings(load_settings({}, dotenv=None))
    assert (
        rule.token_budget,
        rule.window_limit,
        rule.keep_recent,
        rule.chunk_messages,
        rule.idle_after,
    ) == (24000, 120, 20, 40, 21600)
    # a full window plus one turn's rows, down to nothing, 40 at a time (+1 to see it done)
    assert rule.max_rounds == -(-(120 + MAX_TURN_ROWS) // 40) + 1
    custom = load_settings(
        {"COMPACTION_IDLE_AFTER": "600", "COMPACTION_KEEP_RECENT": "5", "WINDOW_MESSAGES": "50"},
        dotenv=None,
    )
    assert CompactionRule.from_settings(custom).idle_after == 600
    assert CompactionRule.from_settings(custom).keep_recent == 5
    assert CompactionRule.from_settings(custom).window_rows == 49


def test_keep_recent_must_fit_the_window_setting() -> None:
    with pytest.raises(SettingsError, match="COMPACTION_KEEP_RECENT"):
        load_settings({"WINDOW_MESSAGES": "30", "COMPACTION_KEEP_RECENT": "29"}, dotenv=None)
    assert (
        load_settings(
            {"WINDOW_MESSAGES": "30", "COMPACTION_KEEP_RECENT": "28"}, dotenv=None
        ).window_messages
        == 30
    )


# --- the invariant: the real agent and compactor actor over an in-memory chat ------------------


@attrs.define
class Chat:
    """One chat's ``chat_messages`` in memory: a ConversationStore whose window reads only
    uncompacted rows, plus the compaction (the rule re-checked, :func:`select_chunk`, mark)."""

    rule: CompactionRule
    tools: Sequence[ToolSpec]
    rows: list[ChatMessage] = attrs.field(factory=list)
    compacted: set[int] = attrs.field(factory=set)
    chunks: list[list[int]] = attrs.field(factory=list)

    def uncompacted(self) -> list[ChatMessage]:
        return [r for r in self.rows if r.id not in self.compacted]

    def _add(self, row: ChatMessage) -> int:
        row_id = len(self.rows) + 1
        self.rows.append(attrs.evolve(row, id=row_id))
        return row_id

    async def add_user(
        self, chat_id: int, text: str, external_id: str | None, created_at: datetime
    ) -> int:
        return self._add(
            ChatMessage(
                role="user", content=text, created_at=created_at, external_message_id=external_id
            )
        )

    async def recent(self, chat_id: int, limit: int) -> list[ChatMessage]:
        return repair_rows(self.uncompacted()[-limit:] if limit > 0 else [])

    async def add_user_and_recent(
        self, chat_id: int, text: str, external_id: str | None, created_at: datetime, limit: int
    ) -> tuple[int, list[ChatMessage]]:
        window = await self.recent(chat_id, limit - 1)  # the snapshot before the insert
        return await self.add_user(chat_id, text, external_id, created_at), window

    async def add_rows(self, conn: Connection, chat_id: int, rows: Sequence[ChatMessage]) -> None:
        for row in rows:
            self._add(row)

    def state(self, allowance: int = 100) -> WindowState:
        """What WindowEstimate reports: rows up to the window limit, their context's tokens
        plus an allowance (so the agent's own estimate never exceeds it)."""
        rows = self.uncompacted()[-self.rule.window_limit :]
        context = build_context(
            now=T0,
            timezone=TZ,
            memory=RetrievedMemory(),
            window=repair_rows(rows),
            tools=self.tools,
        )
        return WindowState(rows=len(rows), tokens=context.estimated_tokens + allowance)

    async def compact_once(self, chat_id: int) -> CompactionOutcome:
        if self.rule.reason(self.state()) is None:
            return CompactionOutcome("not_needed", chat_id)
        chunk = select_chunk(self.uncompacted(), self.rule.keep_recent, self.rule.chunk_messages)
        if not chunk:
            return CompactionOutcome("not_needed", chat_id)
        ids = [cast(int, r.id) for r in chunk]
        self.compacted.update(ids)
        self.chunks.append(ids)
        return CompactionOutcome("ok", chat_id, messages_compacted=len(ids))


@attrs.frozen
class Turn:
    """One exchange: the user's text, the tools the model calls (their results' sizes), the
    answer."""

    user: int
    results: tuple[int, ...]
    answer: int


@attrs.define
class PlayedLLM:
    """Answers each turn as its :class:`Turn` says: one request per tool call, then the text."""

    turns: list[Turn]
    step: int = 0

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
        turn = self.turns[0]
        if self.step < len(turn.results):
            size = turn.results[self.step]
            self.step += 1
            use = ToolUseBlock(f"toolu_{len(self.turns)}_{self.step}", "lookup", {"size": size})
            return Completion((use,), "tool_use", 10, 10, "fake")
        self.turns.pop(0)
        self.step = 0
        return Completion((TextBlock("b" * turn.answer),), "end_turn", 10, 10, "fake")


@attrs.frozen
class LookupInput:
    size: int = attrs.field(metadata=spec(minimum=0))


async def lookup(ctx: ToolContext, inp: LookupInput) -> str:
    return "r" * inp.size


LOOKUP = ToolRegistry([Tool("lookup", "Look up.", LookupInput, lookup)])

turns = st.lists(
    st.builds(
        Turn,
        user=st.integers(1, 600),
        results=st.lists(st.integers(0, 3000), max_size=2).map(tuple),
        answer=st.integers(1, 1500),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    script=turns,
    window_limit=st.integers(4, 40),
    keep_fraction=st.floats(0, 1),
    chunk=st.integers(2, 15),
    budget=st.integers(2500, 9000),
)
def test_no_uncompacted_row_is_older_than_the_next_window(
    script: list[Turn], window_limit: int, keep_fraction: float, chunk: int, budget: int
) -> None:
    """After every turn's compaction settles, the next turn's window starts at the oldest
    uncompacted row (every uncompacted row is shown), whatever the message sizes; and the
    context is within the budget unless nothing is left to compact."""
    keep = int(keep_fraction * (window_limit - 2))
    rule = CompactionRule(
        token_budget=budget, keep_recent=keep, chunk_messages=chunk, window_limit=window_limit
    )
    chat = Chat(rule, tool_specs(LOOKUP))
    actor = CompactorActor(chat.compact_once, max_rounds=rule.max_rounds)
    agent = Agent(
        llm=PlayedLLM(list(script)),
        conversation=chat,
        tools=LOOKUP,
        tool_db=cast(Any, None),
        timezone=TZ,
        clock=lambda: T0,
        window_limit=window_limit,
        context_token_budget=budget,
        on_over_budget=actor.request,
    )

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(actor.run)
            for n, turn in enumerate(script):
                reply = await agent.run_turn(
                    TurnInput(CHAT, "a" * turn.user, (n,), (n,), (f"update:{n}",))
                )
                if reply.persist is not None:
                    await reply.persist(cast(Connection, None))
                if reply.after_commit is not None:
                    await reply.after_commit()
                await actor.wait_idle()
                left = chat.uncompacted()
                shown = await chat.recent(CHAT, window_limit - 1)
                assert len(left) <= rule.window_rows
                assert not left or shown[0].id == left[0].id  # nothing older left unseen
                # the agent's own view of the next context (no allowance) fits the budget
                tokens = chat.state(allowance=0).tokens
                assert tokens <= budget or not select_chunk(left, keep, chunk)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert not any(o.status == "failed" for o in actor.outcomes)
    assert sorted(i for c in chat.chunks for i in c) == sorted(chat.compacted)  # each once


# --- the sweep: idle chats and old backlogs, under MockClock ----------------------------------


@attrs.define
class Backlogs:
    """Chats' uncompacted row times in memory: the sweep's BacklogStore and the compaction
    (the rule re-checked at the virtual time, then the oldest chunk marked)."""

    rule: CompactionRule
    chats: dict[int, list[datetime]] = attrs.field(factory=dict)
    calls: list[tuple[float, int]] = attrs.field(factory=list)

    async def backlog(self, keep_recent: int) -> list[ChatBacklog]:
        found = [
            ChatBacklog(c, len(t), t[0], t[-1])
            for c, t in self.chats.items()
            if len(t) > keep_recent
        ]
        return sorted(found, key=lambda b: (b.oldest_at, b.chat_id))

    async def compact_once(self, chat_id: int) -> CompactionOutcome:
        self.calls.append((trio.current_time(), chat_id))
        times = self.chats[chat_id]
        idle = (now() - times[-1]).total_seconds() if times else 0.0
        state = WindowState(rows=len(times), tokens=0, idle_seconds=idle)
        reason = self.rule.reason(state)
        take = min(self.rule.chunk_messages, len(times) - self.rule.keep_recent)
        if reason is None or take <= 0:
            return CompactionOutcome("not_needed", chat_id)
        del times[:take]
        return CompactionOutcome("ok", chat_id, messages_compacted=take, reason=reason)

    def write(self, chat_id: int, count: int = 1) -> None:
        self.chats.setdefault(chat_id, []).extend([now()] * count)


def now() -> datetime:
    """The virtual wall clock: T0 plus trio's (mock) time."""
    return T0 + timedelta(seconds=trio.current_time())


HOUR = 3600.0


async def test_an_idle_chat_is_compacted_down_to_keep_recent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    rule = CompactionRule(
        token_budget=10**6, keep_recent=20, chunk_messages=40, idle_after=6 * HOUR
    )
    store = Backlogs(rule)
    sweep = CompactionSweep(store, store.compact_once, rule, interval=HOUR, clock=now)
    store.write(1, 100)  # a short conversation: under the window, under the budget
    store.write(2, 30)
    async with trio.open_nursery() as nursery:
        await nursery.start(sweep.run)
        for _ in range(12):  # chat 2 keeps talking every 50 minutes: never idle
            await trio.sleep(50 * 60)
            store.write(2, 2)
        nursery.cancel_scope.cancel()
    # chat 1 went quiet at 0 h: the first pass at or after 6 h compacts it, round after round,
    # down to keep_recent (80 rows: 40 + 40, then the rule says done)
    idle = [t for t, c in store.calls if c == 1]
    assert idle and min(idle) == 6 * HOUR
    assert len(store.chats[1]) == 20
    assert [c for _, c in store.calls] == [1] * 3  # the third round finds it done
    assert len(store.chats[2]) == 54 and 2 not in {c for _, c in store.calls}


async def test_a_backlog_is_compacted_oldest_first_a_chunk_per_chat_per_pass(
    autojump_clock: trio.testing.MockClock,
) -> None:
    rule = CompactionRule(
        token_budget=10**6,
        keep_recent=20,
        chunk_messages=40,
        idle_after=1000 * HOUR,
        window_limit=200,
    )
    store = Backlogs(rule)
    store.write(7, 300)  # a database from before the rule: rows beyond the window
    await trio.sleep(1)
    store.write(5, 260)
    await trio.sleep(1)
    store.write(9, 100)  # within the window: not the sweep's
    sweep = CompactionSweep(store, store.compact_once, rule, interval=HOUR, max_chunks=3, clock=now)
    first = await sweep.run_once()
    assert [(c, r, s) for c, r, s in first.chats] == [(7, "rows", ("ok",)), (5, "rows", ("ok",))]
    assert (len(store.chats[7]), len(store.chats[5])) == (260, 220)
    async with trio.open_nursery() as nursery:
        await nursery.start(sweep.run)  # a pass at start, then one an hour
        await trio.sleep(2.5 * HOUR)
        nursery.cancel_scope.cancel()
    assert sweep.passes == 3
    assert (len(store.chats[7]), len(store.chats[5])) == (180, 180)  # both within the window
    assert len(store.chats[9]) == 100
    # the oldest backlog first, each chat one chunk a pass: 7 needed three passes, 5 two
    assert store.calls == [(2, 7), (2, 5), (2, 7), (2, 5), (2 + HOUR, 7)]


async def test_a_pass_spends_at_most_max_chunks(autojump_clock: trio.testing.MockClock) -> None:
    rule = CompactionRule(token_budget=10**6, keep_recent=0, chunk_messages=10, idle_after=60)
    store = Backlogs(rule)
    for chat in range(1, 6):
        store.write(chat, 25)
    await trio.sleep(120)  # all five idle
    sweep = CompactionSweep(store, store.compact_once, rule, interval=HOUR, max_chunks=4, clock=now)
    result = await sweep.run_once()
    assert result.chunks == 4 and result.deferred == 3  # 3 + 1 for chats 1 and 2; 3-5 wait
    assert [len(store.chats[c]) for c in range(1, 6)] == [0, 15, 25, 25, 25]
    result = await sweep.run_once()
    assert [len(store.chats[c]) for c in range(1, 6)] == [0, 0, 5, 25, 25]
