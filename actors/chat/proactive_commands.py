"""The chat's controls of the proactive lane, answered without the model:

=========================  =================================================================
``/active on|off``         on: the default routines, on their default schedules in the chat's
                           time zone; off: they stop (reminders stay)
``/quiet 22-8|off``        the chat's quiet hours (local), or none
``/digest daily|weekly|off``  the weekly recap's schedule
``/routines``              what is scheduled and when it next runs, a button to switch each off
``/remind <when> <what>``  a one-shot reminder ("tomorrow 9:00", "in 2 hours", "Sunday")
=========================  =================================================================

:meth:`Controls.remind` is also the model's ``schedule_reminder`` tool
(:class:`ChatReminders`, the tool context's ``reminders``): one home for a reminder.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import attrs

from actors.agent.turn import TurnReply
from actors.chat.callbacks import CallbackContext, CallbackTable, keyboard
from actors.chat.command_base import Command, CommandCall
from actors.queues import outbox
from actors.scheduler import jobs
from actors.scheduler.jobs import Digest, Job
from actors.scheduler.routine import Routine
from actors.scheduler.schedule import parse_when
from actors.scheduler.settings import quiet_hours
from memory.errors import ToolError
from runtime.db import Queries

WEEKLY_RECAP = "weekly-recap"
ACTIVE_USAGE = "Usage: /active on or /active off"
QUIET_USAGE = "Usage: /quiet 22-8 (no check-ins from 22:00 to 08:00) or /quiet off"
DIGEST_USAGE = "Usage: /digest daily, /digest weekly or /digest off"
REMIND_USAGE = (
    "Usage: /remind <when> <what>, e.g. /remind tomorrow 9:00 call mum "
    "(when: a time in the future, like “in 2 hours” or “Sunday”)"
)
OFFER = (
    "I can also check in now and then: never at night, at most twice a day, never while we "
    "talk. It stays off until you turn it on (/active off stops it again)."
)
OFFER_BUTTON = "Turn on check-ins"
#: the words of a "when" tried before the "what" (longest first)
MAX_WHEN_WORDS = 6


def local_text(when: datetime, timezone: str) -> str:
    """``Sun 29 Mar 2026, 09:00`` in ``timezone``."""
    return when.astimezone(ZoneInfo(timezone)).strftime("%a %d %b %Y, %H:%M")


def daily(expr: str) -> str:
    """A weekly cron expression's time, every day."""
    fields = expr.split()
    return " ".join([*fields[:4], "*"])


def split_when(text: str, timezone: str, now: datetime) -> tuple[datetime, str] | None:
    """``"tomorrow 9:00 to call mum"`` -> (tomorrow 09:00 local, "call mum"): the longest
    leading words that are a future date, and the rest (not empty)."""
    words = text.split()
    for n in range(min(len(words) - 1, MAX_WHEN_WORDS), 0, -1):
        when = parse_when(" ".join(words[:n]), timezone, now)
        if when is not None:
            what = " ".join(words[n:])
            what = what[3:] if what.lower().startswith("to ") else what
            return (when, what.strip()) if what.strip() else None
    return None


