"""Inline keyboards and the bot's command menu, validated against Telegram's limits.

An :class:`InlineKeyboard` is rows of :class:`Button` s, each with a text and exactly one
action: ``callback_data`` (1-64 bytes of UTF-8, sent back in a callback query when tapped) or a
``url``. At most :data:`MAX_BUTTONS` buttons. Build them through
:func:`actors.chat.callbacks.keyboard`, which puts a short opaque token in ``callback_data``
(never a secret, never the action itself). A :class:`BotCommand` is one line of the menu
Telegram shows for ``/`` (``setMyCommands``).

(These live apart from :mod:`actors.telegram.types`, which holds the parsers of what Telegram
sends us; these are what we send it.)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from actors.telegram.errors import InvalidBotCommand, InvalidKeyboard, UnexpectedResponse

#: Telegram's limits (Bot API: InlineKeyboardButton, setMyCommands).
MAX_CALLBACK_DATA_BYTES = 64
MAX_BUTTONS = 100
MAX_COMMANDS = 100
MAX_COMMAND_DESCRIPTION = 256
_COMMAND_RE = re.compile(r"[a-z0-9_]{1,32}")


def callback_data_fits(data: str) -> bool:
    """True when ``data`` is valid ``callback_data``: 1-64 bytes of UTF-8."""
    return 1 <= len(data.encode("utf-8", "surrogatepass")) <= MAX_CALLBACK_DATA_BYTES


@attrs.frozen
class Button:
    """One inline button: ``text`` and exactly one of ``callback_data`` / ``url``."""

    text: str
    callback_data: str | None = None
    url: str | None = None

    def __attrs_post_init__(self) -> None:
        if not self.text.strip():
            raise InvalidKeyboard("a button's text is empty")
        if (self.callback_data is None) == (self.url is None):
            raise InvalidKeyboard(f"button {self.text!r}: exactly one of callback_data/url")
        if self.callback_data is not None and not callback_data_fits(self.callback_data):
            raise InvalidKeyboard(
                f"button {self.text!r}: callback_data must be 1-{MAX_CALLBACK_DATA_BYTES} bytes"
            )
        if self.url is not None and not self.url.strip():
            raise InvalidKeyboard(f"button {self.text!r}: the url is empty")

    def to_json(self) -> dict[str, str]:
        out = {"text": self.text}
        if self.callback_data is not None:
            out["callback_data"] = self.callback_data
        if self.url is not None:
            out["url"] = self.url
        return out


def _rows(value: Iterable[Iterable[Button]]) -> tuple[tuple[Button, ...], ...]:
    return tuple(tuple(row) for row in value)


@attrs.frozen
class InlineKeyboard:
    """Rows of buttons shown under a message (at least one button, at most 100)."""

    rows: tuple[tuple[Button, ...], ...] = attrs.field(converter=_rows)

    def __attrs_post_init__(self) -> None:
        if not self.rows or any(not row for row in self.rows):
            raise InvalidKeyboard("a keyboard needs at least one button and no empty row")
        if any(not isinstance(b, Button) for row in self.rows for b in row):
            raise InvalidKeyboard("a keyboard's rows hold Button objects only")
        count = sum(len(row) for row in self.rows)
        if count > MAX_BUTTONS:
            raise InvalidKeyboard(f"{count} buttons: Telegram takes at most {MAX_BUTTONS}")

    @property
    def buttons(self) -> tuple[Button, ...]:
        return tuple(b for row in self.rows for b in row)

    def to_json(self) -> dict[str, Any]:
        """The ``reply_markup`` object: ``{"inline_keyboard": [[{text, callback_data}]]}``."""
        return {"inline_keyboard": [[b.to_json() for b in row] for row in self.rows]}

    @classmethod
    def from_json(cls, value: object) -> InlineKeyboard:
        """The keyboard a ``reply_markup`` object describes; :class:`InvalidKeyboard` if none."""
        rows = value.get("inline_keyboard") if isinstance(value, Mapping) else None
        if not isinstance(rows, list) or not all(isinstance(r, list) for r in rows):
            raise InvalidKeyboard("reply_markup is not an inline keyboard")
        out: list[list[Button]] = []
        for row in rows:
            out.append([])
            for b in row:
                if not isinstance(b, Mapping) or not isinstance(b.get("text"), str):
                    raise InvalidKeyboard("a button is not an object with a text")
                data, url = b.get("callback_data"), b.get("url")
                if not isinstance(data, str | None) or not isinstance(url, str | None):
                    raise InvalidKeyboard("a button's callback_data/url is not a string")
                out[-1].append(Button(b["text"], data, url))
        return cls(out)


def _command(value: str) -> str:
    return value.removeprefix("/")


@attrs.frozen
class BotCommand:
    """One entry of the command menu: ``command`` (1-32 of ``a-z0-9_``, a leading ``/`` is
    dropped) and its ``description`` (1-256 characters)."""

    command: str = attrs.field(converter=_command)
    description: str

    def __attrs_post_init__(self) -> None:
        if not _COMMAND_RE.fullmatch(self.command):
            raise InvalidBotCommand(f"/{self.command}: 1-32 characters of a-z, 0-9 and _")
        if (
            not 1 <= len(self.description) <= MAX_COMMAND_DESCRIPTION
            or not self.description.strip()
        ):
            raise InvalidBotCommand(
                f"/{self.command}: the description must be 1-{MAX_COMMAND_DESCRIPTION} characters"
            )

    def to_json(self) -> dict[str, str]:
        return {"command": self.command, "description": self.description}


def commands_json(commands: Sequence[BotCommand]) -> list[dict[str, str]]:
    """setMyCommands' ``commands``; :class:`InvalidBotCommand` past 100 or on a repeated name."""
    if len(commands) > MAX_COMMANDS:
        raise InvalidBotCommand(f"{len(commands)} commands: Telegram takes at most {MAX_COMMANDS}")
    names = [c.command for c in commands]
    if len(set(names)) != len(names):
        raise InvalidBotCommand("a command is listed twice")
    return [c.to_json() for c in commands]


def parse_bot_commands(value: object) -> tuple[BotCommand, ...]:
    """getMyCommands' result."""
    if not isinstance(value, list):
        raise UnexpectedResponse("getMyCommands: result is not a list")
    out: list[BotCommand] = []
    for item in value:
        command = item.get("command") if isinstance(item, Mapping) else None
        description = item.get("description") if isinstance(item, Mapping) else None
        if not isinstance(command, str) or not isinstance(description, str):
            raise UnexpectedResponse("getMyCommands: an entry lacks command/description")
        try:
            out.append(BotCommand(command, description))
        except InvalidBotCommand as exc:
            raise UnexpectedResponse(f"getMyCommands: {exc}") from None
    return tuple(out)
