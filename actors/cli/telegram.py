"""``engram telegram ...``: manage the bot's webhook and show what Telegram knows about the bot.

    engram telegram set-webhook --url https://bot.example.org/api/telegram [--drop-pending]
    engram telegram delete-webhook [--drop-pending]
    engram telegram info             # the bot, its webhook and its command menu

``set-webhook`` needs a secret token (Telegram sends it in a header, the webhook checks it):
the configured TELEGRAM_SECRET_TOKEN, or a fresh random one that is printed once, to be put in
the environment or ``.env``. The bot token is never printed; a missing one, or one Telegram
rejects, is a configuration error (exit code 2), the same as in ``engram serve``.

Imports are lazy (inside the handlers): building the ``engram`` parser costs nothing here.
"""

from __future__ import annotations

import argparse
import re
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from runtime.cli import fail
from runtime.errors import SettingsError

if TYPE_CHECKING:
    from actors.settings import Settings
    from actors.telegram.client import BotApiClient
    from actors.telegram.keyboards import BotCommand
    from actors.telegram.types import BotUser, WebhookInfo

T = TypeVar("T")
SECRET_TOKEN_RE = re.compile(r"[A-Za-z0-9_-]{1,256}")
WEBHOOK_PATH = "/api/telegram"


def generate_secret_token() -> str:
    """A random webhook secret: ``secrets.token_urlsafe(32)`` kept to A-Za-z0-9_-."""
    token = re.sub(r"[^A-Za-z0-9_-]", "", secrets.token_urlsafe(32))
    if not SECRET_TOKEN_RE.fullmatch(token):  # cannot happen: 43 url-safe characters
        raise RuntimeError("generated secret token is not valid")
    return token


def valid_secret_token(token: str) -> bool:
    """True for 1-256 characters of A-Z, a-z, 0-9, ``_`` and ``-`` (what Telegram accepts)."""
    return SECRET_TOKEN_RE.fullmatch(token) is not None


@asynccontextmanager
async def open_bot(settings: Settings) -> AsyncIterator[BotApiClient]:
    """A Bot API client for the configured token; SettingsError when it is missing or bad, and
    :class:`~actors.telegram.errors.TokenRejected` when Telegram answers 401 to it."""
    from actors.telegram.client import BotApiClient
    from actors.telegram.errors import TokenRejected, Unauthorized

    token = settings.telegram_bot_token.reveal()
    if not token:
        raise SettingsError(
            "TELEGRAM_BOT_TOKEN",
            "not set; get a token from @BotFather and put it in the environment or .env",
        )
    try:
        client = BotApiClient(token, base_url=settings.telegram_api_base_url)
    except ValueError:
        raise SettingsError(
            "TELEGRAM_BOT_TOKEN", "invalid format (expected <digits>:<secret> from @BotFather)"
        ) from None
    async with client:
        try:
            yield client
        except Unauthorized:
            raise TokenRejected() from None


def https_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a webhook URL (None when it can)."""
    from actors.telegram.settings import webhook_url

    if not url.strip():
        return "must not be empty"
    try:
        webhook_url(url)
    except ValueError as exc:
        return str(exc)
    return None


async def cmd_set_webhook(settings: Settings, args: argparse.Namespace) -> int:
    """setWebhook with a secret token and engram's allowed_updates."""
    from actors.telegram.types import ALLOWED_UPDATES

    url: str = args.url.strip()
    problem = https_url_problem(url)
    if problem is not None:
        return fail(f"--url {problem}", 2)
    configured = settings.telegram_secret_token.reveal()
    if configured and not valid_secret_token(configured):
        raise SettingsError(
            "TELEGRAM_SECRET_TOKEN", "must be 1-256 characters of A-Z, a-z, 0-9, _ and -"
        )
    secret = configured or generate_secret_token()
    async with open_bot(settings) as bot:
        await bot.set_webhook(
            url, secret, ALLOWED_UPDATES, drop_pending_updates=bool(args.drop_pending)
        )
    print(f"webhook set: {url}")
    print(f"allowed updates: {', '.join(ALLOWED_UPDATES)}")
    if args.drop_pending:
        print("pending updates were dropped")
    if configured:
        print("secret token: the configured TELEGRAM_SECRET_TOKEN")
    else:
        print()
        print("No TELEGRAM_SECRET_TOKEN was configured, so a new one was generated.")
        print("Telegram now sends it with every update and the webhook rejects requests")
        print("without it. Put this line in the environment (or .env) of `engram serve`;")
        print("it is shown only this once:")
        print()
        print(f"TELEGRAM_SECRET_TOKEN={secret}")
    if not url.rstrip("/").endswith(WEBHOOK_PATH):
        print(f"note: engram's webhook route is {WEBHOOK_PATH}; check that the URL reaches it")
    return 0


