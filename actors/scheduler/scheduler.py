"""The scheduler: a singleton actor that turns due jobs into inbox rows.

Every ``tick`` seconds (or at once when :meth:`Scheduler.poke`-d: a job was created) it asks
its :class:`DueStore` to handle the due jobs in one transaction: each claimed job is planned by
:func:`actors.scheduler.gates.plan` — missed past its grace: ``skipped`` and logged; a gate
closed: ``deferred`` to when it opens (or ``skipped``); open: the run's inbox row (kind
``routine``, one per job and due time) and the job advanced. Then each chat with a new row is
woken through the router, like ingress does; the chat's actor takes the run in its order with
the person's messages (:mod:`actors.scheduler.routine`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from datetime import UTC, datetime, time
from typing import Protocol
from zoneinfo import ZoneInfo

import attrs
import trio

from actors.queues import inbox
from actors.scheduler import jobs
from actors.scheduler.gates import Defer, Gate, GateState, Limits, Open, plan
from actors.scheduler.jobs import Job
from actors.scheduler.routine import INBOX_KIND, DueRun, update_key
from runtime import metrics
from runtime.db import Database, Queries
from runtime.errors import DatabaseError
from runtime.logs import get_logger

log = get_logger(__name__)

#: the original due time of a deferred run, kept in the job's payload while it waits
DUE_KEY = "_due_at"


def due_of(job: Job) -> datetime:
    """When the job's pending run was due (a deferred run keeps its first due time)."""
    kept = job.payload.get(DUE_KEY)
    if isinstance(kept, str):
        return datetime.fromisoformat(kept)
    assert job.next_run_at is not None
    return job.next_run_at


def day_start(now: datetime, timezone: str) -> datetime:
    """The start of ``now``'s local day in ``timezone``."""
    local = now.astimezone(ZoneInfo(timezone))
    return datetime.combine(local.date(), time(0), tzinfo=local.tzinfo)


class DueStore(Protocol):
    async def process_due(
        self, now: datetime, decide: Callable[[Job, GateState, datetime], Gate]
    ) -> list[int]:
        """Claim the due jobs, apply ``decide`` to each and write the outcome, atomically;
        the chats that got a run's inbox row."""
        ...


@attrs.frozen
class SqlDueStore:
    """The store on PostgreSQL (claim ``FOR UPDATE SKIP LOCKED``; one transaction a batch)."""

    db: Database
    batch: int = 500

    async def process_due(
        self, now: datetime, decide: Callable[[Job, GateState, datetime], Gate]
    ) -> list[int]:
        woken: list[int] = []
        async with self.db.transaction() as conn:
            claimed = await jobs.claim_due(conn, now, self.batch)
            if not claimed:
                return woken
            zones = {j.chat_id: j.timezone for j in claimed}
            starts = {c: day_start(now, tz) for c, tz in zones.items()}
            states = await jobs.gate_states(conn, starts, zones)
            for job in claimed:
                due = due_of(job)
                gate = decide(job, states.get(job.chat_id, GateState(job.timezone)), now)
                if isinstance(gate, Open):
                    run = DueRun(job.id, job.chat_id, job.name, job.kind, due, _own(job))
                    await inbox.insert_update(
                        conn,
                        update_key(job.id, due),
                        None,
                        job.chat_id,
                        INBOX_KIND,
                        run.to_payload(),
                    )
                    await _move(conn, job, job.after(due), now, "queued", keep_due=None)
                    woken.append(job.chat_id)
                elif isinstance(gate, Defer):
                    await jobs.record_run(
                        conn, job.chat_id, job.id, job.name, due, "deferred", gate.reason, at=now
                    )
                    await _move(conn, job, gate.until, None, "deferred", keep_due=due)
                else:
                    await jobs.record_run(
                        conn, job.chat_id, job.id, job.name, due, "skipped", gate.reason, at=now
                    )
                    await _move(conn, job, job.after(max(due, now)), now, "skipped", keep_due=None)
                    metrics.proactive_skipped(gate.reason)
                log.info(
                    "scheduler.run",
                    job_id=job.id,
                    chat_id=job.chat_id,
                    name=job.name,
                    outcome=type(gate).__name__.lower(),
                    reason=gate.reason,
                )
        return list(dict.fromkeys(woken))


def _own(job: Job) -> dict[str, object]:
    return {k: v for k, v in job.payload.items() if k != DUE_KEY}


async def _move(
    db: Queries,
    job: Job,
    nxt: datetime | None,
    ran: datetime | None,
    outcome: str,
    *,
    keep_due: datetime | None,
) -> None:
    payload = _own(job)
    if keep_due is not None:
        payload[DUE_KEY] = keep_due.isoformat()
    await db.execute(
        "UPDATE cron_jobs SET next_run_at = $2, last_run_at = COALESCE($3, last_run_at), "
        "last_outcome = $4, payload = $5::jsonb WHERE chat_id = $6 AND id = $1",
        job.id,
        nxt,
        ran,
        outcome,
        json.dumps(payload),
        job.chat_id,
    )


def wall_clock() -> datetime:
    return datetime.now(UTC)


@attrs.define(eq=False)
class Scheduler:
    """The singleton: a tick of ``tick`` seconds, an early wake on :meth:`poke`, stopped
    between ticks by :meth:`aclose` (a shutdown never cuts a tick's transaction)."""

    store: DueStore
    limits: Limits
    tick: float = 30.0
    clock: Callable[[], datetime] = wall_clock
    wake_chat: Callable[[int], None] = lambda chat_id: None
    _poked: trio.Event = attrs.field(init=False, factory=trio.Event)
    _stopping: bool = attrs.field(init=False, default=False)
    _idle: trio.Event = attrs.field(init=False, factory=trio.Event)

    def poke(self) -> None:
        """A job was created: look now (never blocks)."""
        self._poked.set()

    async def aclose(self) -> None:
        """The shutdown drain: no new tick; the tick in hand (its transaction) ends first."""
        self._stopping = True
        self._poked.set()
        await self._idle.wait()

    def decide(self, job: Job, state: GateState, now: datetime) -> Gate:
        return plan(job.kind, due_of(job), job.grace_s, state, now, self.limits)

    async def run_once(self) -> list[int]:
        """Handle what is due now; the chats woken."""
        woken = await self.store.process_due(self.clock(), self.decide)
        for chat_id in woken:
            self.wake_chat(chat_id)
        return woken

    async def run(
        self,
        *,
        wake_chat: Callable[[int], None] | None = None,
        task_status: trio.TaskStatus[Scheduler] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        if wake_chat is not None:
            self.wake_chat = wake_chat
        self._idle = trio.Event()
        task_status.started(self)
        try:
            while not self._stopping:
                self._poked = trio.Event()
                try:
                    await self.run_once()
                except DatabaseError as exc:  # the next tick tries again
                    log.warning("scheduler.tick_failed", error=str(exc))
                with trio.move_on_after(self.tick if math.isfinite(self.tick) else 3600):
                    await self._poked.wait()
        finally:
            self._idle.set()
