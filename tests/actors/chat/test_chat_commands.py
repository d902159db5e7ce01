"""The chat commands (issue 16, items 1 and 2) end to end: updates from the strict fake Bot API
-> inbox -> chat actor -> command table -> outbox -> sendMessage, on a real PostgreSQL, with the
real agent on the strict fake Anthropic server, which sees no request (no api_usage row
either). The menu is registered at start; /help comes from the table; another chat's ids are
"not found"; bad input gets one usage line and changes nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from chat_bot import (
    CHAT,
    NOW,
    OTHER,
    TZ,
    Bot,
    add_messages,
    add_pattern,
    model_silent,
    running_bot,
)
from fakes.anthropic_api import FakeAnthropic
from fakes.bot_api import DEFAULT_TOKEN, run_fake_bot_api

from actors.chat.command_base import parse_command
from actors.chat.commands import command_table
from actors.cli.telegram import register
from actors.settings import load_settings
from memory.embeddings.providers import LocalEmbedder
from runtime.cli import base_parser
from runtime.clock import local_date
from runtime.db import Database


@pytest.fixture
async def bot(db: Database, fake_claude: FakeAnthropic, local: LocalEmbedder) -> AsyncIterator[Bot]:
    async with run_fake_bot_api() as fake, running_bot(db, fake, fake_claude, local) as running:
        yield running
    assert running.codes == [0]


def test_parse_command() -> None:
    assert parse_command("/memory@engram_bot list goal") == ("memory", "list goal")
    assert parse_command("/Remember  I like tea ") == ("remember", "I like tea")
    assert parse_command("/summary\nplease") == ("summary", "please")
    assert parse_command("hello /memory") is None
    assert parse_command("/ memory") is None


def test_help_and_menu_come_from_the_table() -> None:
    table = command_table()
    assert [c.command for c in table.menu()] == ["help", "stop"]
    assert "/stop — cancel the reply I'm working on" in table.help_text()


@pytest.mark.slow
async def test_menu_help_suffix_and_unknown(
    bot: Bot, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # setMyCommands at start, with the table (start is not in the menu: Telegram shows its own)
    expected = [(c.name, c.help) for c in bot.table.commands if c.menu]
    assert [name for name, _ in expected] == [
        "memory",
        "remember",
        "forget",
        "summary",
        "stats",
        "active",
        "quiet",
        "digest",
        "routines",
        "remind",
        "export",
        "help",
        "stop",
    ]
    assert bot.fake.menu() == expected
    [help_text] = await bot.say("/help")
    assert help_text == bot.table.help_text()
    assert "/memory — what I remember about you" in help_text
    assert "   /memory why <id>" in help_text and "/forget — " in help_text
    [start] = await bot.say("/start")
    assert start == help_text
    [unknown] = await bot.say("/mood today")
    assert unknown == "Unknown command /mood, see /help."
    [suffixed] = await bot.say("/memory@engram_bot")
    assert suffixed.startswith("📋 Your profile")
    await model_silent(bot)

    # `engram telegram info` prints the menu Telegram now has
    parser, sub = base_parser()
    register(sub)
    args = parser.parse_args(["telegram", "info"])
    env = {
        "ENGRAM_HOME": str(tmp_path),
        "TELEGRAM_BOT_TOKEN": DEFAULT_TOKEN,
        "TELEGRAM_API_BASE_URL": bot.fake.base_url,
    }
    capsys.readouterr()
    assert await args.handler(load_settings(env, dotenv=None), args) == 0
    out = capsys.readouterr().out.splitlines()
    menu = out.index("commands (menu):  /memory — what I remember about you (your profile)")
    assert out[menu + 12] == " " * 18 + "/stop — cancel the reply I'm working on"


@pytest.mark.slow
async def test_remember_then_the_profile(bot: Bot, local: LocalEmbedder) -> None:
    """Seed 004 Test 8 and 11: /remember is stored at once, /memory shows it by group."""
    db = bot.db
    fact = "I prefer Singapore Standard Time (UTC+8) for all scheduling"
    [done] = await bot.say(f"/remember {fact}")
    assert done == f"✓ Remembered: {fact}"
    row = await db.fetchrow("SELECT kind, source, status FROM patterns WHERE content = $1", fact)
    assert row is not None
    assert tuple(row.values()) == ("preference", "explicit", "active")
    [again] = await bot.say(f"/remember   {fact} ")
    assert again == f"✓ Already known — reinforced: {fact}"
    assert await db.fetchval("SELECT times_seen FROM patterns WHERE content = $1", fact) == 2

    job = await add_pattern(db, local, "User works as a Solution Architect at GovTech")
    goal = await add_pattern(
        db, local, "User wants to launch the SingPass integration", kind="goal"
    )
    day = (NOW + timedelta(days=20)).date()
    offsite = await add_pattern(db, local, "Team offsite", kind="event", occurs_on=day)
    past = await add_pattern(
        db, local, "Dentist", kind="event", occurs_on=(NOW - timedelta(days=2)).date()
    )
    core = await add_pattern(
        db, local, "User values honesty above comfort", kind="belief", core=True
    )
    gone = await add_pattern(db, local, "User likes opera", kind="preference", status="deprecated")
    foreign = await add_pattern(db, local, "User lives in Oslo", chat=OTHER)
    await add_messages(db, [("user", "hi"), ("assistant", "hello")])
    await db.execute(
        "INSERT INTO episodes (chat_id, summary, started_at, ended_at, message_count) "
        "VALUES ($1, 'Talked about work.', $2, $2, 30)",
        CHAT,
        NOW - timedelta(days=5),
    )

    [profile] = await bot.say("/memory")
    lines = profile.splitlines()
    assert lines[0] == "📋 Your profile"
    sections = [line for line in lines if line.endswith(":") and not line.startswith(" ")]
    assert sections == [
        "📌 Pinned (core):",
        "👤 Facts:",
        "⚙️ Preferences:",
        "🎯 Active goals:",
        "📅 Coming up:",
        "🗂 Also remembered:",
    ]
    assert f"  • User values honesty above comfort (#{core})" in lines
    assert f"  • User works as a Solution Architect at GovTech (#{job})" in lines
    assert any(line.startswith("  • I prefer Singapore Standard Time") for line in lines)
    assert f"  • User wants to launch the SingPass integration (#{goal})" in lines
    assert f"  • {local_date(day, 'Europe/Madrid')}: Team offsite (#{offsite})" in lines
    # the past event is counted among the 6 active, so it is shown too
    past_day = local_date((NOW - timedelta(days=2)).date(), "Europe/Madrid")
    assert lines[lines.index("🗂 Also remembered:") + 1] == f"  • {past_day}: Dentist (#{past})"
    assert f"(#{gone})" not in profile
    assert f"(#{foreign})" not in profile and "Oslo" not in profile
    assert "🧠 Memories: 6 active, 1 forgotten" in lines
    assert (
        "💬 Conversation: 2 messages kept (2 not yet summarised), 1 summary of 30 earlier messages"
    ) in lines
    await model_silent(bot)


@pytest.mark.slow
async def test_list_search_why_pin(bot: Bot, local: LocalEmbedder) -> None:
    db = bot.db
    tea = await add_pattern(
        db,
        local,
        "User drinks green tea every morning",
        kind="behavior",
        strength=5.0,
        evidence="I have green tea every morning",
    )
    run = await add_pattern(db, local, "User runs on Sundays", kind="behavior")
    goal = await add_pattern(db, local, "User wants to run a marathon", kind="goal")
    foreign = await add_pattern(db, local, "User drinks green tea at night", chat=OTHER)
    await db.execute(
        "INSERT INTO pattern_relations (chat_id, from_pattern_id, to_pattern_id, "
        "relation) VALUES ($1, $2, $3, 'supports')",
        CHAT,
        goal,
        run,
    )

    [listed] = await bot.say("/memory list")
    lines = listed.splitlines()
    assert lines[0] == "Top 3 active memories by current weight:"
    assert lines[1].startswith(f"  • User drinks green tea every morning (#{tea}) — ")
    [goals] = await bot.say("/memory list goal")
    assert len(goals.splitlines()) == 2
    assert goals.splitlines()[1].startswith(f"  • User wants to run a marathon (#{goal}) — ")
    [found] = await bot.say("/memory search green tea")
    assert found.splitlines()[0].startswith("Top ")
    assert f"(#{tea})" in found.splitlines()[1] and f"(#{foreign})" not in found

    [why] = await bot.say(f"/memory why {run}")
    assert why.splitlines()[0] == f"#{run} [behavior] User runs on Sundays (active)"
    assert "Evidence (1, newest first):" in why
    assert "user, explicit: “I said: User runs on Sundays”" in why
    assert f"#{goal} User wants to run a marathon supports it" in why

    [pinned] = await bot.say(f"/memory pin #{run}")
    assert pinned.startswith(f"📌 Pinned #{run}: User runs on Sundays")
    [again] = await bot.say(f"/memory pin {run}")
    assert again == f"#{run} was already pinned: User runs on Sundays"
    [why] = await bot.say(f"/memory why {run}")
    assert "Core tenet since" in why
    history = why.split("History:\n", 1)[1].splitlines()
    assert len(history) == 1 and "pin by you — pinned by the person" in history[0]
    [unpinned] = await bot.say(f"/memory unpin {run}")
    assert unpinned == f"Unpinned #{run}: User runs on Sundays"
    assert not await db.fetchval("SELECT is_core_tenet FROM patterns WHERE id = $1", run)

    # another chat's id reads "not found", and nothing of it changes
    for text in (f"/memory why {foreign}", f"/memory pin {foreign}", f"/memory forget {foreign}"):
        [answer] = await bot.say(text)
        assert answer == f"Memory #{foreign} not found."
    [merge] = await bot.say(f"/memory merge {tea} {foreign}")
    assert merge == f"Cannot merge: memory #{foreign} not found."
    row = await db.fetchrow("SELECT status, is_core_tenet FROM patterns WHERE id = $1", foreign)
    assert row is not None
    assert tuple(row.values()) == ("active", False)
    await model_silent(bot)


@pytest.mark.slow
async def test_bad_input_gets_one_usage_line_and_changes_nothing(bot: Bot) -> None:
    db = bot.db
    before = await db.fetchval("SELECT count(*) FROM patterns")
    cases = {
        "/memory why abc": "Usage: /memory why <id>",
        "/memory forget": "Usage: /memory forget <id>",
        "/memory pin 1 2": "Usage: /memory pin <id>",
        "/memory merge 3": "Usage: /memory merge <id1> <id2>",
        "/memory restore": "Usage: /memory restore <id> — undo a replacement (within 24 h)",
        "/memory list mood": "Usage: /memory list [kind] — kind: behavior, emotion, belief, goal, "
        "preference, temporal, causal, fact, event",
        "/memory search": "Usage: /memory search <words>",
        "/remember " + "x" * 5000: "Usage: /remember <fact> (3-500 characters)",
        "/remember": "Usage: /remember <fact> (3-500 characters)",
        "/forget": "Usage: /forget <topic> — e.g. /forget SingPass",
    }
    for text, expected in cases.items():
        [answer] = await bot.say(text)
        assert answer == expected and "\n" not in answer
    [subs] = await bot.say("/memory frobnicate")
    assert subs.startswith(
        "Usage: /memory [list | search | why | forget | pin | unpin | merge | restore]"
    )
    assert await db.fetchval("SELECT count(*) FROM patterns") == before == 0
    assert await db.fetchval("SELECT count(*) FROM pattern_audit") == 0
    await model_silent(bot)


@pytest.mark.slow
async def test_summary_and_stats(bot: Bot) -> None:
    db = bot.db
    for n, (days, count, text) in enumerate(
        [(9, 32, "Discussed the Lambda design."), (4, 20, "Reviewed PDPA compliance.")]
    ):
        await db.execute(
            "INSERT INTO episodes (chat_id, summary, started_at, ended_at, message_count) "
            "VALUES ($1, $2, $3, $4, $5)",
            CHAT,
            text,
            NOW - timedelta(days=days + 1),
            NOW - timedelta(days=days),
            count,
        )
        assert n in (0, 1)
    await db.execute(
        "INSERT INTO episodes (chat_id, summary, started_at, ended_at, message_count) "
        "VALUES ($1, 'Another chat.', $2, $2, 5)",
        OTHER,
        NOW,
    )
    await add_messages(db, [("user", "planning SingPass"), ("assistant", "ok"), ("user", "go")])
    [summary] = await bot.say("/summary")
    blocks = summary.split("\n\n")
    assert blocks[0] == "📜 Conversation summary"
    assert (
        blocks[1].startswith("📅 ") and "(20 messages):\n  Reviewed PDPA compliance." in blocks[1]
    )
    assert "(32 messages):\n  Discussed the Lambda design." in blocks[2]
    assert blocks[-1].startswith("💬 In view now: 3 messages, since ")  # commands are not kept
    assert "Another chat" not in summary

    await db.execute(
        "INSERT INTO api_usage (chat_id, provider, model, purpose, cost_usd, created_at) "
        "VALUES ($1, 'anthropic', 'claude-sonnet-4-6', 'agent', 0.25, $2), "
        "($1, 'anthropic', 'claude-haiku-4-5', 'compaction', 0.05, $2), "
        "($3, 'anthropic', 'claude-sonnet-4-6', 'agent', 9.0, $2)",
        CHAT,
        NOW - timedelta(minutes=5),
        OTHER,
    )
    await db.execute(
        "INSERT INTO chat_turn_stats (chat_id, day, turns, retrieval_degraded) "
        "VALUES ($1, $2, 8, 2)",
        CHAT,
        NOW.astimezone(ZoneInfo(TZ)).date(),  # the chat's today (not UTC's, near midnight)
    )
    [stats] = await bot.say("/stats")
    lines = stats.splitlines()
    assert lines[0] == "📊 This chat"
    assert lines[1] == "Cost: today $0.3000 · this month $0.3000 (2 model calls)"
    assert lines[2] == "This month by purpose: agent $0.2500, compaction $0.0500"
    assert lines[3] == "Turns: 8 today · 8 this month · memory retrieval degraded in 2 (25.0%)"
    assert lines[4].startswith("Reply time (last 30 days, ") and " · p95 " in lines[4]
    assert lines[5] == "Memories, last 7 days: 0 created · 0 reinforced · 0 merged"
    assert bot.claude.requests == []


@pytest.mark.slow
async def test_a_model_turn_is_counted_with_its_commit(bot: Bot) -> None:
    """/stats' turns and degraded rate: each model turn adds to chat_turn_stats in its commit
    (commands do not)."""
    await bot.say("/help")
    bot.claude.queue_text("Hello!")
    [reply] = await bot.say("hi there")
    assert reply == "Hello!"
    row = await bot.db.fetchrow(
        "SELECT turns, retrieval_degraded FROM chat_turn_stats WHERE chat_id = $1", CHAT
    )
    assert row is not None
    assert tuple(row.values()) == (1, 0)
    [stats] = await bot.say("/stats")
    assert "Turns: 1 today · 1 this month · memory retrieval degraded in 0 (0.0%)" in stats
