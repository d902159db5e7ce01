"""Updates put in the inbox the way ingress stores them, for tests that drive the chat actors
through the real inbox (crash recovery, model outages, due runs)."""

from __future__ import annotations

from typing import Any

from actors.queues import inbox
from runtime.db import Database


async def insert_text(db: Database, chat_id: int, update_id: int, text: str) -> int:
    """A private chat's text message as update ``update_id``; returns its inbox row id."""
    payload: dict[str, Any] = {
        "update_id": update_id,
        "message": {
            "message_id": update_id,
            "date": 0,
            "text": text,
            "chat": {"id": chat_id, "type": "private"},
            "from": {"id": 7, "is_bot": False, "first_name": "A"},
        },
    }
    row_id = await inbox.insert_update(
        db, f"update:{update_id}", update_id, chat_id, "message", payload
    )
    assert row_id is not None
    return row_id
