"""The fake Bot API's streamed drafts (mixed into :class:`fakes.bot_api.FakeBotApi`), as strict
as Telegram (Bot API 9.5 and 10.3):

* ``sendMessageDraft``: ``chat_id`` an Integer naming a private chat (a group or channel id is
  refused: drafts exist in private chats only), ``draft_id`` a non-zero Integer, ``text`` 0-4096
  characters after entity parsing (empty shows "Thinking..."), ``parse_mode``, ``can_stop`` and
  ``keep_on_stop`` Booleans; answers ``true``. What was shown is kept in ``drafts``. Drafts
  faster than ``draft_min_interval`` seconds apart in one chat get 429 (flood control) with
  ``retry_after``.
* ``deleteMessage``: a message the bot sent and did not delete yet (else 400 "message to
  delete not found").
* :meth:`DraftMethods.press_stop` queues the ``stopped_message_generation`` update Telegram
  sends when the person presses the Stop button of a draft shown with ``can_stop``.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any

import attrs
import trio

DRAFT_SPECS: dict[str, dict[str, str]] = {
    "sendMessageDraft": {
        "chat_id": "int!",
        "draft_id": "int!",
        "text": "str",
        "parse_mode": "str",
        "entities": "list",
        "message_thread_id": "int",
        "can_stop": "bool",
        "keep_on_stop": "bool",
    },
    "deleteMessage": {"chat_id": "chat!", "message_id": "int!"},
}
MAX_DRAFT_TEXT = 4096


class DraftFailure(Exception):
    """An ``{"ok": false}`` answer from the draft methods (mapped by the fake)."""

    def __init__(self, status: int, description: str, retry_after: int | None = None) -> None:
        super().__init__(description)
        self.status, self.description, self.retry_after = status, description, retry_after


@attrs.frozen
class Draft:
    chat_id: int
    draft_id: int
    text: str
    can_stop: bool
    keep_on_stop: bool
    time: float


class DraftMethods(abc.ABC):
    """``sendMessageDraft`` and ``deleteMessage`` for the fake (a mixin of FakeBotApi, which
    provides ``chat``, ``check_text``, ``push_update`` and ``sent``)."""

    sent: dict[int | str, list[Any]]

    def __init__(self) -> None:
        self.drafts: list[Draft] = []
        self.deleted: list[tuple[int | str, int]] = []
        #: the least time between two drafts of a chat before a 429 (0: any pace)
        self.draft_min_interval = 0.0
        self.draft_retry_after = 1

    @abc.abstractmethod
    def chat(self, value: int | str) -> int | str: ...

    @abc.abstractmethod
    def check_text(self, text: str, mode: str | None) -> str: ...

    @abc.abstractmethod
    def push_update(self, update: Mapping[str, Any]) -> dict[str, Any]: ...

    def drafts_of(self, chat_id: int) -> list[Draft]:
        return [d for d in self.drafts if d.chat_id == chat_id]

    def press_stop(self, chat_id: int, draft_id: int | None = None) -> dict[str, Any]:
        """The person presses Stop on the chat's latest draft (or ``draft_id``)."""
        shown = self.drafts_of(chat_id)
        if not shown or not shown[-1].can_stop:
            raise ValueError("no draft with a Stop button was shown in this chat")
        draft = shown[-1].draft_id if draft_id is None else draft_id
        return self.push_update(
            {
                "stopped_message_generation": {
                    "chat": {"id": chat_id, "type": "private", "first_name": "Tester"},
                    "draft_id": draft,
                }
            }
        )

    async def _send_message_draft(self, p: dict[str, Any]) -> object:
        chat_id = p["chat_id"]
        if chat_id <= 0:
            raise DraftFailure(400, "Bad Request: message drafts can be sent to private chats only")
        self.chat(chat_id)
        if p["draft_id"] == 0:
            raise DraftFailure(400, "Bad Request: draft_id must be non-zero")
        text = p.get("text", "")
        if text:
            self.check_text(text, p.get("parse_mode"))
        now = trio.current_time()
        earlier = self.drafts_of(chat_id)
        if earlier and now - earlier[-1].time < self.draft_min_interval:
            retry = self.draft_retry_after
            raise DraftFailure(429, f"Too Many Requests: retry after {retry}", retry)
        self.drafts.append(
            Draft(
                chat_id,
                p["draft_id"],
                text,
                bool(p.get("can_stop")),
                bool(p.get("keep_on_stop")),
                now,
            )
        )
        return True

    async def _delete_message(self, p: dict[str, Any]) -> object:
        chat = self.chat(p["chat_id"])
        message_id = p["message_id"]
        mine = {m.message_id for m in self.sent.get(chat, [])}
        if message_id not in mine or (chat, message_id) in self.deleted:
            raise DraftFailure(400, "Bad Request: message to delete not found")
        self.deleted.append((chat, message_id))
        return True
