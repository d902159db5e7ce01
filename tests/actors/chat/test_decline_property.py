"""No sentinel ever reaches the person (issue 22, deliverable 1), as a property: for any text
the model writes beside a ``decline`` call, and for any marker-like reply (NO_REPLY,
HEARTBEAT_OK, ...), the real agent's routine turn is declined and the real chat actor, on the
real database, queues nothing in the outbox and records ``declined``."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

import attrs
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.agent.handler import sql_agent
from actors.agent.routine_turn import DECLINE, looks_like_marker
from actors.agent.turn import TurnReply
from actors.chat.actor import ChatActor
from actors.chat.deps import ChatDeps
from actors.chat.proactive import Proactive
from actors.chat.store import SqlChatStore
from actors.chat.wakes import Wake
from actors.queues import inbox
from actors.queues.outbox import OutboxRow
from actors.scheduler.routine import INBOX_KIND, Brief, DueRun, RoutineContext, update_key
from memory.llm.protocol import Completion, TextBlock, ToolUseBlock
from runtime.db import Database

CHAT = 22033
IDS = itertools.count(1)
#: markers as a model might invent them: capitals joined by _ or -, maybe bracketed
MARKERS = st.from_regex(r"\A[\[(<]?[A-Z]{2,8}(?:[_-][A-Z0-9]{1,8}){0,3}[\])>]?[.!]?\Z")


@attrs.define
class Rule:
    name: str = "nightly-reflection"
    title: str = "Nightly reflection"
    default_schedule: str = "0 21 * * *"

    async def decide(self, ctx: RoutineContext) -> Brief | None:
        return Brief(prompt="Ask how the day went.")


@attrs.define
class OneAnswer:
    """The model: answers ``next`` once per call."""

    next: Completion | None = None
    calls: int = 0

    async def complete(self, **_: Any) -> Completion:
        self.calls += 1
        assert self.next is not None
        return self.next


def declining(text: str) -> Completion:
    blocks: list[Any] = [TextBlock(text)] if text else []
    blocks.append(ToolUseBlock(f"toolu_{next(IDS)}", DECLINE, {"reason": "not now"}))
    return Completion(tuple(blocks), "tool_use", 10, 1, "fake")


@given(MARKERS)
def test_every_invented_marker_looks_like_one(marker: str) -> None:
    assert looks_like_marker(marker)


@given(
    st.sampled_from(
        [
            "How was your day?",
            "Good morning! Ready for Sunday?",
            "Hi!",
            "Ok then",
            "You ran 3 times this week.",
            "¿Qué tal?",
            "Heads-up: dentist at 9.",
        ]
    )
)
def test_messages_do_not_look_like_markers(text: str) -> None:
    assert not looks_like_marker(text)


async def test_nothing_reaches_the_outbox_on_a_declined_or_marker_routine_turn(
    db: Database,
) -> None:
    await db.execute("INSERT INTO chat_proactive (chat_id, active) VALUES ($1, true)", CHAT)
    model = OneAnswer()
    queued: list[OutboxRow | None] = []
    agent = sql_agent(db, model, timezone="UTC", prompt_cache=None)
    deps = ChatDeps(
        store=SqlChatStore(db),
        turns=agent,
        bot=Quiet(),
        outbox_ready=lambda _, row: queued.append(row),
        proactive=Proactive(db=db, routines={"nightly-reflection": Rule()}, timezone="UTC"),
    )
    actor = ChatActor(CHAT, deps)
    jobs = itertools.count(1)
    seen = {"declined": 0, "marker": 0}

    async def one(case: tuple[str, str]) -> None:
        how, text = case
        model.next = (
            declining(text)
            if how == "declined"
            else Completion((TextBlock(text),), "end_turn", 10, 1, "fake")
        )
        job = next(jobs)
        due_at = datetime(2026, 3, 1, 21, 0, tzinfo=UTC)
        run = DueRun(
            job_id=job, chat_id=CHAT, name="nightly-reflection", kind="routine", due_at=due_at
        )
        await inbox.insert_update(
            db, update_key(job, due_at), None, CHAT, INBOX_KIND, run.to_payload()
        )
        await actor.handle(Wake())
        outcome = await db.fetchval("SELECT outcome FROM proactive_runs WHERE job_id = $1", job)
        assert outcome == "declined", (case, outcome)
        seen[how] += 1

    @settings(
        max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(
        st.one_of(
            st.tuples(st.just("declined"), st.text(max_size=300)),
            st.tuples(st.just("marker"), MARKERS),
        )
    )
    def property_(case: tuple[str, str]) -> None:
        trio.from_thread.run(one, case)

    await one(("declined", "NO_REPLY"))
    await one(("marker", "NO_REPLY"))
    await trio.to_thread.run_sync(property_)
    assert seen["declined"] >= 5 and seen["marker"] >= 5, seen
    assert await db.fetchval("SELECT count(*) FROM outbox WHERE chat_id = $1", CHAT) == 0
    assert queued == []  # the sender was never told of a row
    assert await db.fetchval("SELECT count(*) FROM chat_messages WHERE chat_id = $1", CHAT) == 0
    assert (
        await db.fetchval(
            "SELECT count(*) FROM inbox WHERE chat_id = $1 AND status <> 'skipped'", CHAT
        )
        == 0
    )
    assert model.calls == sum(seen.values())  # one model call a turn: a decline ends it


async def test_a_handler_that_declines_never_has_its_text_sent(db: Database) -> None:
    """Any turn handler's declined reply (not only the agent's): its text is ignored."""

    @attrs.define
    class Declines:
        async def run_turn(self, turn: Any) -> TurnReply:
            return TurnReply(
                "NO_REPLY but also a whole message", declined="quiet day", model_calls=2
            )

    await db.execute("INSERT INTO chat_proactive (chat_id, active) VALUES ($1, true)", CHAT)
    deps = ChatDeps(
        store=SqlChatStore(db),
        turns=Declines(),
        bot=Quiet(),
        outbox_ready=lambda *_: None,
        proactive=Proactive(db=db, routines={"nightly-reflection": Rule()}, timezone="UTC"),
    )
    due_at = datetime(2026, 3, 1, 21, 0, tzinfo=UTC)
    run = DueRun(job_id=7, chat_id=CHAT, name="nightly-reflection", kind="routine", due_at=due_at)
    await inbox.insert_update(db, update_key(7, due_at), None, CHAT, INBOX_KIND, run.to_payload())
    await ChatActor(CHAT, deps).handle(Wake())
    rec = await db.fetchrow("SELECT outcome, reason, model_calls FROM proactive_runs")
    assert rec is not None
    assert (rec["outcome"], rec["reason"], rec["model_calls"]) == ("declined", "quiet day", 2)
    assert await db.fetchval("SELECT count(*) FROM outbox") == 0


class Quiet:
    async def send_chat_action(self, chat_id: int | str, action: str = "typing") -> None:
        pass
