"""The fake Bot API's inline keyboards, message edits and command menu (mixed into
:class:`fakes.bot_api.FakeBotApi`), as strict as Telegram:

* ``reply_markup``: an object with ``inline_keyboard``, an array of arrays of button objects,
  each with a non-empty ``text`` and exactly one action (``callback_data`` of 1-64 bytes,
  ``url``, ...); at most 100 buttons;
* ``editMessageText`` / ``editMessageReplyMarkup``: only of a message the bot sent in that chat
  (else 400 "message to edit not found"; a person's message: "message can't be edited"); 400
  "message is not modified" when text and keyboard would stay the same; editing the text
  without ``reply_markup`` removes the keyboard, as Telegram does;
* ``setMyCommands``: 1-32 characters of ``a-z0-9_``, descriptions 1-256, at most 100.

For tests: :meth:`KeyboardMethods.message` (a sent message as it is now, edits applied),
``edits`` (every edit, in order), ``commands``, and :meth:`KeyboardMethods.tap` (queues the
callback query a person's tap on a shown button produces, and returns it for a webhook POST).
"""

from __future__ import annotations

import abc
import json
import re
from collections.abc import Mapping
from typing import Any

import attrs

MAX_BUTTONS = 100
BUTTON_ACTIONS = frozenset(
    {
        "callback_data",
        "url",
        "web_app",
        "login_url",
        "switch_inline_query",
        "switch_inline_query_current_chat",
        "switch_inline_query_chosen_chat",
        "copy_text",
        "callback_game",
        "pay",
    }
)
NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup are "
    "exactly the same as a current content and reply markup of the message"
)
_COMMAND_RE = re.compile(r"[a-z0-9_]{1,32}")
_SCOPES = frozenset(
    {
        "default",
        "all_private_chats",
        "all_group_chats",
        "all_chat_administrators",
        "chat",
        "chat_administrators",
        "chat_member",
    }
)

KEYBOARD_SPECS: dict[str, dict[str, str]] = {
    "editMessageText": {
        "chat_id": "chat",
        "message_id": "int",
        "inline_message_id": "str",
        "text": "str!",
        "parse_mode": "str",
        "entities": "list",
        "link_preview_options": "obj",
        "reply_markup": "obj",
        "business_connection_id": "str",
    },
    "editMessageReplyMarkup": {
        "chat_id": "chat",
        "message_id": "int",
        "inline_message_id": "str",
        "reply_markup": "obj",
        "business_connection_id": "str",
    },
    "setMyCommands": {"commands": "list!", "scope": "obj", "language_code": "str"},
    "getMyCommands": {"scope": "obj", "language_code": "str"},
    "deleteMyCommands": {"scope": "obj", "language_code": "str"},
}


class KeyboardFailure(Exception):
    """A 400 answer; the fake turns it into its own ApiFailure."""

    def __init__(self, description: str) -> None:
        super().__init__(f"Bad Request: {description}")
        self.description = f"Bad Request: {description}"


def check_markup(markup: object) -> None:
    """Telegram's rules for an inline keyboard ``reply_markup``."""
    rows = markup.get("inline_keyboard") if isinstance(markup, Mapping) else None
    if not isinstance(markup, Mapping) or set(markup) != {"inline_keyboard"}:
        raise KeyboardFailure("can't parse reply keyboard markup JSON object")
    if not isinstance(rows, list) or not all(isinstance(r, list) for r in rows):
        raise KeyboardFailure(
            'can\'t parse inline keyboard: field "inline_keyboard" must be an Array of Arrays'
        )
    count = 0
    for row in rows:
        for button in row:
            count += 1
            if not isinstance(button, dict) or not isinstance(button.get("text"), str):
                raise KeyboardFailure("can't parse inline keyboard button: Text must be a String")
            if not button["text"].strip():
                raise KeyboardFailure("BUTTON_TEXT_INVALID")
            unknown = set(button) - BUTTON_ACTIONS - {"text"}
            if unknown:
                raise KeyboardFailure(
                    f"can't parse inline keyboard button: unknown field "
                    f"{sorted(unknown)[0]!r} (the fake rejects it)"
                )
            if len(set(button) & BUTTON_ACTIONS) != 1:
                raise KeyboardFailure(
                    "can't parse inline keyboard button: exactly one of the "
                    "optional fields must be used"
                )
            data = button.get("callback_data")
            if "callback_data" in button and not (
                isinstance(data, str) and 1 <= len(data.encode("utf-8")) <= 64
            ):
                raise KeyboardFailure("BUTTON_DATA_INVALID")
            if "url" in button and not (isinstance(button["url"], str) and button["url"]):
                raise KeyboardFailure("BUTTON_URL_INVALID")
    if count > MAX_BUTTONS:
        raise KeyboardFailure("REPLY_MARKUP_TOO_LONG")


