"""The routines' settings section: the thresholds their rules read (``all_routines`` takes any
object with these attributes, so the scheduler's section may carry them instead)."""

from __future__ import annotations

from typing import ClassVar

import attrs

from runtime.parsers import float_range, int_range
from runtime.settings import Field, SettingsSection


@attrs.frozen(kw_only=True, slots=False)
class RoutineSettings(SettingsSection):
    """What the routines' rules read: the weight-trend threshold and its minimum readings."""

    fields: ClassVar[tuple[Field, ...]] = (
        Field(
            "WEIGHT_TREND_THRESHOLD_KG",
            "weight_trend_threshold_kg",
            "1.0",
            float_range(0.1, 100),
            "Change in kg over the last 14 days (least-squares trend) from which the "
            "weight-trend routine speaks.",
        ),
        Field(
            "WEIGHT_TREND_MIN_READINGS",
            "weight_trend_min_readings",
            "4",
            int_range(2, 14),
            "Fewest weight readings in the last 14 days for the weight-trend routine to "
            "judge a trend.",
        ),
    )

    weight_trend_threshold_kg: float
    weight_trend_min_readings: int
