"""The proactive store: ``cron_jobs`` (a chat's routine jobs and one-shot reminders),
``chat_proactive`` (its preferences) and ``proactive_runs`` (every run's outcome).

Due jobs are claimed ``FOR UPDATE SKIP LOCKED`` inside the caller's transaction, one chat per
locking statement (the chats with due jobs are read first, without locks: on Citus a locking
statement must stay within one shard), so two schedulers on one database run each due job once;
the run's inbox row, the advance and the ``proactive_runs`` row are written in that same
transaction (:mod:`actors.scheduler.scheduler`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

import attrs

from actors.scheduler.gates import GateState
from actors.scheduler.schedule import next_run
from actors.scheduler.settings import QuietHours
from runtime.db import Queries

Outcome = Literal["sent", "declined", "skipped", "deferred", "failed"]
Digest = Literal["daily", "weekly", "off"]


@attrs.frozen
class Job:
    id: int
    chat_id: int
    name: str
    kind: Literal["routine", "reminder"]
    schedule: str | None
    run_at: datetime | None
    timezone: str
    payload: Mapping[str, Any]
    enabled: bool
    grace_s: int
    next_run_at: datetime | None

    @classmethod
    def from_record(cls, r: Any) -> Job:
        payload = r["payload"]
        return cls(
            r["id"],
            r["chat_id"],
            r["name"],
            r["kind"],
            r["schedule"],
            r["run_at"],
            r["timezone"],
            json.loads(payload) if isinstance(payload, str) else dict(payload),
            r["enabled"],
            r["grace_s"],
            r["next_run_at"],
        )

    def after(self, due_at: datetime) -> datetime | None:
        """The next run after the run due at ``due_at``: a cron job's next, a one-shot's none."""
        if self.schedule is None:
            return None
        return next_run(self.schedule, self.timezone, due_at)


_COLS = (
    "id, chat_id, name, kind, schedule, run_at, timezone, payload, enabled, grace_s, next_run_at"
)


# --- jobs -------------------------------------------------------------------------------------


async def upsert_routine(
    db: Queries,
    chat_id: int,
    name: str,
    schedule: str,
    timezone: str,
    now: datetime,
    *,
    grace_s: int = 3600,
) -> Job:
    """Create (or re-enable, with ``schedule``) the chat's routine job ``name``."""
    nxt = next_run(schedule, timezone, now)
    rec = await db.fetchrow(
        "INSERT INTO cron_jobs (chat_id, name, kind, schedule, timezone, grace_s, next_run_at) "
        "VALUES ($1, $2, 'routine', $3, $4, $5, $6) "
        "ON CONFLICT (chat_id, name) DO UPDATE SET schedule = $3, timezone = $4, "
        "enabled = true, next_run_at = $6 "
        f"RETURNING {_COLS}",
        chat_id,
        name,
        schedule,
        timezone,
        grace_s,
        nxt,
    )
    return Job.from_record(rec)


async def create_reminder(
    db: Queries, chat_id: int, run_at: datetime, text: str, timezone: str, *, grace_s: int = 3600
) -> Job:
    """A one-shot reminder ``reminder-<n>`` at ``run_at`` carrying ``text``."""
    rec = await db.fetchrow(
        "INSERT INTO cron_jobs (id, chat_id, name, kind, run_at, timezone, payload, grace_s, "
        "next_run_at) SELECT n, $1, 'reminder-' || n, 'reminder', $2, $3, $4::jsonb, $5, $2 "
        "FROM nextval('cron_jobs_id_seq') AS n "
        f"RETURNING {_COLS}",
        chat_id,
        run_at,
        timezone,
        json.dumps({"text": text}),
        grace_s,
    )
    return Job.from_record(rec)


async def list_jobs(db: Queries, chat_id: int) -> list[Job]:
    """The chat's jobs still to run (enabled, with a next run), soonest first."""
    rows = await db.fetch(
        f"SELECT {_COLS} FROM cron_jobs WHERE chat_id = $1 AND enabled "
        "AND next_run_at IS NOT NULL ORDER BY next_run_at, id",
        chat_id,
    )
    return [Job.from_record(r) for r in rows]


