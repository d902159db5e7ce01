"""The ``engram`` command: the runtime's core commands plus the bot's.

``engram serve [--polling | --webhook]`` opens the bot (:func:`actors.wiring.open_bot`, the
composition root) and serves it until shutdown: long polling unless a webhook is configured
(``TELEGRAM_WEBHOOK_URL`` or ``--webhook``). Every missing setting is reported before anything
starts (:func:`check_serve_settings`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from actors.cli import api_token as api_token_command
from actors.cli import chat as chat_command
from actors.cli import chats as chats_commands
from actors.cli import config as config_command
from actors.cli import dashboard as dashboard_command
from actors.cli import doctor as doctor_command
from actors.cli import erase as erase_commands
from actors.cli import journal as journal_commands
from actors.cli import patterns as patterns_cli
from actors.cli import systemd as systemd_command
from actors.cli import telegram as telegram_commands
from actors.cli import vault as vault_commands
from runtime.cli import base_parser, run_cli
from runtime.errors import SettingsError, settings_error

if TYPE_CHECKING:  # the serve path's modules are imported by cmd_serve: --help stays fast
    from actors.settings import Settings


def serve_mode(settings: Settings, args: argparse.Namespace) -> str:
    """``polling`` unless a webhook is configured (``--webhook`` or TELEGRAM_WEBHOOK_URL);
    ``--polling`` wins over the setting."""
    if getattr(args, "polling", False):
        return "polling"
    if getattr(args, "webhook", False) or settings.telegram_webhook_url:
        return "webhook"
    return "polling"


def check_serve_settings(settings: Settings, args: argparse.Namespace) -> None:
    """Everything ``serve`` needs before it starts (``args.check``): every missing setting at
    once, as :class:`~runtime.errors.SettingsErrors`."""
    from memory.llm.factory import llm_settings_problems

    problems = []
    if not settings.telegram_bot_token:
        problems.append(
            SettingsError(
                "TELEGRAM_BOT_TOKEN", "is required (talk to @BotFather in Telegram: /newbot)"
            )
        )
    problems += llm_settings_problems(settings)
    if serve_mode(settings, args) == "webhook" and not settings.telegram_secret_token:
        problems.append(
            SettingsError(
                "TELEGRAM_SECRET_TOKEN",
                "is required in webhook mode: 1-256 characters of A-Za-z0-9_- (e.g. the output of "
                "`openssl rand -hex 32`); or leave TELEGRAM_WEBHOOK_URL empty for long polling",
            )
        )
    error = settings_error(problems)
    if error is not None:
        raise error


def print_pairing(text: str) -> None:
    """The pairing instructions, on stdout (``engram serve``'s own output)."""
    print(f"\n{text}\n", flush=True)


async def cmd_serve(settings: Settings, args: argparse.Namespace) -> int:
    """Run the bot (:func:`actors.wiring.open_bot`) until SIGINT/SIGTERM."""
    from actors.wiring import open_bot
    from runtime.cli import open_settings_database

    check_serve_settings(settings, args)
    polling = serve_mode(settings, args) == "polling"
    async with (
        open_settings_database(settings) as database,
        open_bot(settings, database, polling=polling, announce=print_pairing) as bot,
    ):
        return await bot.serve()


def build_parser() -> argparse.ArgumentParser:
    parser, sub = base_parser()
    p = sub.add_parser("serve", help="run the bot (HTTP server, actors)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--polling",
        action="store_true",
        help="get updates by long polling (the default unless TELEGRAM_WEBHOOK_URL is set)",
    )
    mode.add_argument(
        "--webhook",
        action="store_true",
        help="get updates on POST /api/telegram (the default when TELEGRAM_WEBHOOK_URL is set)",
    )
    p.set_defaults(handler=cmd_serve, check=check_serve_settings, quiet_logs=False)
    chat_command.register(sub)
    telegram_commands.register(sub)
    chats_commands.register(sub)
    config_command.register(sub)
    systemd_command.register(sub)
    journal_commands.register(sub)
    erase_commands.add_erase(patterns_cli.register(sub))  # engram memory erase
    doctor_command.register(sub)
    vault_commands.register(sub)
    dashboard_command.register(sub)
    api_token_command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    def load() -> Settings:
        from actors.settings import load_settings

        return load_settings()

    return run_cli(build_parser(), argv, load=load)


if __name__ == "__main__":
    sys.exit(main())
