"""The chat settings section: the per-chat limits on model turns (see
:mod:`actors.chat.limits`)."""

from __future__ import annotations

from typing import ClassVar

import attrs

from runtime.parsers import cost_limit, int_range
from runtime.settings import Field, SettingsSection


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
