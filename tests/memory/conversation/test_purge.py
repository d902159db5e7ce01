"""The retention purge on a real database."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import trio

from actors.settings import load_settings
from memory.conversation.purge import PurgeJob, purge_compacted
from memory.tools.memory_tools import memory_registry
from memory.tools.registry import ToolContext
from runtime.db import Database

NOW = datetime(2024, 5, 20, 12, 0, tzinfo=UTC)


async def add(db: Database, chat_id: int, compacted_days_ago: float | None) -> int:
    at = None if compacted_days_ago is None else NOW - timedelta(days=compacted_days_ago)
    return int(
        await db.fetchval(
            "INSERT INTO chat_messages (chat_id, role, content, compacted_at, created_at) "
            "VALUES ($1, 'user', 'hi', $2, $3) RETURNING id",
            chat_id,
            at,
            NOW - timedelta(days=30),
        )
    )


async def remaining(db: Database) -> list[int]:
    return [r["id"] for r in await db.fetch("SELECT id FROM chat_messages ORDER BY id")]


async def test_purge_deletes_only_rows_compacted_before_the_retention(db: Database) -> None:
    old = await add(db, 1, 8)
    old_other_chat = await add(db, 2, 30)
    recent = await add(db, 1, 6.9)
    never = await add(db, 1, None)  # uncompacted, however old
    assert await purge_compacted(db, 7, now=NOW) == 2
    assert old not in await remaining(db) and old_other_chat not in await remaining(db)
    assert await remaining(db) == [recent, never]
    assert await purge_compacted(db, 7, now=NOW) == 0
    # a shorter retention reaches the recent one, never the uncompacted row
    assert await purge_compacted(db, 1, now=NOW) == 1
    assert await remaining(db) == [never]


async def test_zero_days_keeps_everything(db: Database) -> None:
    rows = [await add(db, 1, 400), await add(db, 1, 10)]
    assert await purge_compacted(db, 0, now=NOW) == 0
    assert await remaining(db) == rows


async def test_purge_works_in_batches(db: Database) -> None:
    for _ in range(7):
        await add(db, 1, 10)
    keep = await add(db, 1, 1)
    assert await purge_compacted(db, 7, now=NOW, batch=3) == 7
    assert await remaining(db) == [keep]


async def test_job_purges_at_start_and_keeps_running(db: Database) -> None:
    await add(db, 1, 10)
    keep = await add(db, 1, None)
    job = PurgeJob(db, retention_days=7, interval=0.05)
    async with trio.open_nursery() as nursery:
        await nursery.start(job.run)
        with trio.fail_after(10):
            while job.passes < 2:  # noqa: ASYNC110 - the job has no event to wait on
                await trio.sleep(0.02)
        nursery.cancel_scope.cancel()
    assert job.deleted == 1 and job.failures == 0
    assert await remaining(db) == [keep]


async def test_by_default_the_exact_words_stay_and_recall_finds_them_after_the_purge(
    db: Database,
) -> None:
    """Issue 24 item 1: MESSAGE_RETENTION_DAYS defaults to 0, so the purge job with the default
    settings keeps a message compacted a year ago, and recall_conversation still finds it."""
    settings = load_settings({}, dotenv=None)
    assert settings.message_retention_days == 0
    said = "the locker code at the gym is 4417"
    row = await db.fetchval(
        "INSERT INTO chat_messages (chat_id, role, content, compacted_at, created_at) "
        "VALUES (7, 'user', $1, $2, $2) RETURNING id",
        said,
        NOW - timedelta(days=365),
    )
    job = PurgeJob(db, retention_days=settings.message_retention_days, interval=3600)
    await job.run_once()
    assert await remaining(db) == [row]
    context = ToolContext(db=db, embedder=None, chat_id=7, timezone="UTC", now=NOW)
    outcome = await memory_registry().call(
        "recall_conversation", {"query": "gym locker code"}, context
    )
    found = json.loads(outcome.content)["messages"]
    assert [(m["text"], m["compacted"]) for m in found] == [(said, True)]
    # a purge the operator sets does delete it (and recall no longer finds it)
    assert await purge_compacted(db, 30, now=NOW) == 1
    outcome = await memory_registry().call(
        "recall_conversation", {"query": "gym locker code"}, context
    )
    assert json.loads(outcome.content)["messages"] == []