@attrs.frozen
class Controls:
    """The controls of one bot: its database, the chats' zone, the routines there are."""

    db: Queries
    timezone: str
    routines: Sequence[Routine] = ()
    grace_s: int = 3600
    #: wakes the scheduler (a new job): :meth:`actors.scheduler.scheduler.Scheduler.poke`
    poke: Callable[[], None] = lambda: None

    def _schedule(self, routine: Routine, digest: Digest) -> str | None:
        if routine.name != WEEKLY_RECAP or digest == "weekly":
            return routine.default_schedule
        return None if digest == "off" else daily(routine.default_schedule)

    async def activate(self, chat_id: int, now: datetime) -> str:
        await jobs.set_prefs(self.db, chat_id, active=True, paused_at=None, paused_reason=None)
        digest = (await jobs.prefs(self.db, chat_id)).digest
        made: list[Job] = []
        for r in self.routines:
            schedule = self._schedule(r, digest)
            if schedule is not None:
                made.append(
                    await jobs.upsert_routine(
                        self.db,
                        chat_id,
                        r.name,
                        schedule,
                        self.timezone,
                        now,
                        grace_s=self.grace_s,
                    )
                )
        self.poke()
        titles = {r.name: r.title for r in self.routines}
        lines = [f"• {titles[j.name]} — next {self._next(j)}" for j in made]
        return "\n".join(
            [
                "Check-ins are on. Never in your quiet hours, at most a few a day, and never "
                "while we are talking.",
                *lines,
                "/routines to see or switch them off, /quiet to set quiet hours, "
                "/active off to stop.",
            ]
        )

    def _next(self, job: Job) -> str:
        return "—" if job.next_run_at is None else local_text(job.next_run_at, job.timezone)

    async def active(self, call: CommandCall) -> TurnReply:
        arg = call.args.lower()
        if arg == "on":
            return TurnReply(await self.activate(call.chat_id, call.now))
        if arg == "off":
            await jobs.set_prefs(self.db, call.chat_id, active=False)
            await jobs.disable_routines(self.db, call.chat_id)
            return TurnReply("Check-ins are off. Reminders you asked for still come.")
        state = "on" if (await jobs.prefs(self.db, call.chat_id)).active else "off"
        return TurnReply(f"Check-ins are {state}. {ACTIVE_USAGE}")

    async def quiet(self, call: CommandCall) -> TurnReply:
        try:
            hours = quiet_hours(call.args) if call.args else (-1, -1)
        except ValueError:
            hours = (-1, -1)
        if hours == (-1, -1):
            return TurnReply(QUIET_USAGE)
        if hours is None:
            await jobs.set_prefs(
                self.db, call.chat_id, quiet_off=True, quiet_start=None, quiet_end=None
            )
            return TurnReply("No quiet hours: check-ins may come at any hour.")
        start, end = hours
        await jobs.set_prefs(
            self.db, call.chat_id, quiet_off=False, quiet_start=start, quiet_end=end
        )
        return TurnReply(f"Quiet hours: no check-ins from {start:02d}:00 to {end:02d}:00.")

    async def digest(self, call: CommandCall) -> TurnReply:
        arg = call.args.lower()
        if arg not in ("daily", "weekly", "off"):
            return TurnReply(DIGEST_USAGE)
        await jobs.set_prefs(self.db, call.chat_id, digest=arg)
        recap = next((r for r in self.routines if r.name == WEEKLY_RECAP), None)
        p = await jobs.prefs(self.db, call.chat_id)
        if recap is not None and p.active:
            schedule = self._schedule(recap, p.digest)
            if schedule is None:
                await jobs.disable_routines(self.db, call.chat_id, [WEEKLY_RECAP])
            else:
                await jobs.upsert_routine(
                    self.db,
                    call.chat_id,
                    WEEKLY_RECAP,
                    schedule,
                    self.timezone,
                    call.now,
                    grace_s=self.grace_s,
                )
        return TurnReply(
            {
                "daily": "The recap comes every day.",
                "weekly": "The recap comes once a week.",
                "off": "No recap.",
            }[arg]
        )

    async def routines_text(self, db: Queries, chat_id: int) -> tuple[str, list[Job]]:
        listed = await jobs.list_jobs(db, chat_id)
        if not listed:
            return (
                "Nothing is scheduled. /active on turns check-ins on; /remind sets a reminder.",
                [],
            )
        titles = {r.name: r.title for r in self.routines}
        lines = ["Scheduled:"]
        for j in listed:
            title = titles.get(j.name) or (
                f"Reminder: {j.payload.get('text', '')}" if j.kind == "reminder" else j.name
            )
            lines.append(f"• {j.name} — {title} — next {self._next(j)}")
        return "\n".join(lines), listed

    async def list_routines(self, call: CommandCall) -> TurnReply:
        text, listed = await self.routines_text(self.db, call.chat_id)
        if not listed:
            return TurnReply(text)
        kb = await keyboard(
            self.db,
            call.chat_id,
            [
                [(f"Switch off {j.name}"[:60], {"name": "routine_off", "job_id": j.id})]
                for j in listed
            ],
        )
        return TurnReply(text, keyboard=kb)

    async def remind_at(self, chat_id: int, text: str, now: datetime) -> Job | str:
        """The reminder ``text`` ("<when> <what>") asks for, created; or why not (usage)."""
        parsed = split_when(text, self.timezone, now)
        if parsed is None:
            return REMIND_USAGE
        return await self.create_reminder(chat_id, *parsed)

    async def create_reminder(self, chat_id: int, when: datetime, what: str) -> Job:
        job = await jobs.create_reminder(
            self.db, chat_id, when, what, self.timezone, grace_s=self.grace_s
        )
        self.poke()
        return job

    async def remind(self, call: CommandCall) -> TurnReply:
        job = await self.remind_at(call.chat_id, call.args, call.now)
        if isinstance(job, str):
            return TurnReply(job)
        assert job.run_at is not None
        return TurnReply(
            f"I'll remind you on {local_text(job.run_at, self.timezone)}: {job.payload['text']}"
        )

    # --- buttons --------------------------------------------------------------------------

    async def pair_offer(self, db: Queries, chat_id: int) -> None:
        """The message after "Paired" (in the pairing's transaction): check-ins offered, with
        a [Turn on check-ins] button (``/active on``)."""
        kb = await keyboard(db, chat_id, [[(OFFER_BUTTON, {"name": "active_on"})]])
        await outbox.enqueue_reply(db, chat_id, OFFER, reply_markup=kb.to_json())

    async def tap_routine_off(self, ctx: CallbackContext) -> None:
        name = await jobs.set_enabled(ctx.db, ctx.chat_id, int(ctx.action["job_id"]), False)
        text, listed = await self.routines_text(ctx.db, ctx.chat_id)  # the tap's transaction
        kb = (
            await ctx.new_keyboard(
                [
                    [(f"Switch off {j.name}"[:60], {"name": "routine_off", "job_id": j.id})]
                    for j in listed
                ]
            )
            if listed
            else None
        )
        note = f"Switched off: {name}.\n" if name else ""
        await ctx.edit(note + text, keyboard=kb)

    async def tap_active_on(self, ctx: CallbackContext) -> None:
        text = await attrs.evolve(self, db=ctx.db).activate(ctx.chat_id, datetime.now(UTC))
        await ctx.edit(text)

    def register_taps(self, taps: CallbackTable) -> None:
        taps.register("routine_off", self.tap_routine_off, answer="Switching it off…")
        taps.register("active_on", self.tap_active_on, answer="Turning check-ins on…")

    def commands(self) -> list[Command]:
        return [
            Command("active", "check-ins from me: /active on or /active off", self.active),
            Command("quiet", "quiet hours for check-ins: /quiet 22-8 or /quiet off", self.quiet),
            Command("digest", "the recap: /digest daily, weekly or off", self.digest),
            Command("routines", "what is scheduled, and a switch for each", self.list_routines),
            Command("remind", "a reminder: /remind tomorrow 9:00 call mum", self.remind),
        ]


@attrs.frozen
class ChatReminders:
    """The model's ``schedule_reminder`` in one chat (the tool context's ``reminders``)."""

    controls: Controls
    chat_id: int

    async def schedule(self, when: str, what: str, now: datetime) -> dict[str, str]:
        at = parse_when(when, self.controls.timezone, now)
        if at is None:
            raise ToolError(f"cannot read {when!r} as a time in the future", "when")
        if not what.strip():
            raise ToolError("say what to remind of", "what")
        job = await self.controls.create_reminder(self.chat_id, at, what.strip())
        assert job.run_at is not None
        local = local_text(job.run_at, self.controls.timezone)
        return {
            "name": job.name,
            "at_local": local,
            "what": what,
            "say": f"Tell the person the reminder is set for {local}.",
        }