def check_commands(commands: list[Any]) -> list[dict[str, str]]:
    if len(commands) > 100:
        raise KeyboardFailure("BOT_COMMANDS_TOO_MUCH")
    out = []
    for item in commands:
        if not isinstance(item, dict) or set(item) != {"command", "description"}:
            raise KeyboardFailure("can't parse BotCommand: command and description expected")
        command, description = item["command"], item["description"]
        if not isinstance(command, str) or not _COMMAND_RE.fullmatch(command):
            raise KeyboardFailure("BOT_COMMAND_INVALID")
        if not isinstance(description, str) or not 1 <= len(description) <= 256:
            raise KeyboardFailure("BOT_COMMAND_DESCRIPTION_INVALID")
        out.append({"command": command, "description": description})
    return out


def _scope_key(p: Mapping[str, Any]) -> str:
    scope = p.get("scope", {"type": "default"})
    if scope.get("type") not in _SCOPES:
        raise KeyboardFailure("can't parse BotCommandScope: unknown type")
    return json.dumps([scope, p.get("language_code", "")], sort_keys=True)


@attrs.frozen
class Edit:
    """One successful edit: ``text`` None for editMessageReplyMarkup (the text unchanged)."""

    chat_id: int | str
    message_id: int
    text: str | None
    parse_mode: str | None
    visible_text: str | None
    reply_markup: Any


