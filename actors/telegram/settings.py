"""The Telegram settings section: the bot's token, webhook secret, allowed chats, API server,
and how long replies wait out failures."""

from __future__ import annotations

import re
from typing import ClassVar

import attrs

from runtime.parsers import (
    Secret,
    chat_ids,
    choice,
    float_range,
    http_url,
    int_range,
    secret_token,
    web_url_problem,
)
from runtime.settings import Field, SettingsSection

#: A bot token as @BotFather issues it: the bot's id, a colon, its secret (35 characters today).
BOT_TOKEN_RE = re.compile(r"[0-9]{1,20}:[A-Za-z0-9_-]{35,200}")
BOT_TOKEN_FORM = (
    "must be the token @BotFather gave you: digits, a colon, then 35 or more of A-Z a-z 0-9 _ -"
)


def bot_token(raw: str) -> Secret:
    """Empty (``serve`` then asks for it), or a token of @BotFather's form; the error never
    quotes the value."""
    value = raw.strip()
    if value and not BOT_TOKEN_RE.fullmatch(value):
        hint = " (that is the README's placeholder)" if value.endswith("...") else ""
        raise ValueError(BOT_TOKEN_FORM + hint)
    return Secret(value)


def webhook_url(raw: str) -> str:
    """Empty, or the public ``https://`` URL Telegram is to POST updates to."""
    value = raw.strip()
    if not value:
        return value
    problem = web_url_problem(value, ("https",))
    if problem is not None:
        raise ValueError(f"{problem} (Telegram delivers webhooks over HTTPS only)")
    return value


@attrs.frozen(kw_only=True, slots=False)
class TelegramSettings(SettingsSection):
    """How the bot reaches Telegram, whom it talks to, and how long replies wait out outages."""

    fields: ClassVar[tuple[Field, ...]] = (
        Field(
            "TELEGRAM_BOT_TOKEN",
            "telegram_bot_token",
            "",
            bot_token,
            "Bot token from BotFather (required by serve).",
            secret=True,
        ),
        Field(
            "TELEGRAM_SECRET_TOKEN",
            "telegram_secret_token",
            "",
            secret_token,
            "Webhook secret header value (required in webhook mode).",
            secret=True,
        ),
        Field(
            "TELEGRAM_WEBHOOK_URL",
            "telegram_webhook_url",
            "",
            webhook_url,
            "Public https URL of /api/telegram: set, engram serve uses the webhook and "
            "registers it at start; empty: long polling.",
        ),
        Field(
            "TELEGRAM_ALLOWED_CHAT_IDS",
            "telegram_allowed_chat_ids",
            "",
            chat_ids,
            "Comma-separated chat ids allowed to talk to the bot, besides those stored by "
            "pairing or `engram chats allow` (none at all: serve prints a pairing code).",
            aliases=("TELEGRAM_ALLOWED_CHAT_ID",),
        ),
        Field(
            "TELEGRAM_API_BASE_URL",
            "telegram_api_base_url",
            "https://api.telegram.org",
            http_url,
            "Bot API server (a local Bot API server or a test server).",
        ),
        Field(
            "PHOTO_MAX_BYTES",
            "photo_max_bytes",
            "10485760",
            int_range(1024, 20 * 1024 * 1024),
            "Largest photo downloaded for the model (bytes; the largest size of a photo under "
            "it is taken; Telegram lets bots download at most 20 MB).",
        ),
        Field(
            "KEEP_PHOTOS",
            "keep_photos",
            "off",
            choice("off", "on"),
            "on: keep the bytes of the photos a person sends (table chat_photos); off: only "
            "the stored message saying a photo was sent, its caption and a short description.",
        ),
        Field(
            "SEND_RETRY_CAP",
            "send_retry_cap",
            "300",
            float_range(1, 86_400),
            "Longest wait (seconds) between retries of a reply Telegram did not take (5xx, "
            "unreachable), and between tries of a message while the model is down.",
        ),
        Field(
            "SEND_RATE",
            "send_rate",
            "30",
            int_range(1, 100_000),
            "Messages a second the bot sends at most (Telegram's limit for a bot is about 30), "
            "shared by all its processes: each takes an equal part.",
        ),
        Field(
            "SEND_DEADLINE",
            "send_deadline",
            "86400",
            float_range(60, 30 * 86_400),
            "Seconds after it was written that a reply (or after it arrived, that a message "
            "waiting for the model) is retried through outages before it is given up.",
        ),
    )

    telegram_bot_token: Secret
    telegram_secret_token: Secret
    telegram_webhook_url: str = ""
    telegram_allowed_chat_ids: frozenset[int]
    telegram_api_base_url: str
    photo_max_bytes: int = 10 * 1024 * 1024
    keep_photos: str = "off"
    send_retry_cap: float
    send_rate: int = 30
    send_deadline: float