async def cmd_delete_webhook(settings: Settings, args: argparse.Namespace) -> int:
    """deleteWebhook (long polling needs it)."""
    async with open_bot(settings) as bot:
        await bot.delete_webhook(drop_pending_updates=bool(args.drop_pending))
    if args.drop_pending:
        print("webhook deleted; pending updates were dropped")
    else:
        print("webhook deleted; pending updates are kept for `engram serve --polling`")
    return 0


def format_info(me: BotUser | str, hook: WebhookInfo | str, timezone: str = "UTC") -> list[str]:
    """Readable lines for ``engram telegram info`` (no secrets in either object); ``me`` or
    ``hook`` is the reason when it could not be read. Dates in ``timezone``."""
    from runtime.clock import timestamp_text

    if isinstance(me, str):
        lines = [f"bot:              unknown ({me})"]
    else:
        name = f"@{me.username}" if me.username else "(no username)"
        lines = [f"bot:              {name} ({me.first_name}, id {me.id})"]
    if isinstance(hook, str):
        return [*lines, f"webhook:          unknown ({hook})"]
    lines += [
        f"webhook:          {hook.url or '(none: engram serve gets updates by long polling)'}",
        f"pending updates:  {hook.pending_update_count}",
    ]
    if hook.url:
        kinds = ", ".join(hook.allowed_updates) if hook.allowed_updates else "(Telegram default)"
        lines.append(f"allowed updates:  {kinds}")
        if hook.max_connections is not None:
            lines.append(f"max connections:  {hook.max_connections}")
        if hook.has_custom_certificate:
            lines.append("certificate:      custom (self-signed)")
    if hook.last_error_date is not None or hook.last_error_message:
        when = timestamp_text(hook.last_error_date, timezone) if hook.last_error_date else "-"
        lines.append(f"last error:       {when}: {hook.last_error_message or '?'}")
    return lines


def format_menu(commands: Sequence[BotCommand] | str) -> list[str]:
    """The command menu Telegram shows (``setMyCommands``, done by ``engram serve`` at start);
    ``commands`` is the reason when it could not be read."""
    if isinstance(commands, str):
        return [f"commands (menu):  unknown ({commands})"]
    if not commands:
        return ["commands (menu):  (none yet: engram serve registers them at start)"]
    pad = " " * len("commands (menu):  ")
    return [
        f"{'commands (menu):  ' if n == 0 else pad}/{c.command} — {c.description}"
        for n, c in enumerate(commands)
    ]


async def _read(call: Callable[[], Awaitable[T]]) -> T | str:
    """``await call()``, or why it failed (a TelegramError's text); a rejected token is not a
    failure of one method: it propagates (``open_bot`` makes it a configuration error)."""
    from actors.telegram.errors import TelegramError, Unauthorized

    try:
        return await call()
    except Unauthorized:
        raise
    except TelegramError as exc:
        return str(exc)


async def cmd_info(settings: Settings, args: argparse.Namespace) -> int:
    """getMe + getWebhookInfo + getMyCommands, printed readably. Each is read on its own: one
    that fails (a server without the method, an error, a timeout) is shown as ``unknown (why)``
    beside what the others gave, and the command fails (exit 1) only when none could be read."""
    async with open_bot(settings) as bot:
        me = await _read(bot.get_me)
        hook = await _read(bot.get_webhook_info)
        menu = await _read(bot.get_my_commands)
    for line in [*format_info(me, hook, settings.timezone), *format_menu(menu)]:
        print(line)
    if all(isinstance(part, str) for part in (me, hook, menu)):
        return fail("telegram info: nothing could be read from the Bot API server", 1)
    return 0


def register(subparsers: Any) -> None:
    """Add ``engram telegram {set-webhook,delete-webhook,info}`` to the CLI's subparsers."""
    parser = subparsers.add_parser("telegram", help="manage the Telegram webhook; bot info")
    sub = parser.add_subparsers(dest="telegram_command", metavar="ACTION")
    sub.required = True
    p = sub.add_parser(
        "set-webhook",
        help="point Telegram at engram's webhook (prints a new secret token if none is set)",
    )
    p.add_argument("--url", required=True, help=f"public https URL of {WEBHOOK_PATH}")
    p.add_argument("--drop-pending", action="store_true", help="drop the updates Telegram holds")
    p.set_defaults(handler=cmd_set_webhook)
    p = sub.add_parser("delete-webhook", help="remove the webhook (needed for --polling)")
    p.add_argument("--drop-pending", action="store_true", help="drop the updates Telegram holds")
    p.set_defaults(handler=cmd_delete_webhook)
    p = sub.add_parser("info", help="show the bot (getMe) and its webhook (getWebhookInfo)")
    p.set_defaults(handler=cmd_info)
