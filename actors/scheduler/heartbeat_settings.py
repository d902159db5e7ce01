"""The heartbeat settings section (:mod:`actors.scheduler.heartbeat`): how often the bot checks
itself, the day's cost that raises an alert, and which chat hears the alerts."""

from __future__ import annotations

from typing import ClassVar

import attrs

from runtime.parsers import cost_limit, float_range, optional_chat_id
from runtime.settings import Field, SettingsSection


@attrs.frozen(kw_only=True, slots=False)
class HeartbeatSettings(SettingsSection):
    """The self-check's period, the daily cost alert and the alerts' chat."""

    fields: ClassVar[tuple[Field, ...]] = (
        Field(
            "HEARTBEAT_INTERVAL",
            "heartbeat_interval",
            "60",
            float_range(1.0, 86_400.0),
            "Seconds between two self-checks of the running bot (database, queues, outside "
            "services, cost; no model call).",
        ),
        Field(
            "DAILY_COST_ALERT_USD",
            "daily_cost_alert_usd",
            "",
            cost_limit,
            "The whole bot's model cost today (in TIMEZONE) that raises an alert (a warning "
            "from 80%); empty: no cost alert.",
        ),
        Field(
            "ALERT_CHAT_ID",
            "alert_chat_id",
            "",
            optional_chat_id,
            "The chat that hears health alerts; empty: the first paired chat, else the first "
            "of TELEGRAM_ALLOWED_CHAT_IDS.",
        ),
    )

    heartbeat_interval: float
    daily_cost_alert_usd: float | None
    alert_chat_id: int | None
