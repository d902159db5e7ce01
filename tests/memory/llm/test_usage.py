"""API usage accounting against the real (embedded) PostgreSQL: cost rows, summaries, failures."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
import structlog

from memory.llm.cost import Rate
from memory.llm.usage import MAX_ERROR_CHARS, REDACTED, log_api_usage, scrub_error, usage_summary
from runtime.db import Database


async def rows(db: Database) -> list[dict[str, object]]:
    return [dict(r) for r in await db.fetch("SELECT * FROM api_usage ORDER BY id")]


async def test_token_cost_row(db: Database) -> None:
    cost = await log_api_usage(
        db,
        provider="anthropic",
        model="claude-sonnet-4-5",
        purpose="agent",
        chat_id=42,
        input_tokens=10_000,
        output_tokens=2_000,
        latency_ms=123.4,
    )
    assert cost == pytest.approx(0.06)
    [row] = await rows(db)
    assert row["chat_id"] == 42 and row["provider"] == "anthropic"
    assert row["model"] == "claude-sonnet-4-5" and row["purpose"] == "agent"
    assert (row["input_tokens"], row["output_tokens"]) == (10_000, 2_000)
    assert row["cost_usd"] == pytest.approx(0.06)
    assert row["latency_ms"] == 123 and row["ok"] is True and row["error"] is None
    assert row["duration_seconds"] is None and row["created_at"] is not None


async def test_cache_tokens_are_stored_priced_and_summed(db: Database) -> None:
    # 100,000 prompt tokens on Sonnet 4.6: 80,000 read from the cache, 15,000 written (5,000
    # of them for an hour), 5,000 uncached
    cost = await log_api_usage(
        db,
        provider="anthropic",
        model="claude-sonnet-4-6",
        purpose="agent",
        chat_id=42,
        input_tokens=100_000,
        output_tokens=1_000,
        cache_read_tokens=80_000,
        cache_write_tokens=15_000,
        cache_write_1h_tokens=5_000,
    )
    billed = 5_000 + 80_000 * 0.1 + 10_000 * 1.25 + 5_000 * 2.0
    assert cost == pytest.approx((billed * 3 + 1_000 * 15) / 1e6)
    await log_api_usage(
        db,
        provider="anthropic",
        model="claude-sonnet-4-6",
        purpose="agent",
        chat_id=42,
        input_tokens=2_000,
        cache_read_tokens=1_500,
    )
    first, second = await rows(db)
    assert (first["input_tokens"], first["cache_read_tokens"], first["cache_write_tokens"]) == (
        100_000,
        80_000,
        15_000,
    )
    assert first["cost_usd"] == pytest.approx(cost)
    assert (second["cache_read_tokens"], second["cache_write_tokens"]) == (1_500, 0)
    summary = await usage_summary(
        db,
        since=datetime.now(UTC) - timedelta(hours=1),
        until=datetime.now(UTC) + timedelta(hours=1),
    )
    agent = summary.by_purpose["agent"]
    assert (agent.input_tokens, agent.cache_read_tokens, agent.cache_write_tokens) == (
        102_000,
        81_500,
        15_000,
    )
    assert summary.total.cache_read_tokens == 81_500
    # cached parts larger than the prompt: logged, recorded at zero tokens, never raised
    with structlog.testing.capture_logs() as logs:
        assert (
            await log_api_usage(
                db,
                provider="anthropic",
                model="claude-sonnet-4-6",
                purpose="agent",
                input_tokens=10,
                cache_read_tokens=20,
            )
            == 0.0
        )
    assert any(e["event"] == "usage.invalid_counts" for e in logs)
    last = (await rows(db))[-1]
    assert (last["input_tokens"], last["cache_read_tokens"]) == (0, 0)


async def test_duration_cost_and_dated_and_local_models(db: Database) -> None:
    whisper = await log_api_usage(
        db, provider="openai", model="whisper-1", purpose="transcription", duration_seconds=90
    )
    haiku = await log_api_usage(
        db,
        provider="anthropic",
        model="claude-haiku-4-5-20251001",
        purpose="compaction",
        input_tokens=1_000_000,
    )
    with structlog.testing.capture_logs() as logs:
        local = await log_api_usage(
            db, provider="local", model="wordllama-l2-supercat", purpose="embedding", input_tokens=5
        )
    assert whisper == pytest.approx(0.009)
    assert haiku == pytest.approx(1.0)
    assert local == 0.0 and not [e for e in logs if e["log_level"] == "warning"]
    stored = await rows(db)
    assert stored[0]["duration_seconds"] == 90.0 and stored[0]["cost_usd"] == pytest.approx(0.009)
    assert [r["purpose"] for r in stored] == ["transcription", "compaction", "embedding"]


async def test_rate_override_table(db: Database) -> None:
    rates = {"gpt-4o-mini-transcribe": Rate(1.25, 5.0)}
    cost = await log_api_usage(
        db,
        provider="openai",
        model="gpt-4o-mini-transcribe",
        purpose="transcription",
        input_tokens=1_000_000,
        output_tokens=100_000,
        duration_seconds=12.0,
        rates=rates,
    )
    assert cost == pytest.approx(1.75)


async def test_unknown_model_costs_zero_with_a_warning(db: Database) -> None:
    with structlog.testing.capture_logs() as logs:
        cost = await log_api_usage(
            db, provider="openai", model="gpt-9-ultra", purpose="agent", input_tokens=1000
        )
    assert cost == 0.0
    warnings = [e for e in logs if e["event"] == "usage.unknown_model"]
    assert warnings and warnings[0]["model"] == "gpt-9-ultra"
    assert warnings[0]["log_level"] == "warning"
    [row] = await rows(db)
    assert row["cost_usd"] == 0.0 and row["input_tokens"] == 1000


async def test_failed_call_is_free_and_its_error_scrubbed(db: Database) -> None:
    secret = "my-very-private-api-key-value"
    bot_token = "123456789:AAHfakeTokenForTests_abcdefghijk-XYZ0"
    error = (
        f"HTTP 401: bad key {secret}; header Authorization: Bearer abc.def-123; "
        f"key sk-proj-AbCdEfGh12345678 and bot {bot_token} {'x' * 1000}"
    )
    cost = await log_api_usage(
        db,
        provider="openai",
        model="whisper-1",
        purpose="transcription",
        duration_seconds=30,
        ok=False,
        error=error,
        secrets=[secret],
    )
    assert cost == 0.0
    [row] = await rows(db)
    stored = str(row["error"])
    assert row["ok"] is False and row["cost_usd"] == 0.0 and row["duration_seconds"] == 30.0
    assert len(stored) <= MAX_ERROR_CHARS and stored.startswith("HTTP 401: bad key")
    for leaked in (secret, "abc.def-123", "sk-proj-AbCdEfGh12345678", "AAHfakeTokenForTests"):
        assert leaked not in stored
    assert REDACTED in stored


def test_scrub_error_keeps_plain_text() -> None:
    assert scrub_error("Rate limit reached for requests") == "Rate limit reached for requests"
    assert scrub_error("abcdefgh", ["abcdefgh"]) == REDACTED
    assert scrub_error("x" * 20, limit=10) == "x" * 9 + "…"


async def test_invalid_counts_are_logged_not_raised(db: Database) -> None:
    with structlog.testing.capture_logs() as logs:
        cost = await log_api_usage(
            db,
            provider="openai",
            model="whisper-1",
            purpose="transcription",
            input_tokens=-5,
            duration_seconds=float("nan"),
            latency_ms=float("inf"),
        )
    assert cost == 0.0
    assert any(e["event"] == "usage.invalid_counts" for e in logs)
    [row] = await rows(db)
    assert row["input_tokens"] == 0 and row["duration_seconds"] is None
    assert row["latency_ms"] is None


async def test_database_failure_does_not_raise(db: Database) -> None:
    await db.execute("DROP TABLE api_usage")
    with structlog.testing.capture_logs() as logs:
        cost = await log_api_usage(
            db,
            provider="anthropic",
            model="claude-sonnet-4-5",
            purpose="agent",
            input_tokens=1_000_000,
            error="secret sk-abcdefghijklmnop",
            ok=True,
        )
    assert cost == pytest.approx(3.0)
    [failure] = [e for e in logs if e["event"] == "usage.log_failed"]
    assert failure["log_level"] == "error" and "api_usage" in failure["error"]


# --- summary -----------------------------------------------------------------------------------

T0 = datetime(2025, 3, 10, 12, 0, tzinfo=UTC)


async def _log_at(db: Database, when: datetime, **kwargs: object) -> None:
    await log_api_usage(db, **kwargs)  # type: ignore[arg-type]
    await db.execute(
        "UPDATE api_usage SET created_at = $1 WHERE id = (SELECT max(id) FROM api_usage)", when
    )


async def test_summary_by_purpose_model_and_day(db: Database) -> None:
    sonnet = {"provider": "anthropic", "model": "claude-sonnet-4-5"}
    await _log_at(db, T0, **sonnet, purpose="agent", chat_id=1, input_tokens=100_000)  # 0.30
    await _log_at(
        db, T0 + timedelta(hours=1), **sonnet, purpose="agent", chat_id=1, output_tokens=10_000
    )  # 0.15
    await _log_at(
        db,
        T0 + timedelta(days=1),
        provider="openai",
        model="whisper-1",
        purpose="transcription",
        chat_id=1,
        duration_seconds=600,
    )  # 0.06
    await _log_at(
        db,
        T0 + timedelta(days=1, hours=11, minutes=30),  # 23:30 UTC = 00:30 next day in Madrid
        provider="anthropic",
        model="claude-haiku-4-5",
        purpose="compaction",
        chat_id=2,
        input_tokens=200_000,
    )  # 0.20
    await _log_at(
        db,
        T0 + timedelta(days=1),
        provider="openai",
        model="whisper-1",
        purpose="transcription",
        chat_id=1,
        duration_seconds=60,
        ok=False,
        error="HTTP 500",
    )  # failed: free
    await _log_at(db, T0 - timedelta(days=5), **sonnet, purpose="agent", input_tokens=10**6)

    summary = await usage_summary(db, since=T0, until=T0 + timedelta(days=7))
    assert summary.total.calls == 5 and summary.total.failed == 1
    assert summary.total.cost_usd == pytest.approx(0.71)
    assert list(summary.by_purpose) == ["agent", "compaction", "transcription"]
    agent = summary.by_purpose["agent"]
    assert agent.calls == 2 and agent.cost_usd == pytest.approx(0.45)
    assert (agent.input_tokens, agent.output_tokens) == (100_000, 10_000)
    transcription = summary.by_purpose["transcription"]
    assert transcription.calls == 2 and transcription.failed == 1
    assert transcription.duration_seconds == 660.0
    assert transcription.cost_usd == pytest.approx(0.06)
    assert summary.by_model["whisper-1"].cost_usd == pytest.approx(0.06)
    assert [(d.day, d.calls) for d in summary.by_day] == [
        (date(2025, 3, 10), 2),
        (date(2025, 3, 11), 3),
    ]
    assert summary.by_day[1].cost_usd == pytest.approx(0.26)

    madrid = await usage_summary(db, since=T0, until=T0 + timedelta(days=7), tz="Europe/Madrid")
    assert [(d.day, d.calls) for d in madrid.by_day] == [
        (date(2025, 3, 10), 2),
        (date(2025, 3, 11), 2),
        (date(2025, 3, 12), 1),
    ]

    chat1 = await usage_summary(db, since=T0, until=T0 + timedelta(days=7), chat_id=1)
    assert chat1.total.calls == 4 and "compaction" not in chat1.by_purpose
    assert chat1.total.cost_usd == pytest.approx(0.51)

    # the interval is half-open: a row exactly at `until` is excluded
    first_hour = await usage_summary(db, since=T0, until=T0 + timedelta(hours=1))
    assert first_hour.total.calls == 1


async def test_summary_of_an_empty_range(db: Database) -> None:
    summary = await usage_summary(db, since=T0, until=T0 + timedelta(days=1))
    assert summary.total.calls == 0 and summary.total.cost_usd == 0.0
    assert summary.by_purpose == {} and summary.by_model == {} and summary.by_day == ()


async def test_summary_requires_aware_datetimes(db: Database) -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        await usage_summary(db, since=datetime(2025, 1, 1), until=T0)
