"""An in-memory :class:`~actors.scheduler.scheduler.DueStore` for the scheduler's timing tests
(MockClock): the same plan applied to jobs held in a list."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import attrs

from actors.scheduler.gates import Defer, Gate, GateState, Open
from actors.scheduler.jobs import Job
from actors.scheduler.scheduler import DUE_KEY, day_start, due_of


@attrs.define
class MemoryStore:
    jobs: list[Job] = attrs.field(factory=list)
    states: dict[int, GateState] = attrs.field(factory=dict)
    #: (chat_id, job name, due time, when it was enqueued)
    enqueued: list[tuple[int, str, datetime, datetime]] = attrs.field(factory=list)
    #: (job name, outcome, reason)
    runs: list[tuple[str, str, str]] = attrs.field(factory=list)

    #: the routine sends of each chat (the chat actor's ``sent`` rows)
    sent: dict[int, list[datetime]] = attrs.field(factory=dict)

    def state(self, chat_id: int, now: datetime) -> GateState:
        st = self.states.get(chat_id, GateState("Europe/Madrid", active=True))
        sends = self.sent.get(chat_id, [])
        start = day_start(now, st.timezone)
        return attrs.evolve(
            st,
            sends_today=st.sends_today + sum(1 for t in sends if t >= start),
            last_send=max(sends, default=st.last_send),
        )

    async def process_due(
        self, now: datetime, decide: Callable[[Job, GateState, datetime], Gate]
    ) -> list[int]:
        woken: list[int] = []
        for i, job in enumerate(self.jobs):
            if not job.enabled or job.next_run_at is None or job.next_run_at > now:
                continue
            due = due_of(job)
            gate = decide(job, self.state(job.chat_id, now), now)
            payload = {k: v for k, v in job.payload.items() if k != DUE_KEY}
            if isinstance(gate, Open):
                self.enqueued.append((job.chat_id, job.name, due, now))
                nxt = job.after(due)
                woken.append(job.chat_id)
                if job.kind == "routine":  # a send, as the chat actor would record it
                    self.sent.setdefault(job.chat_id, []).append(now)
            elif isinstance(gate, Defer):
                nxt, payload[DUE_KEY] = gate.until, due.isoformat()
                self.runs.append((job.name, "deferred", gate.reason))
            else:
                nxt = job.after(max(due, now))
                self.runs.append((job.name, "skipped", gate.reason))
            self.jobs[i] = attrs.evolve(job, next_run_at=nxt, payload=payload)
        return woken


def routine_job(
    job_id: int, name: str, schedule: str, first: datetime, *, chat_id: int = 1, grace_s: int = 3600
) -> Job:
    return Job(job_id, chat_id, name, "routine", schedule, None, "Europe/Madrid", {}, True,
               grace_s, first)  # fmt: skip


def reminder_job(job_id: int, at: datetime, *, chat_id: int = 1) -> Job:
    return Job(job_id, chat_id, f"reminder-{job_id}", "reminder", None, at, "Europe/Madrid",
               {"text": "x"}, True, 3600, at)  # fmt: skip