async def set_enabled(db: Queries, chat_id: int, job_id: int, enabled: bool) -> str | None:
    """Switch one of the chat's jobs on or off; its name, or None when it is not the chat's."""
    name: str | None = await db.fetchval(
        "UPDATE cron_jobs SET enabled = $3 WHERE chat_id = $1 AND id = $2 RETURNING name",
        chat_id,
        job_id,
        enabled,
    )
    return name


async def disable_routines(db: Queries, chat_id: int, names: Sequence[str] | None = None) -> int:
    """Switch off the chat's routine jobs (only ``names`` when given); reminders stay."""
    status = await db.execute(
        "UPDATE cron_jobs SET enabled = false WHERE chat_id = $1 AND kind = 'routine' "
        "AND enabled AND ($2::text[] IS NULL OR name = ANY($2))",
        chat_id,
        None if names is None else list(names),
    )
    return int(status.split()[-1])


_DUE = "enabled AND next_run_at IS NOT NULL AND next_run_at <= $1"
_DUE_CHATS = (
    "/* all chats: which chats have due jobs (read, not locked) */ "
    f"SELECT chat_id FROM cron_jobs WHERE {_DUE} GROUP BY chat_id ORDER BY min(next_run_at) "
    "LIMIT $2"
)
_CLAIM_CHAT = (
    f"SELECT {_COLS} FROM cron_jobs WHERE chat_id = $3 AND {_DUE} "
    "ORDER BY next_run_at LIMIT $2 FOR UPDATE SKIP LOCKED"
)


async def claim_due(db: Queries, now: datetime, limit: int = 500) -> list[Job]:
    """Due jobs (at most ``limit``), locked for this transaction (``FOR UPDATE SKIP LOCKED``:
    another scheduler claims the others), one chat's per statement: the chats with due jobs
    are read first, unlocked, in the order of their earliest due job; the jobs come back in
    due order."""
    jobs: list[Job] = []  # more chats than the limit: another scheduler may hold the first
    for chat in await db.fetch(_DUE_CHATS, now, limit * 4):
        if len(jobs) >= limit:
            break
        rows = await db.fetch(_CLAIM_CHAT, now, limit - len(jobs), chat["chat_id"])
        jobs.extend(Job.from_record(r) for r in rows)
    return sorted(jobs, key=lambda j: (j.next_run_at or now, j.id))


async def advance(
    db: Queries,
    job_id: int,
    next_run_at: datetime | None,
    *,
    ran_at: datetime | None,
    outcome: str,
) -> None:
    """Move the job to ``next_run_at`` (None: finished); ``ran_at``: the run just handled."""
    await db.execute(
        "UPDATE cron_jobs SET next_run_at = $2, last_run_at = COALESCE($3, last_run_at), "
        "last_outcome = $4 WHERE id = $1",
        job_id,
        next_run_at,
        ran_at,
        outcome,
    )


async def record_run(
    db: Queries,
    chat_id: int,
    job_id: int | None,
    name: str,
    due_at: datetime,
    outcome: Outcome,
    reason: str | None = None,
    *,
    model_calls: int = 0,
    at: datetime | None = None,
) -> None:
    """One ``proactive_runs`` row."""
    await db.execute(
        "INSERT INTO proactive_runs (chat_id, job_id, name, due_at, outcome, reason, "
        "model_calls, at) VALUES ($1, $2, $3, $4, $5, $6, $7, COALESCE($8, now()))",
        chat_id,
        job_id,
        name,
        due_at,
        outcome,
        reason,
        model_calls,
        at,
    )


# --- preferences ------------------------------------------------------------------------------


@attrs.frozen
class Prefs:
    active: bool = False
    quiet: QuietHours | Literal["default"] = "default"
    digest: Digest = "weekly"
    paused: bool = False


async def prefs(db: Queries, chat_id: int) -> Prefs:
    r = await db.fetchrow(
        "SELECT active, quiet_start, quiet_end, quiet_off, digest, paused_at "
        "FROM chat_proactive WHERE chat_id = $1",
        chat_id,
    )
    if r is None:
        return Prefs()
    return Prefs(r["active"], _quiet(r), r["digest"], r["paused_at"] is not None)


