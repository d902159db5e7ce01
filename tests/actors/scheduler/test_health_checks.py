"""The heartbeat's checks (:mod:`actors.scheduler.health_checks`) on the real database with
seeded rows: each check has a case that passes and one that fails."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from actors.scheduler.health_checks import (
    EMBEDDINGS_WARN,
    Check,
    CheckConfig,
    Contact,
    run_checks,
    service_check,
    worst,
)
from runtime.db import Database

MODEL = "wordllama-l2-supercat-256"
CHAT = 4401


def config(**more: object) -> CheckConfig:
    return CheckConfig(embedding_model=MODEL, timezone="UTC", **more)  # type: ignore[arg-type]


async def checked(db: Database, **more: object) -> dict[str, Check]:
    now = await db.fetchval("SELECT now()")
    return {c.name: c for c in await run_checks(db, config(**more), now)}


async def test_an_empty_database_is_all_ok(db: Database) -> None:
    checks = await checked(db)
    assert list(checks) == [
        "inbox",
        "outbox",
        "replies",
        "compaction",
        "embeddings",
        "cost",
        "bot_api",
        "model",
        "embedder",
    ]
    assert {c.severity for c in checks.values()} == {"ok"}
    assert checks["inbox"].detail == "empty"
    assert checks["model"].detail == "no calls yet"


async def inbox_row(db: Database, key: str, age_s: float, status: str = "pending") -> None:
    await db.execute(
        "INSERT INTO inbox (update_key, chat_id, kind, payload, status, received_at) "
        "VALUES ($1, $2, 'message', '{}', $3, now() - make_interval(secs => $4))",
        key,
        CHAT,
        status,
        age_s,
    )


async def test_inbox_backlog_by_its_oldest_row(db: Database) -> None:
    await inbox_row(db, "u1", 30)
    await inbox_row(db, "u0", 99_999, status="done")  # answered: not waiting
    assert (await checked(db))["inbox"].severity == "ok"
    await inbox_row(db, "u2", 900, status="processing")
    assert (await checked(db))["inbox"] == Check("inbox", "warning", "2 waiting, oldest 15 min")
    await inbox_row(db, "u3", 7200)
    assert (await checked(db))["inbox"].severity == "critical"


async def outbox_row(db: Database, status: str, age_s: float, **more: object) -> None:
    await db.execute(
        "INSERT INTO outbox (chat_id, text, status, created_at, sent_at, attempts, last_error) "
        "VALUES ($1, 'x', $2, now() - make_interval(secs => $3), "
        "CASE WHEN $2 = 'sent' THEN now() - make_interval(secs => $3) END, $4, $5)",
        CHAT,
        status,
        age_s,
        more.get("attempts", 0),
        more.get("error"),
    )


async def test_outbox_backlog_by_its_oldest_reply(db: Database) -> None:
    await outbox_row(db, "pending", 10)
    await outbox_row(db, "sent", 5000)
    assert (await checked(db))["outbox"].severity == "ok"
    await outbox_row(db, "sending", 600)
    assert (await checked(db))["outbox"] == Check("outbox", "warning", "2 waiting, oldest 10 min")
    await outbox_row(db, "pending", 4000)
    assert (await checked(db))["outbox"].severity == "critical"


async def test_uncertain_and_given_up_replies_in_the_window(db: Database) -> None:
    await outbox_row(db, "failed", 10 * 86_400)  # long ago: outside the window
    await outbox_row(db, "sent", 60)
    assert (await checked(db))["replies"].severity == "ok"
    await outbox_row(db, "uncertain", 3600)
    replies = (await checked(db))["replies"]
    assert replies == Check("replies", "warning", "1 uncertain, 0 given up lately")
    for _ in range(4):
        await outbox_row(db, "failed", 40 * 3600)  # given up at SEND_DEADLINE (24 h) + 16 h
    assert (await checked(db))["replies"].severity == "critical"
    narrow = await checked(db, replies_window=timedelta(hours=2))
    assert narrow["replies"].detail == "1 uncertain, 0 given up lately"


async def compaction_run(db: Database, status: str, age_s: float) -> None:
    await db.execute(
        "INSERT INTO compaction_runs (chat_id, status, started_at) "
        "VALUES ($1, $2, now() - make_interval(secs => $3))",
        CHAT,
        status,
        age_s,
    )


async def test_compaction_failures_in_the_last_day(db: Database) -> None:
    await compaction_run(db, "ok", 60)
    await compaction_run(db, "failed", 2 * 86_400)  # before yesterday
    assert (await checked(db))["compaction"].severity == "ok"
    await compaction_run(db, "failed", 3600)
    assert (await checked(db))["compaction"] == Check(
        "compaction", "warning", "1 failed run(s) in 24 h"
    )
    await compaction_run(db, "failed", 60)
    await compaction_run(db, "failed", 30)
    assert (await checked(db))["compaction"].severity == "critical"


async def test_embedding_backlog_of_the_current_model(db: Database) -> None:
    await db.execute(
        "INSERT INTO entries (uuid, created_at, text, chat_id) "
        "SELECT 'e' || i, now(), 'text', $1 FROM generate_series(1, $2) i",
        CHAT,
        EMBEDDINGS_WARN,
    )
    found = (await checked(db))["embeddings"]
    assert found == Check(
        "embeddings", "warning", f"{EMBEDDINGS_WARN} row(s) without a {MODEL} vector"
    )
    await db.execute(
        "INSERT INTO entry_embeddings (entry_id, model, dims, embedding, chat_id) "
        "SELECT id, $1, 3, '[1,0,0]', chat_id FROM entries WHERE id % 2 = 0",
        MODEL,
    )
    half = (await checked(db))["embeddings"]
    assert half.severity == "ok" and half.detail.startswith(f"{EMBEDDINGS_WARN // 2} row(s)")
    # another model's vectors do not count for the current one
    other = {
        c.name: c
        for c in await run_checks(
            db,
            CheckConfig(embedding_model="text-embedding-3-small"),
            await db.fetchval("SELECT now()"),
        )
    }
    assert other["embeddings"].severity == "warning"


async def usage(db: Database, purpose: str, cost: float, age_s: float, ok: bool = True) -> None:
    await db.execute(
        "INSERT INTO api_usage (chat_id, provider, model, purpose, cost_usd, ok, created_at) "
        "VALUES ($1, 'anthropic', 'claude-x', $2, $3, $4, now() - make_interval(secs => $5))",
        CHAT,
        purpose,
        cost,
        ok,
        age_s,
    )


async def test_cost_today_against_the_alert(db: Database) -> None:
    await usage(db, "agent", 3.0, 60)
    await usage(db, "agent", 50.0, 3 * 86_400)  # another day
    assert (await checked(db))["cost"] == Check(
        "cost", "ok", "$3.00 today (no DAILY_COST_ALERT_USD)"
    )
    assert (await checked(db, daily_cost_alert_usd=10.0))["cost"].severity == "ok"
    assert (await checked(db, daily_cost_alert_usd=3.5))["cost"] == Check(
        "cost", "warning", "$3.00 of $3.50 today"
    )
    assert (await checked(db, daily_cost_alert_usd=2.0))["cost"].severity == "critical"


async def test_model_and_embedder_by_their_last_calls(db: Database) -> None:
    await usage(db, "agent", 0.0, 600)
    await usage(db, "embedding", 0.0, 60, ok=False)
    checks = await checked(db)
    assert checks["model"] == Check("model", "ok", "last success 10 min ago")
    assert checks["embedder"].severity == "critical"  # failing and never succeeded
    await usage(db, "agent", 0.0, 30, ok=False)  # failing since a success 10 min ago
    await usage(db, "embedding", 0.0, 10)
    checks = await checked(db)
    assert checks["model"].severity == "warning"
    assert checks["model"].detail.startswith("failing: last failure 30 s ago")
    assert checks["embedder"].severity == "ok"
    await usage(db, "transcription", 0.0, 5, ok=False)  # not the chat model
    assert (await checked(db))["model"].severity == "warning"


async def test_bot_api_by_the_last_reply_sent_and_failing_retries(db: Database) -> None:
    await outbox_row(db, "sent", 120)
    assert (await checked(db))["bot_api"] == Check("bot_api", "ok", "last success 2 min ago")
    await outbox_row(db, "pending", 30, attempts=2, error="502 Bad Gateway")
    assert (await checked(db))["bot_api"].severity == "warning"
    await db.execute("UPDATE outbox SET sent_at = now() - interval '2 hours' WHERE status = 'sent'")
    assert (await checked(db))["bot_api"].severity == "critical"


@pytest.mark.parametrize(
    ("ok_ago", "fail_ago", "severity"),
    [
        (None, None, "ok"),
        (60.0, None, "ok"),
        (60.0, 120.0, "ok"),  # recovered since
        (120.0, 60.0, "warning"),
        (3600.0, 60.0, "critical"),
        (None, 60.0, "critical"),
    ],
)
def test_service_grading(ok_ago: float | None, fail_ago: float | None, severity: str) -> None:
    now = datetime(2026, 3, 1, tzinfo=UTC)

    def at(ago: float | None) -> datetime | None:
        return None if ago is None else now - timedelta(seconds=ago)

    check = service_check("model", Contact(at(ok_ago), at(fail_ago)), now)
    assert check.severity == severity
    assert worst([Check("a", "ok", ""), check]) == severity


async def test_bot_api_from_the_running_clients_record(db: Database) -> None:
    """Nobody writes, the outbox is empty, and getUpdates fails: the client's record shows it."""
    now = await db.fetchval("SELECT now()")
    failing = Contact(now - timedelta(hours=1), now - timedelta(seconds=5))
    found = {c.name: c for c in await run_checks(db, config(), now, failing)}
    assert found["bot_api"].severity == "critical"
    polling = Contact(now - timedelta(seconds=5), now - timedelta(hours=1))
    found = {c.name: c for c in await run_checks(db, config(), now, polling)}
    assert found["bot_api"] == Check("bot_api", "ok", "last success 5 s ago")
