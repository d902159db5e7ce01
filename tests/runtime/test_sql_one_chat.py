"""Issue 26, item 5: every statement the code sends that touches chat data filters by one
``chat_id`` (each reaches one shard when the tables are distributed by chat on Citus), unless it
is a declared cross-chat sweep (``/* all chats: <reason> */``). The SQL is recorded from real
flows (:mod:`sql_recorder`); the chat-scoped tables are read from the catalogue."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from chat_bot import Bot, add_messages, add_pattern, running_bot
from fakes.anthropic_api import FakeAnthropic
from fakes.bot_api import run_fake_bot_api
from sql_recorder import SqlRecorder, chat_tables, judge, verdict

from memory.embeddings.providers import LocalEmbedder
from runtime.db import Database

ROOT = Path(__file__).resolve().parents[2]
TABLES = frozenset({"patterns", "inbox", "outbox", "chat_messages", "pattern_entries"})


def test_the_rule() -> None:
    ok = [
        "SELECT id FROM patterns WHERE chat_id = $1 AND id = $2",
        "UPDATE outbox SET status = 'sent' WHERE chat_id = $2::bigint AND id = $1",
        "DELETE FROM pattern_entries pe WHERE $1 = pe.chat_id",
        "INSERT INTO inbox (chat_id, update_key) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        "INSERT INTO outbox AS o (chat_id, text) VALUES ($1, $2)",
        "SELECT name FROM model_rates WHERE id = $1",  # not chat data
        "CREATE INDEX ON patterns (id)",  # DDL is not checked
        "SELECT 'FROM patterns' AS label",  # a string literal is not a table
    ]
    offends = [
        "UPDATE outbox SET status = 'sent' WHERE id = $1",
        "SELECT count(*) FROM patterns WHERE chat_id = ANY($1::bigint[])",
        "SELECT p.id FROM model_rates r JOIN patterns p ON p.id = r.id",
        "INSERT INTO pattern_entries (chat_id, pattern_id) SELECT chat_id, id FROM patterns",
        "INSERT INTO inbox (update_key) VALUES ($1)",
        "SELECT id FROM patterns -- chat_id = $1",  # a comment pins nothing
        "SELECT id FROM outbox WHERE ($1::bigint IS NULL OR chat_id = $1)",  # all chats if NULL
    ]
    marked = "/* all chats: retention purge */ DELETE FROM chat_messages WHERE compacted_at < $1"
    assert [verdict(q, TABLES) for q in ok] == ["ok"] * len(ok)
    assert [verdict(q, TABLES) for q in offends] == ["offends"] * len(offends)
    assert verdict(marked, TABLES) == "marked"


async def test_the_chat_tables_come_from_the_catalogue(db: Database) -> None:
    tables = await chat_tables(db)
    assert tables >= TABLES
    assert "model_rates" not in tables and "schema_migrations" not in tables


@pytest.fixture
async def bot(db: Database, fake_claude: FakeAnthropic, local: LocalEmbedder) -> AsyncIterator[Bot]:
    async with run_fake_bot_api() as fake, running_bot(db, fake, fake_claude, local) as running:
        yield running


async def test_a_chat_run_sends_one_chat_sql(bot: Bot, local: LocalEmbedder) -> None:
    """A turn, /memory, /summary, /stats, /remember, /forget with its buttons, /help, in one
    running bot (the sender, the router, the chat actor, the command table on the way)."""
    recorder = SqlRecorder()
    await add_pattern(bot.db, local, "User wants to launch the SingPass API by Q2", kind="goal")
    await add_pattern(bot.db, local, "User enjoys hiking on weekends", kind="preference")
    await add_messages(bot.db, [("user", "SingPass by Q2"), ("assistant", "Noted.")])
    with recorder.installed():
        bot.claude.queue_text("Hello again.")
        assert await bot.say("Hi there") == ["Hello again."]
        for command in ("/memory", "/summary", "/stats", "/remember I like green tea", "/help"):
            assert await bot.say(command)
        await bot.say("/forget SingPass")
        message = bot.last_id()
        forget = next(b for b in bot.buttons(message) if b.startswith("Forget"))
        assert await bot.tap(message, forget) == "Forgetting…"
        await bot.delivered()
    got = judge(list(recorder.statements), await chat_tables(bot.db))
    assert len(recorder.statements) >= 40, sorted(recorder.statements)
    offenders = [f"{sorted(recorder.statements[q].origins)} {q}" for q in got["offends"]]
    assert offenders == []
    assert got["ok"]  # the chat's own statements were judged, not only sweeps


async def test_every_statement_this_run_sent_is_one_chat(
    sql_seen: SqlRecorder, db: Database, request: pytest.FixtureRequest
) -> None:
    """Run last (tests/conftest.py): every statement the code sent during this whole run —
    turns, commands and their buttons, compaction, the sender, the scheduler, the dashboard,
    the CLI, the maintenance jobs, recorded by the session's recorder — is judged."""
    recorded = sql_seen.statements
    got = judge(list(recorded), await chat_tables(db))
    whole_suite = len(request.session.items) > 1000
    print(f"sql statements recorded={len(recorded)} marked={len(got['marked'])}")
    assert len(recorded) >= (400 if whole_suite else 1), len(recorded)
    assert [f"{sorted(recorded[q].origins)} {q}" for q in got["offends"]] == []
    if whole_suite:  # the sweeps stay the exception (a small run is mostly start-up sweeps)
        assert len(got["marked"]) < len(recorded) // 5
