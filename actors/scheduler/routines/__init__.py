"""The routines (issue 22 deliverable 6): one module each, every one a deterministic rule on the
database alone — no model, no embedder, one or two indexed queries, the chat's rows only — that
decides before anything is spent (:class:`~actors.scheduler.routine.Routine`).

``all_routines(settings)``: every routine, its thresholds from ``settings`` (any object with the
:class:`~actors.scheduler.routine_settings.RoutineSettings` attributes)."""

from __future__ import annotations

from typing import Protocol

from actors.scheduler.routine import Routine
from actors.scheduler.routines.event_reminders import EventReminders
from actors.scheduler.routines.nightly_reflection import NightlyReflection
from actors.scheduler.routines.on_this_day import OnThisDay
from actors.scheduler.routines.weekly_recap import WeeklyRecap
from actors.scheduler.routines.weight_trend import WeightTrendRoutine


class Thresholds(Protocol):
    """What the routines read of the settings."""

    @property
    def weight_trend_threshold_kg(self) -> float: ...

    @property
    def weight_trend_min_readings(self) -> int: ...


def all_routines(settings: Thresholds) -> list[Routine]:
    """Every routine, in the order ``/routines`` lists them."""
    return [
        NightlyReflection(),
        WeeklyRecap(),
        WeightTrendRoutine(
            threshold_kg=settings.weight_trend_threshold_kg,
            min_readings=settings.weight_trend_min_readings,
        ),
        OnThisDay(),
        EventReminders(),
    ]


__all__ = ["Thresholds", "all_routines"]
