"""Keyboards and edits are outbox work: a reply's keyboard is stored with it and sent on its last
chunk; an edit of a sent message is a row sent in the chat's order; both through the real
sender, the real database and the strict fake Bot API, under the sender's exactly-once rules."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs
import pytest
import trio
from fakes.bot_api import Failure, FakeBotApi, run_fake_bot_api
from queue_rows import outbox_row

from actors.agent.turn import TurnReply
from actors.chat.store import SqlChatStore
from actors.queues import inbox, outbox
from actors.queues.outbox import OutboxRow
from actors.sender.actor import OutboxReady, SenderActor
from actors.sender.policy import SenderSettings
from actors.telegram.client import BotApiClient
from actors.telegram.keyboards import Button, InlineKeyboard
from runtime import db as dbmod
from runtime.actor import Address

CHAT = 8101
FAST = SenderSettings(
    chat_interval=0.0,
    global_rate=1000,
    retry_base=0.01,
    jitter=0.0,
    default_retry_after=0.01,
    sweep_interval=0.05,
    db_retry_base=0.01,
)
KB = InlineKeyboard([[Button("Yes", "tok-yes"), Button("No", "tok-no")]])
UNDO = InlineKeyboard([[Button("Undo", "tok-undo")]])


@attrs.frozen
class Sending:
    fake: FakeBotApi
    sender: Address[OutboxReady]


@asynccontextmanager
async def sending(db: dbmod.Database) -> AsyncIterator[Sending]:
    async with run_fake_bot_api() as fake:
        bot = BotApiClient(fake.token, base_url=fake.base_url)
        async with bot, trio.open_nursery() as nursery:
            address = await nursery.start(SenderActor(db, bot, settings=FAST).run)
            yield Sending(fake, address)
            nursery.cancel_scope.cancel()


async def final(db: dbmod.Database, row_id: int) -> OutboxRow:
    with trio.fail_after(15):
        while True:
            row = await outbox_row(db, row_id)
            if row is not None and row.status not in outbox.OPEN_STATUSES:
                return row
            await trio.sleep(0.02)


async def test_a_reply_keeps_its_keyboard_and_sends_it_on_its_last_chunk(
    db: dbmod.Database,
) -> None:
    update = {
        "update_id": 1,
        "message": {
            "message_id": 1,
            "date": 0,
            "text": "forget coffee",
            "chat": {"id": CHAT, "type": "private"},
        },
    }
    row_id = await inbox.insert_update(db, "update:1", 1, CHAT, "message", update)
    assert row_id is not None
    text = "\n\n".join(f"{i}. " + "memory " * 80 for i in range(20))  # ~11,000 chars: 3 chunks
    async with sending(db) as s:
        reply = TurnReply(text, keyboard=KB)
        claimed = await SqlChatStore(db).commit(CHAT, reply, [row_id], None)
        assert claimed is not None and claimed.reply_markup == KB.to_json()  # with the reply
        stored = await outbox.get(db, CHAT, claimed.id)
        assert stored is not None and stored.reply_markup == KB.to_json()
        assert stored.kind == "message"
        await s.sender.send(OutboxReady(CHAT, claimed))  # as the chat actor hands it over
        row = await final(db, claimed.id)
        assert row.status == "sent" and len(row.telegram_message_ids) >= 3
        markups = [m.reply_markup for m in s.fake.sent[CHAT]]
        assert markups[:-1] == [None] * (len(markups) - 1) and markups[-1] == KB.to_json()


async def sent_message(db: dbmod.Database, text: str) -> int:
    row_id = await outbox.enqueue_reply(db, CHAT, text, reply_markup=KB.to_json())
    row = await final(db, row_id)
    assert row.status == "sent"
    return row.telegram_message_ids[-1]


async def test_edits_are_sent_in_the_chats_order(db: dbmod.Database) -> None:
    async with sending(db) as s:
        fake = s.fake
        message_id = await sent_message(db, "Forget these?")
        ids = [
            await outbox.enqueue_reply(
                db, CHAT, "Forgotten: coffee.", kind="edit", edit_message_id=message_id
            ),
            await outbox.enqueue_reply(db, CHAT, "Anything else?", reply_markup=KB.to_json()),
            await outbox.enqueue_reply(
                db,
                CHAT,
                "",
                kind="edit_markup",
                edit_message_id=message_id,
                reply_markup=UNDO.to_json(),
            ),
        ]
        rows = [await final(db, i) for i in ids]
        assert [r.status for r in rows] == ["sent"] * 3
        assert rows[0].telegram_message_ids == (message_id,)  # an edit records its target
        now = fake.message(CHAT, message_id)
        assert now.text == "Forgotten: coffee."
        assert fake.buttons(CHAT, message_id) == [{"text": "Undo", "callback_data": "tok-undo"}]
        order = [c.method for c in fake.calls if c.method.startswith(("send", "edit"))]
        assert order == ["sendMessage", "editMessageText", "sendMessage", "editMessageReplyMarkup"]
        assert fake.edits[0].reply_markup is None  # the text edit removed the keyboard


async def test_an_edit_that_changes_nothing_is_done_one_of_a_foreign_message_fails(
    db: dbmod.Database,
) -> None:
    async with sending(db) as s:
        fake = s.fake
        message_id = await sent_message(db, "Keep?")
        markup = KB.to_json()
        same = await outbox.enqueue_reply(
            db, CHAT, "Keep?", kind="edit", edit_message_id=message_id, reply_markup=markup
        )
        assert (await final(db, same)).status == "sent"  # "message is not modified": done
        assert fake.calls_to("editMessageText")[-1].status == 400
        foreign = await outbox.enqueue_reply(
            db, CHAT + 1, "x", kind="edit", edit_message_id=message_id
        )
        row = await final(db, foreign)
        assert row.status == "failed" and "message to edit not found" in (row.last_error or "")
        long_edit = await outbox.enqueue_reply(
            db, CHAT, "word " * 2000, kind="edit", edit_message_id=message_id
        )
        assert (await final(db, long_edit)).status == "sent"  # its first chunk: one message
        assert len(fake.message(CHAT, message_id).visible_text) <= 4096
        assert fake.edits[-1].reply_markup is None


@pytest.mark.parametrize("deliver", [False, True])
async def test_an_edit_whose_answer_is_lost_is_uncertain_not_resent(
    db: dbmod.Database, deliver: bool
) -> None:
    async with sending(db) as s:
        fake = s.fake
        message_id = await sent_message(db, "Forget?")
        fake.fail_next("editMessageText", Failure.reset(deliver=deliver))
        row_id = await outbox.enqueue_reply(
            db, CHAT, "Forgotten.", kind="edit", edit_message_id=message_id
        )
        row = await final(db, row_id)
        assert row.status == "uncertain" and len(fake.calls_to("editMessageText")) == 1
        assert (fake.message(CHAT, message_id).text == "Forgotten.") is deliver


async def test_the_outbox_refuses_an_edit_without_its_target(db: dbmod.Database) -> None:
    with pytest.raises(Exception, match="outbox_edit_has_target"):
        await outbox.enqueue_reply(db, CHAT, "x", kind="edit")
    with pytest.raises(Exception, match="outbox_edit_has_target"):
        await outbox.enqueue_reply(db, CHAT, "x", edit_message_id=5)
