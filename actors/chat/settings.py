"""The chat settings section: the per-chat limits on model turns (see
:mod:`actors.chat.limits`)."""

from __future__ import annotations

from typing import ClassVar

import attrs

from runtime.parsers import int_range
from runtime.settings import Field, SettingsSection


def cost_limit(raw: str) -> float | None:
    """US dollars a chat's model calls may cost per day, or empty for no limit."""
    value = raw.strip()
    if not value:
        return None
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"expected an amount in US dollars (or empty), got {value!r}") from None
    if not 0.0 < number <= 1_000_000.0:
        raise ValueError(f"must be above 0 and at most 1000000 (or empty), got {value!r}")
    return number


@attrs.frozen(kw_only=True, slots=False)
class ChatSettings(SettingsSection):
    """The per-chat limits on model turns."""

    fields: ClassVar[tuple[Field, ...]] = (
        Field(
            "CHAT_TURNS_PER_MINUTE",
            "chat_turns_per_minute",
            "6",
            int_range(0, 10_000),
            "Model turns a chat may start per minute (messages sent meanwhile are answered "
            "together in its next turn; 0: no limit).",
        ),
        Field(
            "CHAT_DAILY_COST_USD",
            "chat_daily_cost_usd",
            "",
            cost_limit,
            "Most a chat's model calls may cost per day (in TIMEZONE) before its messages "
            "wait for the next day; empty: no limit.",
        ),
    )

    chat_turns_per_minute: int
    chat_daily_cost_usd: float | None
