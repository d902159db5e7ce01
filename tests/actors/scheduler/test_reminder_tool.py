"""A promise to remind is kept: a scripted model that says it will remind calls
``schedule_reminder``, the reminder exists in ``cron_jobs`` and the tool's result (seen by the
model) carries the confirmed local time; the system prompt tells the model to call it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from functools import partial

import attrs

from actors.agent.handler import agent_tools, sql_agent
from actors.agent.turn import TurnInput
from actors.chat.proactive_commands import ChatReminders, Controls
from actors.scheduler import jobs
from memory.llm.protocol import (
    Completion,
    Message,
    OnEvent,
    System,
    TextBlock,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
    system_text,
)
from memory.tools.reminder_tools import REMINDER_TOOLS
from runtime.db import Database

CHAT = 77
TZ = "Europe/Madrid"
NOW = datetime(2026, 3, 27, 10, 0, tzinfo=UTC)  # Friday 11:00 in Madrid


@attrs.define
class ScriptedModel:
    """Answers a reminder request with the tool call, then with the promise."""

    systems: list[str] = attrs.field(factory=list)
    results: list[str] = attrs.field(factory=list)
    tools: list[str] = attrs.field(factory=list)

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
        self.systems.append(system_text(system))
        self.tools = [t.name for t in tools]
        last = messages[-1]
        done = [b for b in last.blocks if isinstance(b, ToolResultBlock)]
        if not done:
            use = ToolUseBlock(
                "toolu_1", "schedule_reminder", {"when": "Sunday 10:00", "what": "call mum"}
            )
            return Completion((TextBlock("Sure."), use), "tool_use", 100, 10, "fake")
        self.results.append(done[0].content)
        return Completion(
            (TextBlock("I'll remind you on Sunday at 10:00 to call mum."),),
            "end_turn",
            100,
            10,
            "fake",
        )


async def test_a_promised_reminder_exists_with_its_confirmed_time(db: Database) -> None:
    model = ScriptedModel()
    controls = Controls(db, TZ)
    agent = sql_agent(
        db,
        model,
        timezone=TZ,
        clock=lambda: NOW,
        tools=agent_tools(REMINDER_TOOLS),
        reminders=partial(ChatReminders, controls),
    )
    reply = await agent.run_turn(
        TurnInput(CHAT, "remind me to call mum on Sunday at 10", (1,), (1,), ("update:1",))
    )
    assert "remind you on Sunday" in reply.text
    [job] = await jobs.list_jobs(db, CHAT)
    assert (job.kind, job.payload, job.run_at) == (
        "reminder",
        {"text": "call mum"},
        datetime(2026, 3, 29, 8, 0, tzinfo=UTC),  # 10:00 CEST
    )
    assert "Sun 29 Mar 2026, 10:00" in model.results[0]
    assert "schedule_reminder" in model.tools
    assert "call schedule_reminder" in model.systems[0]


async def test_without_reminders_the_tool_refuses_and_nothing_is_scheduled(db: Database) -> None:
    model = ScriptedModel()
    agent = sql_agent(db, model, timezone=TZ, clock=lambda: NOW, tools=agent_tools(REMINDER_TOOLS))
    await agent.run_turn(TurnInput(CHAT, "remind me", (1,), (1,), ("update:1",)))
    assert "not available" in model.results[0]
    assert await jobs.list_jobs(db, CHAT) == []
