"""The safety gates of a proactive send, pure: each looks at a chat's :class:`GateState` (read in
one query, :func:`actors.scheduler.jobs.gate_states`) and says :class:`Open`, :class:`Defer`
(until when) or :class:`Skip`, with a reason for the log and ``proactive_runs``.

In order: paused (the chat blocked the bot), proactive off, quiet hours, the daily cap, the
cooldown after a send, the active-conversation guard. A reminder the person asked for obeys only
``paused``: they chose the time. :func:`plan` is the scheduler's whole decision for one due job,
with the missed-run grace.
"""

from __future__ import annotations

from datetime import datetime, time, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

import attrs

from actors.scheduler.settings import ProactiveSettings, QuietHours


@attrs.frozen
class Limits:
    """The settings' defaults of the gates (a chat's preferences override some)."""

    quiet_hours: QuietHours = (22, 8)
    max_per_day: int = 2
    cooldown_s: int = 14400
    active_guard_s: int = 600

    @classmethod
    def from_settings(cls, s: ProactiveSettings) -> Limits:
        return cls(
            s.proactive_quiet_hours,
            s.proactive_max_per_day,
            s.proactive_cooldown,
            s.proactive_active_guard,
        )


@attrs.frozen
class GateState:
    """What the gates look at for one chat (no row in ``chat_proactive``: the defaults)."""

    timezone: str
    active: bool = False
    quiet: QuietHours | Literal["default"] = "default"  # None: /quiet off
    max_per_day: int | None = None
    cooldown_s: int | None = None
    paused: bool = False
    sends_today: int = 0
    last_send: datetime | None = None
    last_person_message: datetime | None = None


@attrs.frozen
class Open:
    reason: str = "open"


@attrs.frozen
class Defer:
    until: datetime
    reason: str


@attrs.frozen
class Skip:
    reason: str


Gate = Open | Defer | Skip


def in_quiet(hours: QuietHours, local: datetime) -> bool:
    """Whether the local time ``local`` is inside the quiet hours [start, end)."""
    if hours is None:
        return False
    start, end = hours
    h = local.hour
    return (h >= start or h < end) if start > end else start <= h < end


def quiet_end(hours: tuple[int, int], local: datetime) -> datetime:
    """The next end of the quiet hours after ``local`` (aware, in its zone)."""
    tz = local.tzinfo
    end = datetime.combine(local.date(), time(hours[1]), tzinfo=tz)
    if end <= local:
        end = datetime.combine(local.date() + timedelta(days=1), time(hours[1]), tzinfo=tz)
    return end


def check(kind: str, state: GateState, now: datetime, limits: Limits) -> Gate:
    """The gates for a job of ``kind`` ("routine" or "reminder") at ``now`` (aware)."""
    if state.paused:
        return Skip("paused: the chat blocked the bot")
    if kind == "reminder":
        return Open()
    if not state.active:
        return Skip("proactive off")
    hours = limits.quiet_hours if state.quiet == "default" else state.quiet
    local = now.astimezone(ZoneInfo(state.timezone))
    if hours is not None and in_quiet(hours, local):
        return Defer(quiet_end(hours, local), f"quiet hours {hours[0]:02d}-{hours[1]:02d}")
    cap = limits.max_per_day if state.max_per_day is None else state.max_per_day
    if state.sends_today >= cap:
        return Skip(f"daily cap: {state.sends_today} sent today (max {cap})")
    cooldown = limits.cooldown_s if state.cooldown_s is None else state.cooldown_s
    if state.last_send is not None and now < state.last_send + timedelta(seconds=cooldown):
        return Defer(state.last_send + timedelta(seconds=cooldown), "cooldown after a send")
    guard = timedelta(seconds=limits.active_guard_s)
    if state.last_person_message is not None and now < state.last_person_message + guard:
        return Defer(state.last_person_message + guard, "active conversation")
    return Open()


def plan(
    kind: str, due_at: datetime, grace_s: int, state: GateState, now: datetime, limits: Limits
) -> Gate:
    """The scheduler's decision for one due job: missed by more than its grace -> skip; else
    the gates, a deferral past the grace becoming a skip."""
    late = (now - due_at).total_seconds()
    if late > grace_s:
        return Skip(f"missed: {int(late)} s late")
    gate = check(kind, state, now, limits)
    if isinstance(gate, Defer) and gate.until > due_at + timedelta(seconds=grace_s):
        return Skip(f"{gate.reason} past the grace")
    return gate
