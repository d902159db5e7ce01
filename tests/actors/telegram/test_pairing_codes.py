"""Pairing with several processes on one database (:mod:`actors.telegram.pairing_codes`):
a code announced by one process pairs through another, once, and the first pairing closes
every process's code. Two :class:`ChatAccess` on the real database stand for two processes."""

from __future__ import annotations

from actors.telegram.pairing import PAIRED, Attempt, ChatAccess
from actors.telegram.pairing_codes import SqlPairingCodes, code_digest
from runtime import db as dbmod

OWNER, STRANGER = 7001, 7002


def process(db: dbmod.Database, name: str, now: list[float]) -> ChatAccess:
    return ChatAccess(
        db,
        frozenset(),
        lambda chat: None,
        lambda chat, row: None,
        clock=lambda: now[0],
        shared=SqlPairingCodes(db, name),
    )


async def opened(access: ChatAccess) -> str:
    code = access.open_pairing()
    assert access.shared is not None
    await access.shared.publish(code.code, access.ttl)
    return code.code


async def test_a_code_pairs_through_another_process_once_and_closes_every_code(
    db: dbmod.Database,
) -> None:
    now = [0.0]
    a, b = process(db, "host-a", now), process(db, "host-b", now)
    code_a, code_b = await opened(a), await opened(b)
    stored = {bytes(r["digest"]) for r in await db.fetch("SELECT digest FROM pairing_codes")}
    assert stored == {code_digest(code_a), code_digest(code_b)}  # hashes, never the codes
    # the owner's /start with A's code reaches B (a load balancer): it pairs there
    assert await b.try_code(Attempt(OWNER, 1, code_a, now[0]))
    assert OWNER in b and b.code is not None and b.code.wrong == {}  # not counted as wrong
    assert await db.fetchval("SELECT count(*) FROM pairing_codes") == 0  # every code closed
    # B's own code no longer pairs anyone, nor does A's (through A, or again through B)
    assert not await a.try_code(Attempt(STRANGER, 2, code_b, now[0]))
    assert not await a.try_code(Attempt(STRANGER, 2, code_a, now[0]))
    assert not await b.try_code(Attempt(STRANGER, 2, code_a, now[0]))
    rows = await db.fetch("SELECT chat_id FROM allowed_chats")
    assert [r["chat_id"] for r in rows] == [OWNER]
    texts = await db.fetch("SELECT chat_id, text FROM outbox")
    assert [(r["chat_id"], r["text"]) for r in texts] == [(OWNER, PAIRED)]
    await a.refresh()  # A learns of the pairing: its own code is closed too
    assert a.code is not None and a.code.state(now[0]) == "used" and OWNER in a


async def test_a_wrong_code_is_wrong_in_every_process(db: dbmod.Database) -> None:
    now = [0.0]
    a, b = process(db, "host-a", now), process(db, "host-b", now)
    await opened(a)
    code_b = await opened(b)
    assert not await a.try_code(Attempt(STRANGER, 2, "WRONGWRONG", now[0]))
    assert a.code is not None and a.code.wrong == {STRANGER: 1}
    assert await db.fetchval("SELECT count(*) FROM pairing_codes") == 2  # both still open
    now[0] = 601.0  # B's code expired ten minutes after it was made (by B's own clock)
    assert not await b.try_code(Attempt(OWNER, 1, code_b, now[0]))
    assert await db.fetchval("SELECT count(*) FROM allowed_chats") == 0
