"""What the bot tells Telegram when it starts (:meth:`actors.system.BotSystem.run`): getMe for
its username, the command menu (setMyCommands) and, in webhook mode, setWebhook. A rejected
token stops the start; Telegram being unreachable is a warning (the webhook may be set already).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import trio

from actors.telegram.client import BotApiClient
from actors.telegram.errors import BadRequest, TelegramError, TokenRejected, Unauthorized
from actors.telegram.keyboards import BotCommand
from actors.telegram.settings import TelegramSettings
from actors.telegram.types import ALLOWED_UPDATES
from runtime.errors import SettingsError
from runtime.logs import get_logger

log = get_logger(__name__)


class CommandMenu(Protocol):
    """The chat commands' menu (:class:`actors.chat.command_base.CommandTable`)."""

    def menu(self) -> Sequence[BotCommand]: ...


async def introduce(
    bot: BotApiClient, settings: TelegramSettings, commands: CommandMenu, *, polling: bool
) -> str | None:
    """getMe, the command menu and (webhook mode) setWebhook; the bot's username."""
    username = await _check_bot(bot)
    await _register_commands(bot, commands)
    if not polling and settings.telegram_webhook_url:
        await _register_webhook(
            bot, settings.telegram_webhook_url, settings.telegram_secret_token.reveal()
        )
    return username


async def _check_bot(bot: BotApiClient) -> str | None:
    """getMe at start-up, for the bot's username: a rejected token stops the start
    (:class:`TokenRejected`, exit 2); another failure is a warning (webhook mode must not
    depend on Telegram)."""
    with trio.move_on_after(10):
        try:
            me = await bot.get_me()
        except Unauthorized:
            raise TokenRejected() from None
        except TelegramError as exc:
            log.warning("system.get_me_failed", error=str(exc))
            return None
        log.info("system.bot", username=me.username, bot_id=me.id)
        return me.username
    log.warning("system.get_me_timeout")
    return None


async def _register_webhook(bot: BotApiClient, url: str, secret: str) -> None:
    """setWebhook at start (TELEGRAM_WEBHOOK_URL): a URL Telegram refuses stops the start
    (exit 2); Telegram unreachable is a warning (the webhook may be registered already)."""
    with trio.move_on_after(10):
        try:
            await bot.set_webhook(url, secret, ALLOWED_UPDATES)
        except Unauthorized:
            raise TokenRejected() from None
        except BadRequest as exc:
            refused = f"Telegram refused it: {exc.description}"
            raise SettingsError("TELEGRAM_WEBHOOK_URL", refused) from None
        except TelegramError as exc:
            log.warning("system.set_webhook_failed", error=str(exc))
            return
        log.info("system.webhook_set", url=url, allowed_updates=list(ALLOWED_UPDATES))
        return
    log.warning("system.set_webhook_timeout")


async def _register_commands(bot: BotApiClient, commands: CommandMenu) -> None:
    """setMyCommands at start: the command table as Telegram's menu. A failure is a warning
    (the commands work without the menu)."""
    with trio.move_on_after(10):
        try:
            await bot.set_my_commands(commands.menu())
        except TelegramError as exc:
            log.warning("system.set_my_commands_failed", error=str(exc))
            return
        log.info("system.commands_registered", commands=[c.command for c in commands.menu()])
        return
    log.warning("system.set_my_commands_timeout")
