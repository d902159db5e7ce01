"""The inbox and outbox stores against a real PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors.agent.turn import TurnReply
from actors.chat.store import SqlChatStore
from actors.queues import inbox, outbox, sending
from runtime import db as dbmod
from runtime import errors


def _msg(update_id: int, chat_id: int, text: str = "hi") -> dict[str, object]:
    return {
        "update_id": update_id,
        "message": {
            "message_id": update_id,
            "date": 1,
            "chat": {"id": chat_id, "type": "private"},
            "text": text,
        },
    }


async def _insert(db: dbmod.Database, update_id: int, chat_id: int) -> int:
    row_id = await inbox.insert_update(
        db, f"update:{update_id}", update_id, chat_id, "message", _msg(update_id, chat_id)
    )
    assert row_id is not None
    return row_id


# --- inbox -------------------------------------------------------------------------------------


async def test_insert_roundtrip_and_duplicate_key(db: dbmod.Database) -> None:
    payload = _msg(1, 42, "héllo 👋")
    row_id = await inbox.insert_update(db, "update:1", 1, 42, "message", payload)
    assert isinstance(row_id, int)
    assert await inbox.insert_update(db, "update:1", 1, 42, "message", payload) is None
    assert await db.fetchval("SELECT count(*) FROM inbox") == 1
    row = await inbox.get(db, 42, row_id)
    assert row is not None
    assert row == await inbox.get_by_key(db, 42, "update:1")
    assert (row.update_key, row.update_id, row.chat_id, row.kind) == ("update:1", 1, 42, "message")
    assert row.payload == payload
    assert (row.status, row.attempts, row.last_error, row.processed_at) == (
        "pending",
        0,
        None,
        None,
    )


async def test_payload_jsonb_hostile_strings_are_made_storable(db: dbmod.Database) -> None:
    payload = {"update_id": 2, "a\x00b": ["nul\x00here", "lone \ud800 surrogate"], "n": 1.5}
    row_id = await inbox.insert_update(db, "update:2", 2, 1, "message", payload)
    assert row_id is not None
    row = await inbox.get(db, 1, row_id)
    assert row is not None
    assert row.payload == {
        "update_id": 2,
        "a\ufffdb": ["nul\ufffdhere", "lone \ufffd surrogate"],
        "n": 1.5,
    }


@pytest.mark.parametrize(
    ("update_id", "chat_id", "payload"),
    [
        (2**63, 1, {}),
        (1, -(2**63) - 1, {}),
        (1, 1, {"x": float("nan")}),
        (1, 1, {"x": float("inf")}),
        (1, 1, {"x": object()}),
    ],
)
async def test_unstorable_values_raise_value_error_without_io(
    db: dbmod.Database, update_id: int, chat_id: int, payload: dict[str, object]
) -> None:
    with pytest.raises(ValueError):
        await inbox.insert_update(db, "update:x", update_id, chat_id, "message", payload)
    assert await db.fetchval("SELECT count(*) FROM inbox") == 0


async def test_too_deep_payload_is_rejected(db: dbmod.Database) -> None:
    deep: object = 1
    for _ in range(inbox.MAX_PAYLOAD_DEPTH + 5):
        deep = [deep]
    with pytest.raises(ValueError, match="nested"):
        await inbox.insert_update(db, "update:x", 1, 1, "message", {"x": deep})


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(codec=None), max_size=8)
    | st.sampled_from(["\x00", "a\ud800b", "\\u0000", "[{", "\udfff"]),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.text(max_size=6) | st.sampled_from(["\x00k", "k\udc00"]), children, max_size=4
        )
    ),
    max_leaves=30,
)


@given(payload=st.dictionaries(st.text(max_size=6), _json_values, max_size=5))
def test_encode_payload_fast_path_matches_the_cleaning_walk(payload: dict[str, Any]) -> None:
    text = inbox.encode_payload(payload)
    assert text == json.dumps(inbox._clean(payload, 0), ensure_ascii=False, allow_nan=False)


def test_encode_payload_depth_limit_is_exact() -> None:
    def nested(levels: int, leaf: Any) -> Any:
        for _ in range(levels):
            leaf = [leaf]
        return leaf

    # a value inside MAX_PAYLOAD_DEPTH containers (the payload itself is the first) is fine
    inbox.encode_payload({"x": nested(inbox.MAX_PAYLOAD_DEPTH - 1, 1)})
    inbox.encode_payload({"x": nested(inbox.MAX_PAYLOAD_DEPTH - 1, [])})
    with pytest.raises(ValueError, match="nested"):
        inbox.encode_payload({"x": nested(inbox.MAX_PAYLOAD_DEPTH, 1)})
    # many containers side by side are not deep
    wide = {"x": [[i] for i in range(500)]}
    assert json.loads(inbox.encode_payload(wide)) == wide


async def test_pending_for_chat_in_order_and_open_chats(db: dbmod.Database) -> None:
    a1 = await _insert(db, 10, 100)
    b1 = await _insert(db, 11, 200)
    a2 = await _insert(db, 12, 100)
    a3 = await _insert(db, 13, 100)
    await inbox.insert_update(db, "update:14", 14, None, "message", {"update_id": 14})
    assert [r.id for r in await inbox.pending_for_chat(db, 100)] == [a1, a2, a3]
    assert [r.id for r in await inbox.pending_for_chat(db, 100, limit=2)] == [a1, a2]
    assert await inbox.open_chats(db) == [100, 200]

    await inbox.mark_processing(db, 100, [a1])
    await inbox.mark_done(db, 100, [a1])
    await inbox.mark_skipped(db, 100, [a2], "edited away")
    await inbox.mark_processing(db, 100, [a3])
    assert await inbox.mark_failed(db, 100, a3, "boom") == 1
    # failed rows stay open (retried); done/skipped rows are gone from the queue
    assert [r.id for r in await inbox.pending_for_chat(db, 100)] == [a3]
    await inbox.mark_done(db, 200, [b1])
    assert await inbox.open_chats(db) == [100]
    await inbox.mark_done(db, 100, [a3])
    assert await inbox.open_chats(db) == []
    assert await inbox.pending_for_chat(db, 100) == []


async def test_status_transitions_and_attempts(db: dbmod.Database) -> None:
    row_id = await _insert(db, 20, 1)
    assert await inbox.mark_processing(db, 1, [row_id, row_id]) == 1
    assert await inbox.mark_failed(db, 1, row_id, "first") == 1
    # claiming charges nothing: only the row's own failures count
    assert await inbox.mark_processing(db, 1, [row_id]) == 1
    assert await inbox.mark_processing(db, 1, [row_id]) == 1
    assert await inbox.mark_failed(db, 1, row_id, "x" * 5000) == 2
    row = await inbox.get(db, 1, row_id)
    assert row is not None
    assert (row.status, row.attempts, row.crashes) == ("failed", 2, 0)
    assert row.last_error is not None and len(row.last_error) == inbox.MAX_ERROR_CHARS

    assert await inbox.mark_done(db, 1, [row_id]) == 1
    row = await inbox.get(db, 1, row_id)
    assert row is not None
    assert (row.status, row.last_error) == ("done", None)
    assert row.processed_at is not None
    # final rows are not resurrected or re-labelled
    assert await inbox.mark_processing(db, 1, [row_id]) == 0
    assert await inbox.mark_failed(db, 1, row_id, "late") is None
    assert await inbox.mark_skipped(db, 1, [row_id], "late") == 0
    assert await inbox.mark_done(db, 1, [row_id]) == 0
    row = await inbox.get(db, 1, row_id)
    assert row is not None and row.status == "done"


async def test_mark_skipped_keeps_reason(db: dbmod.Database) -> None:
    row_id = await _insert(db, 30, 1)
    assert await inbox.mark_skipped(db, 1, [row_id], "poison: 5 attempts") == 1
    row = await inbox.get(db, 1, row_id)
    assert row is not None
    assert (row.status, row.last_error) == ("skipped", "poison: 5 attempts")
    assert row.processed_at is not None


async def test_mark_done_inside_a_transaction_rolls_back(db: dbmod.Database) -> None:
    row_id = await _insert(db, 40, 1)
    with pytest.raises(RuntimeError):
        async with db.transaction() as conn:
            await inbox.mark_done(conn, 1, [row_id])
            raise RuntimeError("crash before commit")
    row = await inbox.get(db, 1, row_id)
    assert row is not None and row.status == "pending"


# --- outbox ------------------------------------------------------------------------------------


async def test_enqueue_and_next_pending_in_order(db: dbmod.Database) -> None:
    o1 = await outbox.enqueue_reply(db, 1, "first", "HTML", 5, [11, 12])
    o2 = await outbox.enqueue_reply(db, 2, "other chat")
    o3 = await outbox.enqueue_reply(db, 1, "second")
    rows = await outbox.next_pending(db, 1)
    assert [r.id for r in rows] == [o1, o3]
    first = rows[0]
    assert (first.text, first.parse_mode, first.reply_to_message_id) == ("first", "HTML", 5)
    assert first.inbox_ids == (11, 12)
    assert (first.status, first.attempts, first.chunks_sent) == ("pending", 0, 0)
    assert first.telegram_message_ids == ()
    assert [r.id for r in await outbox.next_pending(db, 2)] == [o2]
    assert [r.id for r in await outbox.next_pending(db, 1, limit=1)] == [o1]
    assert await outbox.chats_with_pending(db) == [1, 2]


async def test_parse_mode_is_checked_by_the_schema(db: dbmod.Database) -> None:
    with pytest.raises(errors.IntegrityViolation):
        await outbox.enqueue_reply(db, 1, "x", "Markdown")  # type: ignore[arg-type]


async def test_chunks_resume_point_in_flight_mark_and_sent(db: dbmod.Database) -> None:
    row_id = await outbox.enqueue_reply(db, 1, "long reply")
    assert await sending.mark_in_flight(db, 1, row_id, 0) == 1
    assert (await outbox.get(db, 1, row_id)).chunk_in_flight == 0  # type: ignore[union-attr]
    assert await sending.record_chunk_sent(db, 1, row_id, 0, 1001) is True
    assert await sending.record_chunk_sent(db, 1, row_id, 0, 1001) is True  # a retry: no change
    assert await sending.mark_in_flight(db, 1, row_id, 1) == 2
    assert await sending.record_chunk_sent(db, 1, row_id, 1, 1002) is True
    # crash here: the row is still open, nothing in flight, and says where to resume
    (row,) = await outbox.next_pending(db, 1)
    assert (row.status, row.chunks_sent, row.telegram_message_ids) == ("sending", 2, (1001, 1002))
    assert row.chunk_in_flight is None
    assert await sending.mark_in_flight(db, 1, row_id, 2) == 3
    assert await sending.release_in_flight(db, 1, row_id, 2, "502 Bad Gateway") is True
    assert await sending.release_in_flight(db, 1, row_id, 2, "again") is False  # nothing marked
    assert await sending.mark_in_flight(db, 1, row_id, 2) == 4
    assert await sending.record_chunk_sent(db, 1, row_id, 2, 1003, last=True) is True
    row2 = await outbox.get(db, 1, row_id)
    assert row2 is not None
    assert (row2.status, row2.attempts, row2.chunks_sent, row2.chunk_in_flight) == (
        "sent",
        4,
        3,
        None,
    )
    assert row2.telegram_message_ids == (1001, 1002, 1003)
    assert row2.sent_at is not None and row2.last_error is None
    assert await outbox.next_pending(db, 1) == []
    assert await outbox.chats_with_pending(db) == []
    # final rows stay final
    assert await sending.mark_in_flight(db, 1, row_id, 3) is None
    assert await sending.record_chunk_sent(db, 1, row_id, 3, 9) is False
    assert await sending.mark_failed(db, 1, row_id, "late") is False


async def test_recover_in_flight_makes_interrupted_rows_uncertain(db: dbmod.Database) -> None:
    cut = await outbox.enqueue_reply(db, 1, "cut")
    mine = await outbox.enqueue_reply(db, 2, "mine")
    idle = await outbox.enqueue_reply(db, 3, "not started")
    await sending.mark_in_flight(db, 1, cut, 0)
    await sending.mark_in_flight(db, 2, mine, 0)
    assert [r.id for r in await outbox.recover_in_flight(db, [mine])] == [mine]
    [row] = await outbox.recover_in_flight(db)
    assert (row.id, row.status, row.chunk_in_flight) == (cut, "uncertain", 0)
    assert "chunk 1 was in flight" in (row.last_error or "")
    assert await outbox.recover_in_flight(db) == []
    assert [[r.id for r in await outbox.next_pending(db, c)] for c in (1, 2, 3)] == [[], [], [idle]]


async def test_failed_and_uncertain_are_final_and_not_resent(db: dbmod.Database) -> None:
    failed = await outbox.enqueue_reply(db, 1, "a")
    uncertain = await outbox.enqueue_reply(db, 1, "b")
    await sending.mark_sending(db, 1, failed)
    assert await sending.mark_failed(db, 1, failed, "403 Forbidden: bot was blocked") is True
    await sending.mark_sending(db, 1, uncertain)
    assert await sending.mark_uncertain(db, 1, uncertain, "read timeout after send") is True
    assert await outbox.next_pending(db, 1) == []
    rows = {r["id"]: r for r in await db.fetch("SELECT id, status, last_error FROM outbox")}
    assert rows[failed]["status"] == "failed"
    assert rows[uncertain]["status"] == "uncertain"
    assert rows[uncertain]["last_error"] == "read timeout after send"
    assert await sending.mark_sent(db, 1, uncertain) is False


async def test_commit_turn_claims_the_row_when_the_chat_has_no_other_open_row(
    db: dbmod.Database,
) -> None:
    a = await _insert(db, 60, 9)
    alone = await outbox.commit_turn(db, chat_id=9, text="r1", inbox_ids=[a], claim=True)
    assert (alone.status, alone.attempts, alone.chunk_in_flight) == ("sending", 1, 0)
    assert await outbox.get(db, 9, alone.id) == alone
    b = await _insert(db, 61, 9)
    behind = await outbox.commit_turn(db, chat_id=9, text="r2", inbox_ids=[b], claim=True)
    assert (behind.status, behind.attempts) == ("pending", 0)  # r1 is still open: after it
    assert behind.chunk_in_flight is None
    await sending.mark_sent(db, 9, alone.id)
    other = await outbox.commit_turn(db, chat_id=10, text="x", inbox_ids=[], claim=True)
    assert other.status == "sending"  # another chat's open rows do not count


async def test_commit_turn_is_atomic(db: dbmod.Database) -> None:
    a = await _insert(db, 50, 7)
    b = await _insert(db, 51, 7)
    new = await outbox.commit_turn(db, chat_id=7, text="reply", inbox_ids=[a, b])
    row = await outbox.get(db, 7, new.id)
    assert row is not None and row.inbox_ids == (a, b) and row == new
    assert row.status == "pending" and row.attempts == 0  # not claimed unless asked
    assert await inbox.pending_for_chat(db, 7) == []

    c = await _insert(db, 52, 7)
    with pytest.raises(errors.IntegrityViolation):
        await outbox.commit_turn(
            db,
            chat_id=7,
            text="bad",
            inbox_ids=[c],
            parse_mode="nope",  # type: ignore[arg-type]
        )
    # the reply was not stored, so the inbox row is still open
    assert [r.id for r in await inbox.pending_for_chat(db, 7)] == [c]
    assert await db.fetchval("SELECT count(*) FROM outbox") == 1


async def test_enqueue_and_mark_done_in_a_caller_transaction(db: dbmod.Database) -> None:
    a = await _insert(db, 60, 8)
    async with db.transaction() as conn:
        await outbox.enqueue_reply(conn, 8, "r", inbox_ids=[a])
        await inbox.mark_done(conn, 8, [a])
    assert await inbox.pending_for_chat(db, 8) == []
    assert len(await outbox.next_pending(db, 8)) == 1


async def test_take_open_claims_the_first_row_only(db: dbmod.Database) -> None:
    a, b, c = [await _insert(db, 70 + i, 9) for i in range(3)]
    other = await _insert(db, 80, 10)
    rows, claimed = await inbox.take_open(db, 9, 0, 3)
    assert [r.id for r in rows] == [a, b, c] and claimed == a
    assert [r.status for r in rows] == ["pending"] * 3  # as read, before the claim
    stored = {r.id: r for r in await inbox.pending_for_chat(db, 9)}
    assert (stored[a].status, stored[a].attempts) == ("processing", 0)  # a claim is no charge
    assert (stored[b].status, stored[b].attempts) == ("pending", 0)  # claimed when taken
    rows, claimed = await inbox.take_open(db, 9, a, 3)
    assert [r.id for r in rows] == [b, c] and claimed == b
    await inbox.mark_done(db, 9, [a, b, c])
    assert await inbox.take_open(db, 9, 0, 3) == ([], None)
    # a row out of attempts is returned but not claimed (the actor gives up on it)
    await db.execute("UPDATE inbox SET attempts = 3 WHERE id = $1", other)
    rows, claimed = await inbox.take_open(db, 10, 0, 3)
    assert [(r.id, r.attempts) for r in rows] == [(other, 3)] and claimed is None
    assert (await inbox.get(db, 10, other)).attempts == 3  # type: ignore[union-attr]
    # and so is a row in its turn at MAX_CRASHES crashes
    crashed = await _insert(db, 81, 12)
    await db.execute("UPDATE inbox SET crashes = $2 WHERE id = $1", crashed, inbox.MAX_CRASHES)
    rows, claimed = await inbox.take_open(db, 12, 0, 3)
    assert [(r.id, r.crashes) for r in rows] == [(crashed, inbox.MAX_CRASHES)] and claimed is None


async def test_recover_crashed_counts_a_crash_not_an_attempt(db: dbmod.Database) -> None:
    a, b = await _insert(db, 83, 13), await _insert(db, 84, 13)
    failed = await _insert(db, 85, 14)
    _, claimed = await inbox.take_open(db, 13, 0, 3)  # then the process dies
    assert claimed == a
    await inbox.mark_processing(db, 14, [failed])
    await inbox.mark_failed(db, 14, failed, "its own exception")
    assert await inbox.recover_crashed(db) == [a]  # only the row in hand at the crash
    rows = {r.id: r for r in await inbox.pending_for_chat(db, 13)}
    assert (rows[a].status, rows[a].attempts, rows[a].crashes) == ("pending", 0, 1)
    assert (rows[b].status, rows[b].crashes) == ("pending", 0)
    stored = await inbox.get(db, 14, failed)
    assert stored is not None and (stored.status, stored.attempts, stored.crashes) == (
        "failed",
        1,
        0,
    )
    assert await inbox.recover_crashed(db) == []  # a second look finds nothing


async def test_commit_turn_in_a_caller_transaction_rolls_back(db: dbmod.Database) -> None:
    a = await _insert(db, 90, 11)
    with pytest.raises(RuntimeError):
        async with db.transaction() as conn:
            await outbox.commit_turn(conn, chat_id=11, text="r", inbox_ids=[a, a])
            raise RuntimeError("the persist hook failed after")
    assert [r.id for r in await inbox.pending_for_chat(db, 11)] == [a]
    assert await db.fetchval("SELECT count(*) FROM outbox") == 0
    await outbox.commit_turn(db, chat_id=11, text="r", inbox_ids=[a, a])
    assert await inbox.pending_for_chat(db, 11) == []
    [row] = await outbox.next_pending(db, 11)
    assert row.inbox_ids == (a,)


# --- SqlChatStore.commit: the persist hook's writes in the commit statement ---------------------


class CountingDb:
    """A Database whose transactions and one-shot statements are counted."""

    def __init__(self, inner: dbmod.Database) -> None:
        self.inner, self.transactions, self.statements = inner, 0, 0

    def transaction(self) -> Any:
        self.transactions += 1
        return self.inner.transaction()

    def __getattr__(self, name: str) -> Any:
        self.statements += 1
        return getattr(self.inner, name)


def _note(text: str) -> Any:
    async def persist(conn: Any) -> None:
        await conn.execute(
            "INSERT INTO chat_messages (chat_id, role, content, created_at) "
            "VALUES ($1, 'assistant', $2, now())",
            21,
            text,
        )

    return persist


async def test_persist_writes_fused_into_the_commit_statement(db: dbmod.Database) -> None:
    spy = CountingDb(db)
    store = SqlChatStore(spy)  # type: ignore[arg-type]
    a = await _insert(db, 100, 21)
    await store.commit(21, TurnReply("hello", persist=_note("kept")), [a], None)
    assert (spy.transactions, spy.statements) == (0, 1)  # one round trip
    assert await db.fetchval("SELECT content FROM chat_messages WHERE chat_id = 21") == "kept"
    assert await inbox.pending_for_chat(db, 21) == []
    [row] = await outbox.next_pending(db, 21)
    assert row.text == "hello" and row.inbox_ids == (a,)


async def test_fused_commit_is_all_or_nothing(db: dbmod.Database) -> None:
    async def bad(conn: Any) -> None:
        await _note("lost")(conn)
        await conn.execute(
            "INSERT INTO outbox (chat_id, text, parse_mode) VALUES ($1, 'x', $2)", 21, "nope"
        )

    b = await _insert(db, 101, 21)
    with pytest.raises(errors.IntegrityViolation):
        await SqlChatStore(db).commit(21, TurnReply("reply", persist=bad), [b], None)
    assert [r.id for r in await inbox.pending_for_chat(db, 21)] == [b]
    assert await db.fetchval("SELECT count(*) FROM outbox") == 0
    assert await db.fetchval("SELECT count(*) FROM chat_messages") == 0


async def test_persist_needing_results_runs_in_a_transaction(db: dbmod.Database) -> None:
    async def reads(conn: Any) -> None:
        n = await conn.fetchval("SELECT count(*) FROM chat_messages")
        await _note(f"after {n}")(conn)

    spy = CountingDb(db)
    c = await _insert(db, 102, 21)
    await SqlChatStore(spy).commit(21, TurnReply("r", persist=reads), [c], None)  # type: ignore[arg-type]
    assert spy.transactions == 1
    assert await db.fetchval("SELECT content FROM chat_messages") == "after 0"
    assert await inbox.pending_for_chat(db, 21) == []


async def test_claims_commit_asynchronously_only_on_their_own(db: dbmod.Database) -> None:
    assert inbox.async_commit(db) == inbox.ASYNC_COMMIT
    a = await _insert(db, 110, 22)
    async with db.transaction() as conn:
        assert inbox.async_commit(conn) == "NULL"
        _, claimed = await inbox.take_open(conn, 22, 0, 3)
        # the caller's transaction keeps its synchronous commit
        assert await conn.fetchval("SHOW synchronous_commit") == "on"
    assert claimed == a
    await inbox.take_open(db, 22, a, 3)  # on the pool: its own transaction
    assert await db.fetchval("SHOW synchronous_commit") == "on"  # nothing leaks to a session


async def test_release_hands_claimed_rows_back_uncharged(db: dbmod.Database) -> None:
    a = await _insert(db, 120, 30)
    _, claimed = await inbox.take_open(db, 30, 0, 3)
    assert claimed == a
    assert await inbox.release(db, 30, [a], "model unavailable: LLMOverloaded") == 1
    row = await inbox.get(db, 30, a)
    assert row is not None and (row.status, row.attempts, row.crashes) == ("pending", 0, 0)
    assert row.last_error == "model unavailable: LLMOverloaded"
    await inbox.mark_done(db, 30, [a])
    assert await inbox.release(db, 30, [a], "late") == 0  # final rows stay final


async def test_a_notice_is_not_repeated_while_it_is_the_chats_latest_reply(
    db: dbmod.Database,
) -> None:
    first = await outbox.enqueue_notice(db, 31, "away")
    assert first is not None and (first.status, first.chunk_in_flight) == ("sending", 0)
    assert await outbox.enqueue_notice(db, 31, "away") is None
    assert await outbox.enqueue_notice(db, 32, "away") is not None  # another chat's own
    await outbox.commit_turn(db, chat_id=31, text="an answer", inbox_ids=[])
    again = await outbox.enqueue_notice(db, 31, "away")
    assert again is not None and again.status == "pending"  # behind the open rows, in order
    assert [r.text for r in await outbox.next_pending(db, 31)] == ["away", "an answer", "away"]
