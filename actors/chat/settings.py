"""The chat settings section: the per-chat limits on model turns (see
:mod:`actors.chat.limits`) and how replies stream (:mod:`actors.chat.drafts`)."""

from __future__ import annotations

from typing import ClassVar, Literal

import attrs

from runtime.parsers import choice, cost_limit, float_range, int_range
from runtime.settings import Field, SettingsSection

#: STREAM_REPLIES
StreamMode = Literal["auto", "edit", "off"]


@attrs.frozen(kw_only=True, slots=False)
class ChatSettings(SettingsSection):
    """The per-chat limits on model turns; streamed replies."""

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
        Field(
            "STREAM_REPLIES",
            "stream_replies",
            "auto",
            choice("auto", "edit", "off"),
            "auto: a reply is shown as a draft while it is written (private chats; elsewhere, "
            "or if Telegram refuses drafts, a message edited as it grows); edit: always the "
            "edited message; off: the reply only when it is done.",
        ),
        Field(
            "DRAFT_INTERVAL",
            "draft_interval",
            "0.8",
            float_range(0.1, 60),
            "Seconds between two updates of a streamed draft at most (edits: at least 1 s).",
        ),
    )

    chat_turns_per_minute: int
    chat_daily_cost_usd: float | None
    stream_replies: StreamMode = "auto"
    draft_interval: float = 0.8
