"""What the person confirms with buttons (issue 16): ``/forget <topic>`` (seed 004 Test
8-forget), ``/memory forget <id>`` and ``/memory merge``, end to end through the strict fake Bot
API (taps are real callback queries on the buttons shown), a real PostgreSQL and the real agent
on the strict fake Anthropic server: forget one, forget all, keep, an expired button, a double
tap, a tap from another chat, the messages that mention the topic deleted — and afterwards the
topic is nowhere in what the model is sent."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from chat_bot import CHAT, OTHER, Bot, add_messages, add_pattern, model_silent, running_bot
from db_scan import rows_containing
from fakes.anthropic_api import FakeAnthropic
from fakes.bot_api import run_fake_bot_api

from memory.embeddings.providers import LocalEmbedder
from runtime.db import Database

EXPIRED = "This button has expired."


@pytest.fixture
async def bot(db: Database, fake_claude: FakeAnthropic, local: LocalEmbedder) -> AsyncIterator[Bot]:
    async with run_fake_bot_api() as fake, running_bot(db, fake, fake_claude, local) as running:
        yield running
    assert running.codes == [0]


async def status(db: Database, pid: int) -> str:
    """The pattern's status; "gone" once forgotten (deleted, its audit rows kept)."""
    return str(await db.fetchval("SELECT status FROM patterns WHERE id = $1", pid) or "gone")


async def audit(db: Database) -> list[tuple[int, str, str, str]]:
    rows = await db.fetch("SELECT pattern_id, action, reason, actor FROM pattern_audit ORDER BY id")
    return [tuple(r) for r in rows]  # type: ignore[misc]


async def singpass(bot: Bot, local: LocalEmbedder) -> tuple[int, int, int]:
    db = bot.db
    goal = await add_pattern(
        db, local, "User wants to launch the SingPass API integration by Q2", kind="goal"
    )
    login = await add_pattern(db, local, "User finds SingPass login flows confusing", kind="belief")
    other = await add_pattern(db, local, "User enjoys hiking on weekends", kind="preference")
    await add_messages(
        db,
        [
            ("user", "I need the SingPass integration done by Q2"),
            ("assistant", "Noted."),
            ("user", "The weather is nice"),
            ("assistant", "Enjoy SingPass-free weekends!"),
        ],
    )
    return goal, login, other


@pytest.mark.slow
async def test_forget_one_then_the_rest_then_the_messages(bot: Bot, local: LocalEmbedder) -> None:
    """Seed 004 Test 8-forget: the goal does not come up again."""
    db = bot.db
    goal, login, other = await singpass(bot, local)
    [asked] = await bot.say("/forget SingPass")
    message = bot.last_id()
    lines = asked.splitlines()
    assert lines[0] == "Memories about “SingPass”:"
    assert sorted(line.split(". ", 1)[1] for line in lines[1:3]) == [
        f"User finds SingPass login flows confusing (#{login})",
        f"User wants to launch the SingPass API integration by Q2 (#{goal})",
    ]
    assert [line.split(". ", 1)[0] for line in lines[1:3]] == ["1", "2"]
    assert "hiking" not in asked
    assert lines[3] == "(2 messages in our conversation still mention it.)"
    labels = bot.buttons(message)
    assert [label[: len("Forget 1: ")] for label in labels[:2]] == ["Forget 1: ", "Forget 2: "]
    assert labels[2:] == ["Forget all", "Keep", "Also delete the 2 messages that mention it"]
    first = labels[0]
    first_id = goal if "launch" in first else login
    stale = bot.data_of(message, first)

    answer = await bot.tap(message, first)
    assert answer == "Forgetting…"
    assert await status(db, first_id) == "gone"
    shown = bot.shown(message)
    assert "✓ Forgotten: " in shown and "Still remembered:" in shown
    assert bot.buttons(message)[0].startswith("Forget") and "Forget all" not in bot.buttons(message)

    # a double tap (the old button's data again) changes nothing
    assert await bot.press(stale, message) == EXPIRED
    assert len(await audit(db)) == 1

    answer = await bot.tap(message, "Forget")
    assert answer == "Forgetting…"
    assert await status(db, goal) == await status(db, login) == "gone"
    assert await status(db, other) == "active"
    assert [(a[1], a[2], a[3]) for a in await audit(db)] == [
        ("forget", "forgotten by the person", "person")
    ] * 2

    [delete] = [b for b in bot.buttons(message) if b.startswith("Also delete")]
    assert await bot.tap(message, delete) == "Deleting those messages…"
    assert "✓ Deleted 2 messages that mentioned it." in bot.shown(message)
    assert bot.buttons(message) == []
    kept = await db.fetch("SELECT content FROM chat_messages WHERE chat_id = $1 ORDER BY id", CHAT)
    assert [r["content"] for r in kept] == ["Noted.", "The weather is nice"]
    # issue 20: the topic is in no column of any table (tokens, queues, audit, vectors' owners)
    assert await rows_containing(db, ["SingPass", "launch the", "login flows"]) == {}
    await model_silent(bot)

    # "What are my current goals?" — the model is told nothing about SingPass any more
    bot.claude.queue_text("You want to enjoy your weekends.")
    [reply] = await bot.say("What are my current goals?")
    assert reply == "You want to enjoy your weekends."
    [request] = bot.claude.requests
    assert b"SingPass" not in request.raw and b"singpass" not in request.raw.lower()