def _quiet(r: Any) -> QuietHours | Literal["default"]:
    if r["quiet_off"]:
        return None
    if r["quiet_start"] is None:
        return "default"
    return (r["quiet_start"], r["quiet_end"])


async def set_prefs(db: Queries, chat_id: int, **values: Any) -> None:
    """Set some of the chat's preferences (``active``, ``quiet_start``, ``quiet_end``,
    ``quiet_off``, ``digest``, ``paused_at``, ``paused_reason``); the others stay."""
    allowed = {
        "active",
        "quiet_start",
        "quiet_end",
        "quiet_off",
        "digest",
        "paused_at",
        "paused_reason",
    }
    cols = list(values)
    if not cols or not set(cols) <= allowed:
        raise ValueError(f"unknown preferences: {sorted(set(cols) - allowed)}")
    marks = ", ".join(f"${i + 2}" for i in range(len(cols)))
    sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in cols)
    await db.execute(
        f"INSERT INTO chat_proactive (chat_id, {', '.join(cols)}) VALUES ($1, {marks}) "
        f"ON CONFLICT (chat_id) DO UPDATE SET {sets}, updated_at = now()",
        chat_id,
        *values.values(),
    )


async def pause_chat(db: Queries, chat_id: int, reason: str, *, at: datetime | None = None) -> None:
    """The chat blocked the bot: its jobs wait (the gates skip them) until the person writes
    again (a message after ``paused_at`` lifts it, :func:`gate_states`)."""
    await db.execute(
        "INSERT INTO chat_proactive (chat_id, paused_at, paused_reason) "
        "VALUES ($1, COALESCE($3, now()), $2) ON CONFLICT (chat_id) DO UPDATE SET "
        "paused_at = EXCLUDED.paused_at, paused_reason = $2, updated_at = now()",
        chat_id,
        reason,
        at,
    )


_GATES = """
/* all chats: the gates of the due jobs' chats, read together */
SELECT c.chat_id, p.active, p.quiet_start, p.quiet_end, p.quiet_off, p.max_per_day,
       p.cooldown_s, p.paused_at,
       (SELECT count(*) FROM proactive_runs r WHERE r.chat_id = c.chat_id
          AND r.outcome = 'sent' AND r.name NOT LIKE 'reminder-%' AND r.at >= c.day_start)
         AS sends_today,
       (SELECT max(r.at) FROM proactive_runs r WHERE r.chat_id = c.chat_id
          AND r.outcome = 'sent' AND r.name NOT LIKE 'reminder-%') AS last_send,
       (SELECT m.created_at FROM chat_messages m WHERE m.chat_id = c.chat_id
          AND m.compacted_at IS NULL AND m.role = 'user'
          ORDER BY m.created_at DESC LIMIT 1) AS last_person_message
FROM unnest($1::bigint[], $2::timestamptz[]) AS c(chat_id, day_start)
LEFT JOIN chat_proactive p ON p.chat_id = c.chat_id
"""


async def gate_states(
    db: Queries, day_starts: Mapping[int, datetime], zones: Mapping[int, str]
) -> dict[int, GateState]:
    """The :class:`GateState` of each chat (``day_starts``: chat -> the start of its local day;
    ``zones``: chat -> its time zone), in one query."""
    chats = list(day_starts)
    rows = await db.fetch(_GATES, chats, [day_starts[c] for c in chats])
    out: dict[int, GateState] = {}
    for r in rows:
        quiet: QuietHours | Literal["default"] = "default"
        if r["active"] is not None:
            quiet = _quiet(r)
        out[r["chat_id"]] = GateState(
            zones[r["chat_id"]],
            active=bool(r["active"]),
            quiet=quiet,
            max_per_day=r["max_per_day"],
            cooldown_s=r["cooldown_s"],
            # a message from the person after the 403 un-pauses the chat
            paused=r["paused_at"] is not None
            and (r["last_person_message"] is None or r["last_person_message"] < r["paused_at"]),
            sends_today=r["sends_today"],
            last_send=r["last_send"],
            last_person_message=r["last_person_message"],
        )
    return out
