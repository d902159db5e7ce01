"""What the person sends in a local chat, into the inbox as Telegram updates.

A message (or a choice answered) becomes the update Telegram would have sent for a private
chat (a ``message``, or a ``callback_query`` on the message offering the choice), stored once
per client id (``update_key`` ``local:<chat>:<id>``). Local chats have no Telegram to number
their updates and messages: the inbox row's id is the update's ``update_id`` and (a message)
its ``message_id`` (:mod:`actors.local.ids`), set by the insert itself.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from actors.local.frames import Choose, Send
from actors.local.hub import CALLBACK_PREFIX
from actors.queues import inbox
from actors.telegram.types import Update, parse_update
from runtime.db import Queries

#: the name the person goes by in the updates of a local chat
LOCAL_NAME = "you"

_INSERT_NUMBERED = """
WITH n AS (SELECT nextval(pg_get_serial_sequence('inbox', 'id')) AS v)
INSERT INTO inbox (id, update_key, update_id, chat_id, kind, payload)
SELECT v, $1, v, $2, $3,
    CASE WHEN $5 THEN jsonb_set(jsonb_set($4::jsonb, '{update_id}', to_jsonb(v)),
                                '{message,message_id}', to_jsonb(v))
         ELSE jsonb_set($4::jsonb, '{update_id}', to_jsonb(v)) END
FROM n
ON CONFLICT (chat_id, update_key) DO NOTHING RETURNING id
"""


async def insert_numbered(
    db: Queries,
    update_key: str,
    chat_id: int,
    kind: str,
    payload: Mapping[str, Any],
    *,
    number_message: bool,
) -> int | None:
    """Store an update in the inbox (as :func:`actors.queues.inbox.insert_update` does) with its
    row id as its ``update_id`` and, with ``number_message``, its ``message.message_id``. The
    row id, or None when ``update_key`` is already stored."""
    new = inbox.new_update(update_key, 0, chat_id, kind, payload)
    row_id: int | None = await db.fetchval(
        _INSERT_NUMBERED, new.update_key, new.chat_id, new.kind, new.payload_json, number_message
    )
    return row_id


def message_payload(chat_id: int, text: str) -> dict[str, Any]:
    """A private-chat text message as Telegram sends it (ids filled in by the inbox)."""
    person = {"id": chat_id, "is_bot": False, "first_name": LOCAL_NAME}
    return {
        "update_id": 0,
        "message": {
            "message_id": 0,
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private", "first_name": LOCAL_NAME},
            "from": person,
            "text": text,
        },
    }


def choice_payload(chat_id: int, client_id: str, message_id: int, data: str) -> dict[str, Any]:
    """A tap on button ``data`` of message ``message_id``, as Telegram sends it."""
    return {
        "update_id": 0,
        "callback_query": {
            "id": f"{CALLBACK_PREFIX}{chat_id}:{client_id}",
            "from": {"id": chat_id, "is_bot": False, "first_name": LOCAL_NAME},
            "message": {
                "message_id": message_id,
                "date": int(time.time()),
                "chat": {"id": chat_id, "type": "private", "first_name": LOCAL_NAME},
            },
            "chat_instance": "local",
            "data": data,
        },
    }


async def store_input(db: Queries, chat_id: int, frame: Send | Choose) -> tuple[int, Update] | None:
    """Put a message or a choice in the inbox; its row and update, None when already there."""
    key = f"local:{chat_id}:{frame.id}"
    if isinstance(frame, Send):
        payload = message_payload(chat_id, frame.text)
        row_id = await insert_numbered(db, key, chat_id, "message", payload, number_message=True)
        if row_id is None:
            return None
        payload["message"]["message_id"] = row_id
    else:
        payload = choice_payload(chat_id, frame.id, frame.message_id, frame.data)
        row_id = await insert_numbered(
            db, key, chat_id, "callback_query", payload, number_message=False
        )
        if row_id is None:
            return None
    payload["update_id"] = row_id
    return row_id, parse_update(payload)