class KeyboardMethods(abc.ABC):
    """The fake's methods for keyboards, edits and commands (a mixin of FakeBotApi, which
    provides ``sent``, ``push_update``, ``check_text``, ``chat``, ``new_query_id``)."""

    sent: dict[int | str, list[Any]]

    def __init__(self) -> None:
        self.edits: list[Edit] = []
        #: setMyCommands per (scope, language): the stored command lists
        self.commands: dict[str, list[dict[str, str]]] = {}

    # helpers FakeBotApi provides
    @abc.abstractmethod
    def push_update(self, update: Mapping[str, Any]) -> dict[str, Any]:
        """Provided by FakeBotApi."""

    @abc.abstractmethod
    def check_text(self, text: str, mode: str | None) -> str:
        """Provided by FakeBotApi."""

    @abc.abstractmethod
    def chat(self, value: int | str) -> int | str:
        """Provided by FakeBotApi."""

    @abc.abstractmethod
    def new_query_id(self) -> str:
        """Provided by FakeBotApi."""

    @abc.abstractmethod
    def is_user_message(self, chat_id: int | str, message_id: int) -> bool:
        """Provided by FakeBotApi."""

    # --- for tests -----------------------------------------------------------------------------

    def message(self, chat_id: int | str, message_id: int) -> Any:
        """A message the bot sent, as it is now (every edit applied), or None."""
        found = next((m for m in self.sent.get(chat_id, []) if m.message_id == message_id), None)
        if found is None:
            return None
        for e in self.edits:
            if e.chat_id == chat_id and e.message_id == message_id:
                if e.text is not None:
                    found = attrs.evolve(
                        found, text=e.text, parse_mode=e.parse_mode, visible_text=e.visible_text
                    )
                found = attrs.evolve(found, reply_markup=e.reply_markup)
        return found

    def buttons(self, chat_id: int | str, message_id: int) -> list[dict[str, Any]]:
        """The buttons shown under a message now, row after row."""
        current = self.message(chat_id, message_id)
        markup = current.reply_markup if current is not None else None
        return [b for row in (markup or {}).get("inline_keyboard", []) for b in row]

    def tap(
        self,
        chat_id: int,
        message_id: int,
        text: str,
        *,
        user_id: int | None = None,
    ) -> dict[str, Any]:
        """A person taps the button labelled ``text`` under the bot's message: the callback
        query update, queued for getUpdates and returned (to POST to a webhook). A button
        that is not shown now cannot be tapped (AssertionError)."""
        current = self.message(chat_id, message_id)
        assert current is not None, f"the bot sent no message {message_id} in chat {chat_id}"
        button = next((b for b in self.buttons(chat_id, message_id) if b["text"] == text), None)
        shown = [b["text"] for b in self.buttons(chat_id, message_id)]
        assert button is not None and "callback_data" in button, f"no {text!r} button: {shown}"
        sender = user_id or (chat_id if chat_id > 0 else 1000)
        chat_type = "private" if chat_id > 0 else "supergroup"
        message = {
            "message_id": message_id,
            "date": 1,
            "text": current.visible_text,
            "chat": {"id": chat_id, "type": chat_type},
            "reply_markup": current.reply_markup,
        }
        query = {
            "id": self.new_query_id(),
            "chat_instance": f"ci{chat_id}",
            "from": {"id": sender, "is_bot": False, "first_name": "Tester"},
            "message": message,
            "data": button["callback_data"],
        }
        return self.push_update({"callback_query": query})

    # --- Bot API methods -----------------------------------------------------------------------

    def _edit_target(self, p: dict[str, Any]) -> tuple[int | str, int, Any]:
        if "inline_message_id" in p:
            raise KeyboardFailure("inline messages are not supported by the fake")
        if "chat_id" not in p or "message_id" not in p:
            raise KeyboardFailure("message identifier is not specified")
        chat, message_id = self.chat(p["chat_id"]), p["message_id"]
        current = self.message(chat, message_id)
        if current is None:
            if self.is_user_message(chat, message_id):
                raise KeyboardFailure("message can't be edited")
            raise KeyboardFailure("message to edit not found")
        if "reply_markup" in p:
            check_markup(p["reply_markup"])
        return chat, message_id, current

    async def _edit_message_text(self, p: dict[str, Any]) -> object:
        chat, message_id, current = self._edit_target(p)
        mode = p.get("parse_mode")
        visible = self.check_text(p["text"], mode)
        markup = p.get("reply_markup")
        if (p["text"], mode, markup) == (current.text, current.parse_mode, current.reply_markup):
            raise KeyboardFailure(NOT_MODIFIED.removeprefix("Bad Request: "))
        self.edits.append(Edit(chat, message_id, p["text"], mode, visible, markup))
        return self._message_json(chat, message_id)

    async def _edit_message_reply_markup(self, p: dict[str, Any]) -> object:
        chat, message_id, current = self._edit_target(p)
        markup = p.get("reply_markup")
        if markup == current.reply_markup or (not markup and not current.reply_markup):
            raise KeyboardFailure(NOT_MODIFIED.removeprefix("Bad Request: "))
        self.edits.append(Edit(chat, message_id, None, None, None, markup))
        return self._message_json(chat, message_id)

    def _message_json(self, chat: int | str, message_id: int) -> dict[str, Any]:
        now = self.message(chat, message_id)
        out: dict[str, Any] = {
            "message_id": message_id,
            "date": 1,
            "edit_date": 2,
            "chat": {"id": chat, "type": "private"},
            "text": now.visible_text,
        }
        if now.reply_markup:
            out["reply_markup"] = now.reply_markup
        return out

    async def _set_my_commands(self, p: dict[str, Any]) -> object:
        key = _scope_key(p)
        self.commands[key] = check_commands(p["commands"])
        return True

    async def _get_my_commands(self, p: dict[str, Any]) -> object:
        return list(self.commands.get(_scope_key(p), []))

    async def _delete_my_commands(self, p: dict[str, Any]) -> object:
        self.commands.pop(_scope_key(p), None)
        return True

    def menu(self) -> list[tuple[str, str]]:
        """The default scope's commands, as (command, description)."""
        items = self.commands.get(_scope_key({}), [])
        return [(c["command"], c["description"]) for c in items]
