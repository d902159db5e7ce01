"""The Telegram settings section: the bot's token, webhook secret, allowed chats, API server."""

from __future__ import annotations

from typing import ClassVar

import attrs

from runtime.settings import (
    Field,
    Secret,
    SettingsSection,
    chat_ids,
    http_url,
    secret,
    secret_token,
)


@attrs.frozen(kw_only=True, slots=False)
class TelegramSettings(SettingsSection):
    """How the bot reaches Telegram and whom it talks to."""

    fields: ClassVar[tuple[Field, ...]] = (
        Field("TELEGRAM_BOT_TOKEN", "telegram_bot_token", "", secret,
              "Bot token from BotFather (required by serve).", secret=True),
        Field("TELEGRAM_SECRET_TOKEN", "telegram_secret_token", "", secret_token,
              "Webhook secret header value (required in webhook mode).", secret=True),
        Field("TELEGRAM_ALLOWED_CHAT_IDS", "telegram_allowed_chat_ids", "", chat_ids,
              "Comma-separated chat ids allowed to talk to the bot (empty: nobody).",
              aliases=("TELEGRAM_ALLOWED_CHAT_ID",)),
        Field("TELEGRAM_API_BASE_URL", "telegram_api_base_url", "https://api.telegram.org",
              http_url, "Bot API server (a local Bot API server or a test server)."),
    )

    telegram_bot_token: Secret
    telegram_secret_token: Secret
    telegram_allowed_chat_ids: frozenset[int]
    telegram_api_base_url: str
