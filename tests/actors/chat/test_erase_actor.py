"""A chat erased from outside the chat (``engram memory erase``) while its actor runs a turn:
the turn's commit is refused whole (its inbox row is gone), the actor forgets what it held and
carries on with the chat's new messages, from nothing; nothing of the erased chat comes back."""

from __future__ import annotations

from typing import Any

import attrs

from actors.agent.turn import TurnInput, TurnReply
from actors.chat.actor import ChatActor
from actors.chat.deps import ChatDeps
from actors.chat.store import SqlChatStore
from actors.chat.wakes import Wake
from actors.queues import inbox
from memory.erase.chat import count_chat_rows, erase_chat
from runtime.db import Connection, Database

CHAT = 7701


@attrs.define
class ErasingTurn:
    """A turn during which the operator erases the chat (the first time only); its reply
    would write the person's words."""

    db: Database
    seen: list[str] = attrs.field(factory=list)

    async def run_turn(self, turn: TurnInput) -> TurnReply:
        self.seen.append(turn.text)
        if len(self.seen) == 1:
            await erase_chat(self.db, CHAT)

        async def persist(conn: Connection) -> None:
            await conn.execute(
                "INSERT INTO chat_messages (chat_id, role, content) VALUES ($1, 'user', $2)",
                CHAT,
                turn.text,
            )

        return TurnReply("echo", persist=persist)


@attrs.define
class NoTyping:
    async def send_chat_action(self, chat_id: int | str, action: str = "typing") -> None:
        return None


def message(n: int, text: str) -> dict[str, Any]:
    chat = {"id": CHAT, "type": "private"}
    return {
        "update_id": n,
        "message": {"message_id": n, "date": 0, "text": text, "chat": chat, "from": {"id": CHAT}},
    }


async def test_a_turn_in_flight_when_the_chat_is_erased_writes_nothing(db: Database) -> None:
    turns = ErasingTurn(db)
    deps = ChatDeps(
        store=SqlChatStore(db),
        turns=turns,
        bot=NoTyping(),
        outbox_ready=lambda chat, row: None,
        failure_retry_base=0.0,
    )
    actor = ChatActor(CHAT, deps)
    await inbox.insert_update(db, "update:1", 1, CHAT, "message", message(1, "I live in Lisbon"))
    await actor.handle(Wake())  # no exception: the refused commit is the erase, not a failure
    assert turns.seen == ["I live in Lisbon"]
    assert await count_chat_rows(db, CHAT) == {}
    assert actor.failures == 0 and actor.deadline() is None
    # the next message is a fresh start
    row = await inbox.insert_update(db, "update:2", 2, CHAT, "message", message(2, "Hello"))
    await actor.handle(Wake())
    assert turns.seen == ["I live in Lisbon", "Hello"]
    done = await inbox.get(db, CHAT, row or 0)
    assert done is not None and done.status == "done"
    contents = await db.fetch("SELECT content FROM chat_messages WHERE chat_id = $1", CHAT)
    assert [r["content"] for r in contents] == ["Hello"]
