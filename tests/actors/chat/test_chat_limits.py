"""Per-chat limits (issue 20 item 8) under MockClock through the in-memory fakes of
``test_chat_actor``: a burst is answered in a few turns, ``CHAT_TURNS_PER_MINUTE`` and
``CHAT_DAILY_COST_USD`` hold a chat's turns and say so once; and the pure rules."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import attrs
import pytest
import trio
import trio.testing
from fakes.memory import CHAT, Agent, Bot, MemoryStore, msg

from actors.agent.turn import TurnInput, TurnReply
from actors.chat import fragments, limits
from actors.chat.actor import ChatActor
from actors.chat.deps import ChatDeps
from actors.chat.wakes import Wake
from runtime.registry import Registry

NUMBER = re.compile(r"\bm(\d+)\b")


def flushed(text: str, n: int) -> fragments.Flushed:
    return fragments.Flushed(CHAT, 7, text, (n,), (n,), float(n))


def test_coalesce_joins_in_order_up_to_the_cap_and_keeps_empty_ones_apart() -> None:
    items = [
        flushed("a", 1),
        flushed("b", 2),
        flushed("", 3),
        flushed("c" * 8, 4),
        flushed("d", 5),
        flushed("e" * 9, 6),
    ]
    out = limits.coalesce(items, max_chars=10)
    assert [(o.text, o.update_ids) for o in out] == [
        ("a\n\nb", (1, 2)),
        ("", (3,)),
        ("c" * 8, (4,)),
        ("d", (5,)),
        ("e" * 9, (6,)),
    ]
    assert limits.coalesce([]) == []
    many = limits.coalesce([flushed(f"m{n}", n) for n in range(1000)])
    assert len(many) == 1 and many[0].update_ids == tuple(range(1000))


def test_next_turn_at_counts_the_last_minute() -> None:
    assert limits.next_turn_at([], 100.0, 6) is None
    assert limits.next_turn_at([1.0, 2.0, 3.0], 10.0, 3) == 61.0
    assert limits.next_turn_at([1.0, 2.0, 3.0], 61.5, 3) is None  # the first left the window
    assert limits.next_turn_at([1.0] * 50, 2.0, 0) is None  # 0: no limit


@attrs.define
class SlowAgent(Agent):
    """Each turn takes a second (a model call)."""

    async def run_turn(self, turn: TurnInput) -> TurnReply:
        self.turns.append((turn, trio.current_time()))
        await trio.sleep(1.0)
        return TurnReply("re " + " ".join(NUMBER.findall(turn.text)))


@attrs.define
class Setup:
    store: MemoryStore
    agent: Agent
    deps: ChatDeps
    registry: Registry[int, Wake]
    spent: list[float]

    async def deliver(self, text: str, n: int) -> int:
        row_id = self.store.add(msg(n, n, text))
        if self.deps.wakes.claim(CHAT):  # as the router does: one wake pending at most
            await self.registry.send(CHAT, Wake())
        return row_id


@pytest.fixture
async def setup(nursery: trio.Nursery) -> AsyncIterator[Setup]:
    store = MemoryStore()
    agent = SlowAgent(store=store)
    spent = [0.0]
    base = datetime(2026, 1, 1, tzinfo=UTC)

    async def spent_today(chat_id: int, now: datetime) -> float:
        return spent[0]

    deps = ChatDeps(
        store=store,
        turns=agent,
        bot=Bot(),
        outbox_ready=lambda c, r: None,
        wall_clock=lambda: base + timedelta(seconds=trio.current_time()),
        spent_today=spent_today,
        next_day=lambda now: now + timedelta(hours=1),
    )
    registry: Registry[int, Wake] = Registry(
        "chats", lambda chat_id: ChatActor(chat_id, deps), idle_timeout=7200, key_name="chat_id"
    )
    await nursery.start(registry.run)
    yield Setup(store, agent, deps, registry, spent)


async def test_a_burst_of_1000_messages_is_answered_in_a_few_turns(
    autojump_clock: trio.testing.MockClock, setup: Setup
) -> None:
    ids = []
    for n in range(1000):  # 1,000 messages in 4 s, each turn taking 1 s
        ids.append(await setup.deliver(f"m{n}", n + 1))
        await trio.sleep(0.004)
    await trio.sleep(60)
    calls = len(setup.agent.turns)
    assert calls <= 10  # not ~1,000 (one per message)
    assert {setup.store.rows[i].status for i in ids} == {"done"}
    answered = [int(x) for reply in setup.store.outbox for x in reply.split()[1:]]
    assert answered == list(range(1000))  # every message answered once, in order
    assert [i for t, _ in setup.agent.turns for i in t.inbox_ids] == ids


async def test_the_turn_rate_limit_holds_a_chat_and_tells_it_once(
    autojump_clock: trio.testing.MockClock, setup: Setup
) -> None:
    setup.deps.turns_per_minute = 6
    t0 = trio.current_time()
    ids = []
    for n in range(30):  # one message every 3 s: each its own turn, were it not for the limit
        ids.append(await setup.deliver(f"m{n}", n + 1))
        await trio.sleep(3)
    await trio.sleep(120)
    starts = [at - t0 for _, at in setup.agent.turns]
    assert all(sum(1 for s in starts if a <= s < a + 60) <= 6 for a in starts)  # never more
    assert starts[:6] == pytest.approx([0, 3, 6, 9, 12, 15])
    assert starts[6] == pytest.approx(60)  # held until the first left the window
    assert len(starts) < 30  # what waited was answered together
    assert setup.store.outbox.count(limits.RATE_LIMITED) >= 1
    first_notice = setup.store.outbox.index(limits.RATE_LIMITED)
    assert setup.store.outbox[first_notice + 1].startswith("re ")  # once, not per message
    assert {setup.store.rows[i].status for i in ids} == {"done"}
    answered = [
        int(x) for reply in setup.store.outbox for x in reply.split()[1:] if reply.startswith("re ")
    ]
    assert answered == list(range(30))
    assert {setup.store.rows[i].attempts for i in ids} == {0}  # waiting is not failing


async def test_the_daily_cost_limit_holds_turns_until_the_next_day(
    autojump_clock: trio.testing.MockClock, setup: Setup
) -> None:
    setup.deps.daily_cost_usd = 1.0
    setup.spent[0] = 0.4
    first = await setup.deliver("m0", 1)
    await trio.sleep(5)
    assert setup.store.outbox == ["re 0"]
    setup.spent[0] = 1.2  # today's calls have cost more than the limit
    later = []
    for n in range(1, 6):
        later.append(await setup.deliver(f"m{n}", n + 1))
        await trio.sleep(30)
    assert setup.store.outbox == ["re 0", limits.COST_LIMITED]  # told once, nothing answered
    assert {setup.store.rows[i].status for i in later} == {"pending"}  # stored, waiting
    setup.spent[0] = 0.0  # a new day (next_day: an hour after the limit was reached)
    await trio.sleep(3600)
    assert setup.store.outbox == ["re 0", limits.COST_LIMITED, "re 1 2 3 4 5"]
    assert {setup.store.rows[i].status for i in [first, *later]} == {"done"}


async def test_a_long_paste_while_held_waits_with_the_rest(
    autojump_clock: trio.testing.MockClock, setup: Setup
) -> None:
    setup.deps.turns_per_minute = 1
    await setup.deliver("m0", 1)
    await trio.sleep(2)
    await setup.deliver("m1", 2)  # held: one turn a minute
    await trio.sleep(2)
    paste = await setup.deliver("m2 " + "x" * 4000, 3)  # a fragment's timer while held
    with trio.fail_after(120):
        await trio.sleep(90)
    assert setup.store.outbox == ["re 0", limits.RATE_LIMITED, "re 1 2"]
    assert setup.store.rows[paste].status == "done"
    assert [at for _, at in setup.agent.turns] == pytest.approx([0, 60])
