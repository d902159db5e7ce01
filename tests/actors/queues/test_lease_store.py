"""Chat and named leases on the real database: one holder at a time, takeover after expiry
with what the dead run left recovered, renewals and releases only by the holder's run."""

from __future__ import annotations

import pytest
import trio

from actors.queues import erased, inbox, lease_store, outbox, sending
from actors.queues.lease_store import SqlLeases
from runtime.db import Database
from runtime.errors import DatabaseError


def leases(db: Database, owner: str, run: str = "run1") -> SqlLeases:
    return SqlLeases(db, owner, f"{owner}/{run}")


async def add_update(db: Database, chat_id: int, update_id: int) -> int:
    payload = {"update_id": update_id, "message": {"chat": {"id": chat_id}, "text": "hi"}}
    row_id = await inbox.insert_update(
        db, f"update:{update_id}", update_id, chat_id, "message", payload
    )
    assert row_id is not None
    return row_id


async def test_one_holder_until_expiry_then_takeover_recovers(db: Database) -> None:
    a, b = leases(db, "a"), leases(db, "b")
    first = await a.acquire(7, ttl=0.5)
    assert (first.got, first.fresh, first.holder) == (True, True, "a")
    refused = await b.acquire(7, ttl=0.5)
    assert (refused.got, refused.holder) == (False, "a")
    renewed = await a.acquire(7, ttl=0.5)  # its own: a renewal, nothing recovered
    assert (renewed.got, renewed.fresh) == (True, False)
    # "a" dies with a row in hand and a chunk in flight
    in_hand = await add_update(db, 7, 1)
    assert await inbox.mark_processing(db, 7, [in_hand]) == 1
    reply = await outbox.enqueue_reply(db, 7, "half sent")
    assert await sending.mark_in_flight(db, 7, reply, 0) == 1
    await add_update(db, 8, 2)  # another chat's rows are not touched
    assert (await b.acquire(7, ttl=0.5)).got is False
    await trio.sleep(0.6)
    taken = await b.acquire(7, ttl=5)
    assert (taken.got, taken.fresh, taken.requeued, taken.unsure) == (
        True,
        True,
        (in_hand,),
        (reply,),
    )
    row = await inbox.get(db, 7, in_hand)
    assert row is not None and (row.status, row.crashes, row.attempts) == ("pending", 1, 0)
    sent = await outbox.get(db, 7, reply)
    assert sent is not None and sent.status == "uncertain"
    assert (await a.acquire(7, ttl=5)).got is False  # the old run cannot come back
    # "a" renewing or releasing what it lost changes nothing
    assert await a.renew([7], ttl=5) == set()
    assert await a.release([7]) == 0
    assert await db.fetchval("SELECT owner FROM chat_leases WHERE chat_id = 7") == "b"


async def test_a_restart_under_the_same_name_takes_its_chats_back_at_once(db: Database) -> None:
    old, new = leases(db, "host:8080", "run1"), leases(db, "host:8080", "run2")
    assert (await old.acquire(3, ttl=60)).got
    row_id = await add_update(db, 3, 1)
    await inbox.mark_processing(db, 3, [row_id])
    back = await new.acquire(3, ttl=60)  # not expired, but the same process name
    assert (back.got, back.fresh, back.requeued) == (True, True, (row_id,))
    assert await old.renew([3], ttl=60) == set()  # the dead run's renewals find nothing
    assert await new.renew([3, 4], ttl=60) == {3}


async def test_racing_processes_one_wins(db: Database) -> None:
    racers = [leases(db, f"p{i}") for i in range(8)]
    won: list[str] = []

    async def race(sql: SqlLeases) -> None:
        if (await sql.acquire(11, ttl=30)).got:
            won.append(sql.owner)

    async with trio.open_nursery() as nursery:
        for sql in racers:
            nursery.start_soon(race, sql)
    assert len(won) == 1
    assert await db.fetchval("SELECT owner FROM chat_leases WHERE chat_id = 11") == won[0]


