"""What a chat command is: :class:`Command` (name, one-line help, handler), the
:class:`CommandCall` a handler gets, the :class:`CommandTable` that answers a ``/command`` and
generates ``/help`` and Telegram's menu, and :func:`parse_command`. The table itself — which
commands exist — is :mod:`actors.chat.commands`.

* ``/memory@engram_bot list`` is ``/memory list`` (a bot suffix is dropped);
* an unknown command is answered :data:`UNKNOWN` (never sent to the model).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import attrs

from actors.agent.turn import TurnReply
from actors.telegram.keyboards import BotCommand

INTRO = "I'm engram, a companion with a long memory. Talk to me by text or voice."
UNKNOWN = "Unknown command /{name}, see /help."


@attrs.frozen
class CommandCall:
    """One command as typed: ``name`` without the slash and bot suffix, lower case; ``args``
    the rest, stripped."""

    chat_id: int
    name: str
    args: str
    sender_id: int | None = None
    now: datetime = attrs.field(factory=lambda: datetime.now(UTC))
    #: the chat's /stop bookkeeping (True once when a running turn was cancelled by /stop)
    consume_stopped: Callable[[], bool] = lambda: False


Handler = Callable[[CommandCall], Awaitable[TurnReply]]


@attrs.frozen
class Command:
    """One entry of the table."""

    name: str  # 1-32 of a-z, 0-9, _ (Telegram's rule for the menu)
    help: str  # one line: the menu's description and /help's
    handler: Handler
    usage: tuple[str, ...] = ()  # sub-command lines /help shows under it
    menu: bool = True  # listed in Telegram's menu (/start is not: Telegram shows its own)


def parse_command(text: str) -> tuple[str, str] | None:
    """``("memory", "list goal")`` for ``/memory@engram_bot list goal``; None when ``text`` is
    not a command."""
    if not text.startswith("/"):
        return None
    parts = text[1:].split(None, 1)
    name = parts[0].split("@", 1)[0].lower() if parts and not text[1:2].isspace() else ""
    if not name:
        return None
    return name, parts[1].strip() if len(parts) > 1 else ""


@attrs.frozen
class CommandTable:
    """The commands, in the order /help and the menu list them."""

    commands: tuple[Command, ...]
    intro: str = INTRO

    def __attrs_post_init__(self) -> None:
        names = [c.name for c in self.commands]
        if len(set(names)) != len(names):
            raise ValueError("a command is listed twice")

    def find(self, name: str) -> Command | None:
        return next((c for c in self.commands if c.name == name), None)

    def help_text(self) -> str:
        """/help: the intro, then each command with its help line and its usage lines."""
        lines = [self.intro, "", "Commands (answered at once, without the model):"]
        for c in self.commands:
            if c.name == "start":
                continue
            lines.append(f"/{c.name} — {c.help}")
            lines += [f"   {u}" for u in c.usage]
        return "\n".join(lines)

    def menu(self) -> list[BotCommand]:
        """The ``setMyCommands`` list."""
        return [BotCommand(c.name, c.help) for c in self.commands if c.menu]

    async def run(
        self,
        chat_id: int,
        text: str,
        *,
        sender_id: int | None = None,
        now: datetime | None = None,
        consume_stopped: Callable[[], bool] = lambda: False,
    ) -> TurnReply:
        """The reply to the command ``text`` (see the module docstring)."""
        parsed = parse_command(text)
        name, args = parsed if parsed is not None else ("", text)
        command = self.find(name)
        if command is None:
            return TurnReply(UNKNOWN.format(name=name or "?"))
        call = CommandCall(
            chat_id, name, args, sender_id, now or datetime.now(UTC), consume_stopped
        )
        return await command.handler(call)
