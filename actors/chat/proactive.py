"""What the chat actor needs for due runs (:class:`Proactive`, in :class:`~actors.chat.deps.
ChatDeps`), the gates checked again before one is sent (:func:`check_gates`) and the record of
every run's outcome (:func:`record_run`): see :mod:`actors.chat.due_runs`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Literal

import attrs

from actors.scheduler.routine import DueRun, Routine
from memory.conversation.routine_summary import RoutineSummarizer
from runtime.db import Database, Queries

Outcome = Literal["sent", "declined", "skipped", "failed"]

# --- the gates, checked again ---------------------------------------------------------------

_GATE_STATE = """
SELECT p.active, p.paused_at IS NOT NULL AS paused
FROM (SELECT $1::bigint AS chat_id) c LEFT JOIN chat_proactive p ON p.chat_id = $1
"""


async def check_gates(db: Queries, run: DueRun, now: datetime) -> str | None:
    """Why ``run`` must not be sent now (None: it may): the seam the scheduler's gates
    (``actors/scheduler/gates.py``) plug into. Checked here cheaply, in one query: a paused
    chat (it blocked the bot) gets nothing; a routine needs proactive on (a reminder the
    person asked for does not)."""
    rec = await db.fetchrow(_GATE_STATE, run.chat_id)
    if rec is not None and rec["paused"]:
        return "paused: the chat blocked the bot"
    if run.kind == "routine" and not (rec is not None and rec["active"]):
        return "proactive is off"
    return None


GateCheck = Callable[[Queries, DueRun, datetime], Awaitable[str | None]]

# --- the runs' record ---------------------------------------------------------------------------

_RECORD = """
INSERT INTO proactive_runs (chat_id, job_id, name, due_at, outcome, reason, model_calls)
VALUES ($1, $2, $3, $4, $5, $6, $7)
"""
_LAST_OUTCOME = "UPDATE cron_jobs SET last_outcome = $2 WHERE chat_id = $3 AND id = $1"


async def record_run(
    conn: Queries, run: DueRun, outcome: Outcome, reason: str | None, model_calls: int
) -> None:
    """One ``proactive_runs`` row for ``run`` (and its job's ``last_outcome``): two single
    statements, collectable into a reply's commit."""
    due = run.due_at if run.due_at.tzinfo is not None else run.due_at.replace(tzinfo=UTC)
    await conn.execute(
        _RECORD, run.chat_id, run.job_id, run.name, due, outcome, reason, model_calls
    )
    await conn.execute(_LAST_OUTCOME, run.job_id, outcome, run.chat_id)


@attrs.frozen
class Proactive:
    """What the chat actor needs for due runs: the database (rules, records), the routines by
    name, the time zone the rules see, the summaries of sent messages, the gates."""

    db: Database
    routines: Mapping[str, Routine]
    timezone: str
    summarizer: RoutineSummarizer = attrs.field(factory=RoutineSummarizer)
    check_gates: GateCheck = check_gates
