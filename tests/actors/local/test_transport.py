"""The sender's transport to local chats (a real outbox on PostgreSQL, the real sender and hub;
the client is a session whose frames are recorded): a row waits while no client is connected,
is delivered and acknowledged once one is, is sent again when not acknowledged, and a chunk in
flight when a sender stopped goes back to the queue for local chats (uncertain for Telegram's)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from actors.local import frames
from actors.local import hub as hub_module
from actors.local.frames import Delivery, ServerFrame
from actors.local.hub import LocalHub, Session
from actors.local.ids import LOCAL_CHAT_ID, LOCAL_CHATS, bot_message_id
from actors.queues import outbox, sending
from actors.sender.actor import OutboxReady, SenderActor
from actors.sender.policy import SenderSettings
from runtime.db import Database

NO_SWEEP = SenderSettings(sweep_interval=None, jitter=0.0)
KEYBOARD = {"inline_keyboard": [[{"text": "Forget", "callback_data": "t1"}]]}


class NoTelegram:
    """The Bot API side of the sender: a local chat's row must never reach it."""

    async def send_message(self, *args: Any, **kwargs: Any) -> int:
        raise AssertionError("a local chat's row went to the Bot API")

    async def edit_message_text(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("a local chat's row went to the Bot API")

    async def edit_message_reply_markup(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("a local chat's row went to the Bot API")


def client(
    nursery: trio.Nursery, shown: list[ServerFrame], *, acks: bool = True
) -> Callable[[], Session]:
    def make() -> Session:
        session: Session

        async def send_text(text: str) -> None:
            frame = frames.decode_server(text)
            shown.append(frame)
            if acks and isinstance(frame, Delivery):
                session.acked(frame.delivery)

        session = Session(LOCAL_CHAT_ID, send_text, trio.CancelScope(), nursery)
        return session

    return make


@asynccontextmanager
async def sender(db: Database) -> AsyncIterator[tuple[LocalHub, trio.Nursery]]:
    hub = LocalHub()
    actor = SenderActor(db, NoTelegram(), settings=NO_SWEEP, local=hub)
    async with trio.open_nursery() as nursery:
        address = await nursery.start(actor.run)
        hub.poke = lambda chat_id: address.send_nowait(OutboxReady(chat_id))
        yield hub, nursery
        address.close()


async def row(db: Database, row_id: int) -> Any:
    return await db.fetchrow(
        "SELECT status, attempts, chunk_in_flight, telegram_message_ids FROM outbox WHERE id = $1",
        row_id,
    )


async def until_sent(db: Database, row_id: int) -> None:
    with trio.fail_after(10):
        while (await row(db, row_id))["status"] != "sent":  # noqa: ASYNC110 - the sender's doing
            await trio.sleep(0.02)


async def test_a_row_waits_for_a_client_then_is_delivered_once(db: Database) -> None:
    row_id = await outbox.enqueue_reply(
        db, LOCAL_CHAT_ID, "<b>Hi</b> there", "HTML", reply_to_message_id=12, reply_markup=KEYBOARD
    )
    shown: list[ServerFrame] = []
    async with sender(db) as (hub, nursery):
        hub.poke(LOCAL_CHAT_ID)
        await trio.sleep(0.3)
        waiting = await row(db, row_id)
        assert waiting["status"] == "sending" and waiting["chunk_in_flight"] is None  # open
        hub.attach(client(nursery, shown)())
        await until_sent(db, row_id)
    message_id = bot_message_id(row_id, 0)
    assert shown == [
        Delivery(
            "message",
            f"{row_id}.0",
            message_id,
            "Hi there",
            (frames.Choice(1, "Forget", "t1"),),
            12,
        )
    ]
    assert list((await row(db, row_id))["telegram_message_ids"]) == [message_id]


async def test_an_unacknowledged_row_is_sent_again_to_the_next_client(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hub_module, "ACK_TIMEOUT", 0.2)
    row_id = await outbox.enqueue_reply(db, LOCAL_CHAT_ID, "once")
    first: list[ServerFrame] = []
    second: list[ServerFrame] = []
    async with sender(db) as (hub, nursery):
        silent = client(nursery, first, acks=False)()
        hub.attach(silent)
        with trio.fail_after(5):
            while not silent.closed:  # noqa: ASYNC110 - the ack timeout closes it
                await trio.sleep(0.02)
        with trio.fail_after(5):  # released by the sender: open, not in flight
            while (await row(db, row_id))["chunk_in_flight"] is not None:  # noqa: ASYNC110
                await trio.sleep(0.02)
        assert (await row(db, row_id))["status"] == "sending"
        hub.attach(client(nursery, second)())
        await until_sent(db, row_id)
    assert [f.delivery for f in first if isinstance(f, Delivery)] == [f"{row_id}.0"]
    assert [f.delivery for f in second if isinstance(f, Delivery)] == [f"{row_id}.0"]


async def test_an_edit_names_the_message_and_its_choices(db: Database) -> None:
    target = bot_message_id(41, 0)
    row_id = await outbox.enqueue_reply(
        db, LOCAL_CHAT_ID, "Forgotten.", kind="edit", edit_message_id=target
    )
    shown: list[ServerFrame] = []
    async with sender(db) as (hub, nursery):
        hub.attach(client(nursery, shown)())
        await until_sent(db, row_id)
    assert shown == [Delivery("edit", f"{row_id}.0", target, "Forgotten.", ())]


async def test_recovery_resends_local_chunks_and_makes_telegram_ones_uncertain(
    db: Database,
) -> None:
    telegram = await outbox.enqueue_reply(db, 5, "to telegram")
    local = await outbox.enqueue_reply(db, LOCAL_CHAT_ID, "to the terminal")
    for chat, row_id in ((5, telegram), (LOCAL_CHAT_ID, local)):
        assert await sending.mark_in_flight(db, chat, row_id, 0) == 1
    recovered = await outbox.recover_in_flight(db, None, redeliver=LOCAL_CHATS)
    assert [r.id for r in recovered] == [telegram]
    assert (await row(db, telegram))["status"] == "uncertain"
    again = await row(db, local)
    assert again["status"] == "sending" and again["chunk_in_flight"] is None
    assert [r.id for r in await outbox.next_pending(db, LOCAL_CHAT_ID)] == [local]
    # without a redelivered range every chat's chunk is uncertain, as before
    assert await sending.mark_in_flight(db, LOCAL_CHAT_ID, local, 0) == 2
    assert [r.id for r in await outbox.recover_in_flight(db, None)] == [local]
