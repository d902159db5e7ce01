"""Callback tokens and the tap, on the real database: a token is short, scoped to its chat, acts
once and dies after 24 h; a tap runs its handler in one transaction with the token's use, the
outbox rows it queues and the inbox row's end (all or nothing); the router's immediate answer."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from actors.chat import callbacks
from actors.chat.callbacks import (
    EXPIRED,
    CallbackContext,
    Callbacks,
    CallbackTable,
    Expired,
    NotFound,
    Redeemed,
    Used,
)
from actors.queues import inbox
from actors.telegram.keyboards import Button, InlineKeyboard, callback_data_fits
from actors.telegram.types import CallbackQuery, parse_update
from runtime.db import Database

CHAT, OTHER = 7001, 7002


async def age(db: Database, chat_id: int, hours: float) -> None:
    await db.execute(
        "UPDATE callback_tokens SET created_at = now() - make_interval(secs => $2) "
        "WHERE chat_id = $1",
        chat_id,
        hours * 3600,
    )


async def test_every_token_the_code_builds_fits_in_callback_data(db: Database) -> None:
    def action(n: int) -> dict[str, Any]:
        return {"name": "forget", "pattern_id": 10**15 + n, "reason": "forgotten " * 50}

    rows = [
        [(f"Forget #{r}{c} " + "é" * 40, action(r * 10 + c)) for c in range(10)] for r in range(10)
    ]
    kb = await callbacks.keyboard(db, CHAT, rows)
    assert len(kb.buttons) == 100  # Telegram's maximum, each with its own token
    tokens = [b.callback_data for b in kb.buttons]
    assert all(t is not None and callback_data_fits(t) and len(t) == 12 for t in tokens)
    assert len(set(tokens)) == 100
    more = [await callbacks.issue(db, CHAT, {"name": "x", "blob": "y" * 5000}) for _ in range(200)]
    assert max(len(t.encode()) for t in more) <= 64
    stored = await db.fetchval(
        "SELECT action FROM callback_tokens WHERE chat_id = $1 AND token = $2", CHAT, tokens[0]
    )
    assert json.loads(stored)["pattern_id"] == 10**15  # the action stays in the database
    assert "forget" not in "".join(t for t in tokens if t)  # and nothing of it in the data


async def test_a_keyboard_keeps_url_buttons_and_refuses_a_nameless_action(db: Database) -> None:
    kb = await callbacks.keyboard(
        db, CHAT, [[("Yes", {"name": "pick"}), Button("Help", url="https://example.org/help")]]
    )
    assert kb.buttons[1] == Button("Help", url="https://example.org/help")
    assert isinstance(kb, InlineKeyboard) and kb.buttons[0].callback_data
    with pytest.raises(ValueError, match="handler name"):
        await callbacks.keyboard(db, CHAT, [[("Yes", {"choice": "yes"})]])
    assert await db.fetchval("SELECT count(*) FROM callback_tokens") == 1


async def test_a_token_acts_once_in_its_own_chat_and_dies_after_24_hours(db: Database) -> None:
    token = await callbacks.issue(db, CHAT, {"name": "pick", "choice": "yes"})
    assert await callbacks.redeem(db, OTHER, token) == NotFound()  # another chat's button
    live = await callbacks.peek(db, CHAT, token)  # changes nothing
    assert isinstance(live, Redeemed) and live.action == {"name": "pick", "choice": "yes"}
    first = await callbacks.redeem(db, CHAT, token, message_id=55)
    assert isinstance(first, Redeemed) and first.action == {"name": "pick", "choice": "yes"}
    assert await callbacks.redeem(db, CHAT, token, message_id=55) == Used()  # a double tap
    assert await callbacks.peek(db, CHAT, token) == Used()
    row = await db.fetchrow(
        "SELECT used_at, message_id FROM callback_tokens WHERE token = $1", token
    )
    assert row is not None and row["used_at"] is not None and row["message_id"] == 55
    assert await callbacks.redeem(db, CHAT, "made-up") == NotFound()

    old = await callbacks.issue(db, CHAT, {"name": "pick"})
    await age(db, CHAT, 23.9)
    assert isinstance(await callbacks.peek(db, CHAT, old), Redeemed)  # still live at 23.9 h
    await age(db, CHAT, 24.1)
    assert await callbacks.peek(db, CHAT, old) == Expired()
    assert await callbacks.redeem(db, CHAT, old) == Expired()
    assert await db.fetchval("SELECT used_at FROM callback_tokens WHERE token = $1", old) is None


async def test_concurrent_redeems_of_one_token_act_once(db: Database) -> None:
    token = await callbacks.issue(db, CHAT, {"name": "pick"})
    outcomes: list[Any] = []

    async def tap() -> None:
        outcomes.append(await callbacks.redeem(db, CHAT, token))

    async with trio.open_nursery() as nursery:
        for _ in range(8):
            nursery.start_soon(tap)
    assert sum(isinstance(o, Redeemed) for o in outcomes) == 1


async def test_siblings_die_with_their_keyboard_and_old_tokens_are_purged(db: Database) -> None:
    kb = await callbacks.keyboard(db, CHAT, [[("A", {"name": "a"}), ("B", {"name": "b"})]])
    a, b = (btn.callback_data or "" for btn in kb.buttons)
    other = await callbacks.issue(db, CHAT, {"name": "c"})
    first = await callbacks.redeem(db, CHAT, a)
    assert isinstance(first, Redeemed)
    assert await callbacks.expire_keyboard(db, CHAT, first.keyboard) == 1  # B
    assert await callbacks.peek(db, CHAT, b) == Used()
    assert isinstance(await callbacks.peek(db, CHAT, other), Redeemed)  # another keyboard lives
    await age(db, CHAT, 24 * 8)
    await callbacks.issue(db, OTHER, {"name": "x"})  # another chat's issue purges nothing here
    assert await db.fetchval("SELECT count(*) FROM callback_tokens WHERE chat_id = $1", CHAT) == 3
    await callbacks.issue(db, CHAT, {"name": "x"})
    assert await db.fetchval("SELECT count(*) FROM callback_tokens WHERE chat_id = $1", CHAT) == 1


# --- the tap -----------------------------------------------------------------------------------


def query(token: str | None, query_id: str = "q1", chat_id: int = CHAT) -> CallbackQuery:
    return CallbackQuery(
        query_id, from_user_id=chat_id, message_chat_id=chat_id, message_id=90, data=token
    )


async def inbox_row(db: Database, n: int, chat_id: int = CHAT) -> int:
    payload = {
        "update_id": n,
        "callback_query": {
            "id": f"q{n}",
            "from": {"id": chat_id},
            "message": {"message_id": 90, "date": 0, "chat": {"id": chat_id, "type": "private"}},
            "data": "x",
        },
    }
    row_id = await inbox.insert_update(db, f"update:{n}", n, chat_id, "callback_query", payload)
    assert row_id is not None
    assert parse_update(payload).callback_query is not None
    return row_id


async def outbox_rows(db: Database) -> list[Any]:
    return list(
        await db.fetch(
            "SELECT kind, text, edit_message_id, reply_markup, inbox_ids FROM outbox ORDER BY id"
        )
    )


async def test_a_tap_runs_its_handler_once_with_the_rows_it_queues(db: Database) -> None:
    seen: list[CallbackContext] = []

    async def pick(tap: CallbackContext) -> None:
        seen.append(tap)
        await tap.db.execute("CREATE TABLE IF NOT EXISTS picks (choice TEXT)")
        await tap.db.execute("INSERT INTO picks VALUES ($1)", tap.action["choice"])
        again = await tap.new_keyboard([[("Undo", {"name": "undo"})]])
        await tap.edit(f"You picked {tap.action['choice']}.", keyboard=again)
        await tap.reply("Noted.")

    table = CallbackTable()
    table.register("pick", pick, answer="Got it")
    runner = Callbacks(db, table)
    table.register("undo", pick)
    choices = [("Yes", {"name": "pick", "choice": "yes"}), ("No", {"name": "pick", "choice": "no"})]
    kb = await callbacks.keyboard(db, CHAT, [choices])
    yes, no = (b.callback_data for b in kb.buttons)
    assert await runner.answer_text(CHAT, query(yes)) == "Got it"
    row = await inbox_row(db, 1)
    assert await runner.tap(CHAT, row, query(yes)) is True
    # the router's answer may come after the chat actor acted: this tap is still answered as live
    assert await runner.answer_text(CHAT, query(yes)) == "Got it"
    assert len(seen) == 1 and (seen[0].message_id, seen[0].user_id) == (90, CHAT)
    rows = await outbox_rows(db)
    assert [(r["kind"], r["text"], r["edit_message_id"]) for r in rows] == [
        ("edit", "You picked yes.", 90),
        ("message", "Noted.", None),
    ]
    undo = json.loads(rows[0]["reply_markup"])["inline_keyboard"][0][0]
    assert undo["text"] == "Undo"  # the new keyboard's button is live: no text, it is registered
    assert await runner.answer_text(CHAT, query(undo["callback_data"])) is None
    assert rows[0]["inbox_ids"] == [row] and (await inbox.get(db, CHAT, row)).status == "done"  # type: ignore[union-attr]
    # the same button again, and its sibling on the edited message: nothing happens
    for n, token in ((2, yes), (3, no)):
        assert await runner.answer_text(CHAT, query(token, f"q{n}")) == EXPIRED
        again = await inbox_row(db, n)
        assert await runner.tap(CHAT, again, query(token, f"q{n}")) is False
        assert (await inbox.get(db, CHAT, again)).status == "skipped"  # type: ignore[union-attr]
    assert len(seen) == 1 and len(await outbox_rows(db)) == 2
    assert await db.fetchval("SELECT count(*) FROM picks") == 1


async def test_a_foreign_expired_or_unhandled_button_changes_nothing(db: Database) -> None:
    calls: list[str] = []

    async def pick(tap: CallbackContext) -> None:
        calls.append(tap.action["name"])
        await tap.edit("changed")

    table = CallbackTable()
    table.register("pick", pick)
    runner = Callbacks(db, table)
    theirs = await callbacks.issue(db, OTHER, {"name": "pick"})
    stale = await callbacks.issue(db, CHAT, {"name": "pick"})
    await age(db, CHAT, 25)
    unknown = await callbacks.issue(db, CHAT, {"name": "retired_command"})
    for n, token in enumerate((theirs, stale, unknown, None), start=1):
        assert await runner.answer_text(CHAT, query(token)) == (EXPIRED if token else None)
        row = await inbox_row(db, n)
        assert await runner.tap(CHAT, row, query(token)) is False
        assert (await inbox.get(db, CHAT, row)).status == "skipped"  # type: ignore[union-attr]
    assert calls == [] and await outbox_rows(db) == []
    live = await callbacks.peek(db, OTHER, theirs)
    assert isinstance(live, Redeemed)  # the other chat's button still works there


async def test_a_failing_handler_leaves_the_token_unused_for_the_retry(db: Database) -> None:
    attempts: list[int] = []

    async def flaky(tap: CallbackContext) -> None:
        attempts.append(1)
        await tap.edit("half done")
        if len(attempts) == 1:
            raise RuntimeError("boom")

    table = CallbackTable()
    table.register("flaky", flaky)
    runner = Callbacks(db, table)
    token = await callbacks.issue(db, CHAT, {"name": "flaky"})
    row = await inbox_row(db, 1)
    await inbox.mark_processing(db, CHAT, [row])
    with pytest.raises(RuntimeError):
        await runner.tap(CHAT, row, query(token))
    assert await outbox_rows(db) == []  # rolled back: no edit, token unused, row open
    assert isinstance(await callbacks.peek(db, CHAT, token), Redeemed)
    assert (await inbox.get(db, CHAT, row)).status == "processing"  # type: ignore[union-attr]
    assert await runner.tap(CHAT, row, query(token)) is True  # the retry acts, once
    assert [r["text"] for r in await outbox_rows(db)] == ["half done"]


def test_the_table_refuses_a_second_registration_and_a_long_answer() -> None:
    table = CallbackTable()

    async def handler(tap: CallbackContext) -> None:
        return None

    table.register("forget", handler, answer="Forgotten")
    assert "forget" in table and table.handler("forget") is handler
    assert table.answer("forget") == "Forgotten" and table.handler("nope") is None
    with pytest.raises(ValueError, match="twice"):
        table.register("forget", handler)
    with pytest.raises(ValueError, match="1-200"):
        table.register("keep", handler, answer="x" * 201)
