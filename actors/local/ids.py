"""The id space of local chats: ids no Telegram chat, update or sent message can have.

Telegram's chat ids have at most 52 significant bits (Bot API: "a signed 64-bit integer or
double-precision float type are safe for storing this identifier"), so every id from
:data:`LOCAL_CHAT_MIN` (2**53) up is free of them: a local chat is ``2**53 + n``. Inside a
local chat, the person's messages are numbered by their inbox row (``update_id`` = message id =
inbox id, below :data:`BOT_MESSAGE_BASE`), the bot's by their outbox row and chunk
(:func:`bot_message_id`, from :data:`BOT_MESSAGE_BASE` up): stable across resends, so the
client recognises a message it already has.
"""

from __future__ import annotations

#: the smallest local chat id: 2**53, above every Telegram chat id (at most 52 bits)
LOCAL_CHAT_MIN = 2**53
#: the local chats (the one chat of ``engram chat`` is :data:`LOCAL_CHAT_ID`)
LOCAL_CHATS = range(LOCAL_CHAT_MIN, LOCAL_CHAT_MIN + 2**32)
#: the chat of the person holding the local token
LOCAL_CHAT_ID = LOCAL_CHAT_MIN + 1
#: the bot's message ids in a local chat start here (the person's are inbox ids, below)
BOT_MESSAGE_BASE = 2**40
#: chunks per outbox row a local message id can number
MAX_CHUNKS = 2**10


def is_local_chat(chat_id: int | None) -> bool:
    return chat_id is not None and chat_id in LOCAL_CHATS


def bot_message_id(outbox_id: int, chunk: int) -> int:
    """The message id of chunk ``chunk`` of outbox row ``outbox_id`` in a local chat."""
    if not 0 <= chunk < MAX_CHUNKS:
        raise ValueError(f"chunk {chunk} out of range for a local message id")
    return BOT_MESSAGE_BASE + outbox_id * MAX_CHUNKS + chunk


def delivery_key(outbox_id: int, chunk: int) -> str:
    """What the client acknowledges and deduplicates by: one chunk of one outbox row."""
    return f"{outbox_id}.{chunk}"