async def test_the_sweep_skips_chats_another_live_process_holds(db: Database) -> None:
    a, b = leases(db, "a"), leases(db, "b")
    for chat_id, update_id in ((1, 1), (2, 2), (3, 3)):
        await add_update(db, chat_id, update_id)
    await outbox.enqueue_reply(db, 4, "to send")
    await a.acquire(1, ttl=30)
    await b.acquire(2, ttl=30)
    assert sorted(await lease_store.open_work(db, "a")) == [1, 3, 4]
    assert sorted(await lease_store.open_work(db, "b")) == [2, 3, 4]
    assert await b.release([2]) == 1
    assert sorted(await lease_store.open_work(db, "a")) == [1, 2, 3, 4]


async def test_a_local_chats_chunk_in_flight_is_sent_again(db: Database) -> None:
    local = SqlLeases(db, "a", "a/1", redeliver=range(900, 1000))
    reply = await outbox.enqueue_reply(db, 950, "hello")
    await sending.mark_in_flight(db, 950, reply, 0)
    taken = await local.acquire(950, ttl=30)
    assert taken.unsure == (reply,)
    row = await outbox.get(db, 950, reply)
    assert row is not None and (row.status, row.chunk_in_flight) == ("sending", None)


async def test_named_leases_one_process_at_a_time(db: Database) -> None:
    a, b = leases(db, "a"), leases(db, "b")
    assert await a.acquire_named("poller", ttl=0.5)
    assert not await b.acquire_named("poller", ttl=0.5)
    assert await a.acquire_named("poller", ttl=0.5)  # renewal
    await trio.sleep(0.6)
    assert await b.acquire_named("poller", ttl=30)
    assert not await a.acquire_named("poller", ttl=30)
    await a.release_named("poller")  # not a's any more: nothing happens
    assert await db.fetchval("SELECT owner FROM process_leases WHERE name = 'poller'") == "b"
    await b.release_named("poller")
    assert await a.acquire_named("poller", ttl=30)


async def test_a_turn_commits_only_while_its_run_holds_the_lease(db: Database) -> None:
    a, b = leases(db, "a"), leases(db, "b")
    assert (await a.acquire(21, ttl=0.3)).got
    first = await add_update(db, 21, 1)
    row = await outbox.commit_turn(
        db, chat_id=21, text="one", inbox_ids=[first], lease=a.incarnation
    )
    assert row.text == "one"
    second = await add_update(db, 21, 2)
    await inbox.mark_processing(db, 21, [second])  # a's turn runs ... a stalls past the ttl
    await trio.sleep(0.4)
    assert (await b.acquire(21, ttl=30)).got  # b takes the chat over
    with pytest.raises(DatabaseError) as refused:
        await outbox.commit_turn(
            db, chat_id=21, text="late", inbox_ids=[second], lease=a.incarnation
        )
    assert refused.value.sqlstate == erased.ERASED_SQLSTATE
    assert erased.LEASE_LOST in str(refused.value)
    texts = await db.fetch("SELECT text FROM outbox WHERE chat_id = 21 ORDER BY id")
    assert [r["text"] for r in texts] == ["one"]  # nothing of the late turn
    late = await inbox.get(db, 21, second)
    assert late is not None and late.status == "pending"  # b's to answer
    async with db.transaction() as conn:  # the same fence in a transaction of several
        with pytest.raises(DatabaseError):
            await erased.require_lease(conn, 21, a.incarnation)
    async with db.transaction() as conn:
        await erased.require_lease(conn, 21, b.incarnation)
        await erased.require_lease(conn, 21, None)  # no leases: no fence


async def test_the_processes_serving_chats_are_counted(db: Database) -> None:
    a, b = leases(db, "a"), leases(db, "b")
    assert await a.live_processes() == 1  # itself, even before it holds a chat
    await a.acquire(1, ttl=30)
    await b.acquire(2, ttl=30)
    await b.acquire(3, ttl=30)
    assert await a.live_processes() == 2 and await b.live_processes() == 2
    await b.release([2, 3])
    assert await a.live_processes() == 1