@pytest.mark.slow
async def test_forget_all_keep_expired_and_foreign_taps(bot: Bot, local: LocalEmbedder) -> None:
    db = bot.db
    goal, login, _ = await singpass(bot, local)
    await bot.say("/forget SingPass")
    first = bot.last_id()
    await bot.say("/forget SingPass")
    second = bot.last_id()
    await bot.say("/forget SingPass")
    third = bot.last_id()

    # a tap on a button of this chat coming from another chat: not found there
    forged = bot.data_of(first, "Forget all")
    await bot.say("/help", chat=OTHER)
    other_message = bot.last_id(OTHER)
    assert await bot.press(forged, other_message, chat=OTHER) == EXPIRED
    assert await status(db, goal) == "active"

    # Keep: nothing changes, the buttons go
    assert await bot.tap(first, "Keep") == "Kept."
    assert bot.buttons(first) == [] and bot.shown(first).startswith("Memories about “SingPass”:")
    assert "Kept:" in bot.shown(first)
    assert await status(db, goal) == await status(db, login) == "active"

    # expired after 24 h: nothing changes
    await db.execute(
        "UPDATE callback_tokens SET created_at = created_at - interval '25 hours' "
        "WHERE chat_id = $1",
        CHAT,
    )
    assert await bot.tap(second, "Forget all") == EXPIRED
    assert await status(db, goal) == "active" and await audit(db) == []
    await db.execute("UPDATE callback_tokens SET created_at = now() WHERE chat_id = $1", CHAT)

    # Forget all (the third message's buttons were issued before the expiry's rewind: live)
    assert await bot.tap(third, "Forget all") == "Forgetting all of them…"
    assert await status(db, goal) == await status(db, login) == "gone"
    shown = bot.shown(third)
    assert f"✓ Forgotten: 2 memories (#{goal}, #{login})." in shown or (
        f"✓ Forgotten: 2 memories (#{login}, #{goal})." in shown
    )
    assert "SingPass" not in shown.split("\n", 1)[1]  # the forgotten text is not quoted
    assert [b for b in bot.buttons(third) if not b.startswith("Also delete")] == []
    assert {a[0] for a in await audit(db)} == {goal, login}
    await model_silent(bot)


@pytest.mark.slow
async def test_memory_forget_and_merge_ask_first(bot: Bot, local: LocalEmbedder) -> None:
    db = bot.db
    tea = await add_pattern(db, local, "User drinks green tea daily", kind="behavior", strength=3)
    tea2 = await add_pattern(db, local, "User has green tea every day", kind="behavior")
    [asked] = await bot.say(f"/memory forget {tea2}")
    message = bot.last_id()
    assert asked == f"Memory:\n1. User has green tea every day (#{tea2})"
    assert bot.buttons(message) == ["Forget", "Keep"]
    assert await status(db, tea2) == "active"  # nothing before the tap
    assert await bot.tap(message, "Keep") == "Kept."
    assert await status(db, tea2) == "active"

    [merge] = await bot.say(f"/memory merge {tea} {tea2}")
    message = bot.last_id()
    assert merge.splitlines()[:3] == [
        "Merge these two memories into one?",
        f"#{tea} User drinks green tea daily",
        f"#{tea2} User has green tea every day",
    ]
    assert bot.buttons(message) == ["Merge", "Keep both"]
    assert await bot.tap(message, "Merge") == "Merging…"
    assert bot.shown(message) == f"✓ Merged #{tea2} into #{tea}: User drinks green tea daily"
    assert await status(db, tea2) == "merged"
    [(pid, action, _, actor)] = await audit(db)
    assert (pid, action, actor) == (tea2, "merge", "person")
    [again] = await bot.say(f"/memory forget {tea2}")
    assert again == f"Memory #{tea2} was merged into another memory: User has green tea every day"

    [asked] = await bot.say(f"/memory forget {tea}")
    message = bot.last_id()
    assert await bot.tap(message, "Forget") == "Forgetting…"
    assert bot.shown(message) == f"Memory:\n✓ Forgotten: 1 memory (#{tea})."
    assert await status(db, tea) == "gone"
    assert await status(db, tea2) == "gone"  # merged into it: its text lived on in it
    [why] = await bot.say(f"/memory why {tea}")
    assert why.startswith(f"#{tea} was forgotten: its text and evidence are gone.")
    assert "forget: active → forgotten by you — forgotten by the person" in why
    assert "green tea" not in why
    assert json.dumps(why)  # a plain text reply
    await model_silent(bot)
