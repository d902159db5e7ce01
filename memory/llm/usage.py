"""API usage accounting (seed 000, "API cost tracking"): one ``api_usage`` row per paid call.

``log_api_usage`` computes ``cost_usd`` at call time from the rate table in
:mod:`memory.llm.cost` (tokens, or audio duration for per-minute models) and inserts the row.
``input_tokens`` counts every prompt token; ``cache_read_tokens`` and ``cache_write_tokens`` are
the parts of it the provider read from or wrote to its prompt cache (priced at 0.1x and 1.25x or
2x the input rate).
Accounting must never fail the user's turn: a database error while logging is logged and
swallowed, an unknown model costs 0 with a warning. Failed calls (``ok=False``) are recorded
at zero cost, since the providers do not bill rejected requests.

Error texts are scrubbed (the caller's secrets, plus anything shaped like an API key, a
bearer token or a bot token) and truncated before they are stored or logged.

``usage_summary`` answers "how much have you cost me?": spend by purpose, model and day.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from datetime import date, datetime
from typing import Any

import attrs

from memory.llm.cost import DEFAULT_RATES, Cost, RateTable, duration_cost, token_cost
from runtime import metrics
from runtime.db import Connection, Queries
from runtime.logs import get_logger

log = get_logger(__name__)

#: ``purpose`` values the project writes (the column itself is free text): ``adjudication``
#: covers the dedup decision in compaction and ``remember`` and the merge job's confirmation
PURPOSES = (
    "agent",
    "compaction",
    "adjudication",
    "embedding",
    "transcription",
)
MAX_ERROR_CHARS = 500
REDACTED = "[REDACTED]"

_SECRET_SHAPES = re.compile(
    r"(?:sk-[A-Za-z0-9_\-]{8,})"  # OpenAI / Anthropic keys
    r"|(?:(?<=Bearer )[^\s'\"]+)"  # bearer tokens in echoed headers
    r"|(?:\b[0-9]{6,12}:[A-Za-z0-9_\-]{30,})"  # Telegram bot tokens
)

# Committed without waiting for the WAL flush when the row is its own transaction (on the pool;
# on a held connection the transaction is the caller's, so it commits as the caller does):
# accounting is best effort already (see the module docstring), and the next
# synchronous commit of anything (a turn's reply) flushes the row with it; only a database
# crash within a fraction of a second of the call can lose it.
_INSERT = """
INSERT INTO api_usage (chat_id, provider, model, purpose, input_tokens, output_tokens,
                       duration_seconds, cost_usd, latency_ms, ok, error, cache_read_tokens,
                       cache_write_tokens)
VALUES (coalesce($1::bigint, 0), $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
"""
_INSERT_ASYNC = _INSERT + "RETURNING set_config('synchronous_commit', 'off', true)"


def scrub_error(text: str, secrets: Iterable[str] = (), limit: int = MAX_ERROR_CHARS) -> str:
    """``text`` without ``secrets`` or key-shaped strings, cut to ``limit`` characters."""
    for secret in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    text = _SECRET_SHAPES.sub(REDACTED, text)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def _count(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"token count must be an int >= 0, got {value!r}")
    return value


def compute_cost(
    rates: RateTable,
    model: str,
    *,
    input_tokens: int = 0,
    output_tokens: int = 0,
    duration_seconds: float | None = None,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
    cache_write_1h_tokens: int = 0,
) -> Cost:
    """Tokens cost plus (for per-minute models) duration cost; ``known`` False if unpriced."""
    tokens = token_cost(
        rates,
        model,
        input_tokens,
        output_tokens,
        cache_read_tokens=cache_read_tokens,
        cache_write_tokens=cache_write_tokens,
        cache_write_1h_tokens=cache_write_1h_tokens,
    )
    if duration_seconds is None:
        return tokens
    audio = duration_cost(rates, model, duration_seconds)
    return Cost(tokens.usd + audio.usd, known=tokens.known and audio.known)


async def log_api_usage(
    db: Queries,
    *,
    provider: str,
    model: str,
    purpose: str,
    chat_id: int | None = None,
    input_tokens: int = 0,
    output_tokens: int = 0,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
    cache_write_1h_tokens: int = 0,
    duration_seconds: float | None = None,
    latency_ms: float | None = None,
    ok: bool = True,
    error: str | None = None,
    rates: RateTable = DEFAULT_RATES,
    secrets: Iterable[str] = (),
) -> float:
    """Record one API call in ``api_usage`` and return its cost in USD.

    ``cache_write_1h_tokens`` is the part of ``cache_write_tokens`` written with the 1-hour TTL
    (priced, not stored). Never raises for bad counts, unknown models or a failing database
    (those are logged); cancellation still propagates. ``error`` is scrubbed of ``secrets``
    and truncated.
    """
    cost = 0.0
    try:
        input_tokens, output_tokens = _count(input_tokens), _count(output_tokens)
        cache_read_tokens = _count(cache_read_tokens)
        cache_write_tokens = _count(cache_write_tokens)
        cache_write_1h_tokens = _count(cache_write_1h_tokens)
        if cache_write_1h_tokens > cache_write_tokens:
            raise ValueError("cache_write_1h_tokens is more than cache_write_tokens")
        if cache_read_tokens + cache_write_tokens > input_tokens:
            raise ValueError("cached tokens are more than input_tokens")
        if duration_seconds is not None and not (
            math.isfinite(duration_seconds) and duration_seconds >= 0
        ):
            raise ValueError(f"duration_seconds must be finite and >= 0, got {duration_seconds}")
    except (ValueError, TypeError) as exc:
        log.warning("usage.invalid_counts", model=model, purpose=purpose, problem=str(exc))
        input_tokens = output_tokens = 0
        cache_read_tokens = cache_write_tokens = cache_write_1h_tokens = 0
        duration_seconds = None
    computed = compute_cost(
        rates,
        model,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        duration_seconds=duration_seconds,
        cache_read_tokens=cache_read_tokens,
        cache_write_tokens=cache_write_tokens,
        cache_write_1h_tokens=cache_write_1h_tokens,
    )
    if not computed.known:
        log.warning("usage.unknown_model", model=model, provider=provider, purpose=purpose)
    if ok:
        cost = computed.usd
    latency = None
    if latency_ms is not None and math.isfinite(latency_ms):
        latency = max(0, min(round(latency_ms), 2**31 - 1))
    clean_error = None if error is None else scrub_error(error, secrets)
    metrics.model_call(
        purpose=purpose,
        model=model,
        ok=ok,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read_tokens=cache_read_tokens,
        cache_write_tokens=cache_write_tokens,
        cost_usd=cost,
        latency_ms=latency,
    )
    try:
        await db.execute(
            _INSERT if isinstance(db, Connection) else _INSERT_ASYNC,
            chat_id,
            provider,
            model,
            purpose,
            input_tokens,
            output_tokens,
            duration_seconds,
            cost,
            latency,
            ok,
            clean_error,
            cache_read_tokens,
            cache_write_tokens,
        )
    except Exception as exc:  # accounting must not fail the caller's turn
        log.error(
            "usage.log_failed",
            model=model,
            purpose=purpose,
            chat_id=chat_id,
            cost_usd=cost,
            error=scrub_error(f"{type(exc).__name__}: {exc}", secrets),
        )
    return cost


# --- summary -----------------------------------------------------------------------------------


@attrs.frozen
class Spend:
    """Totals of one group of calls (a purpose, a model, or everything)."""

    calls: int
    failed: int
    cost_usd: float
    input_tokens: int
    output_tokens: int
    duration_seconds: float
    #: parts of ``input_tokens`` read from / written to the prompt cache
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@attrs.frozen
class DaySpend:
    """Totals of one calendar day (in the summary's time zone)."""

    day: date
    calls: int
    cost_usd: float


@attrs.frozen
class UsageSummary:
    """Spend between ``since`` (inclusive) and ``until`` (exclusive)."""

    since: datetime
    until: datetime
    chat_id: int | None
    total: Spend
    #: purpose -> totals, most expensive first
    by_purpose: dict[str, Spend]
    #: model -> totals, most expensive first
    by_model: dict[str, Spend]
    #: days with at least one call, oldest first
    by_day: tuple[DaySpend, ...]


_GROUP_SQL = """
/* all chats: one chat's spend, every chat's (operator report) or one chat's with no chat's */
SELECT {key} AS key, count(*) AS calls, count(*) FILTER (WHERE NOT ok) AS failed,
       coalesce(sum(cost_usd), 0) AS cost_usd,
       coalesce(sum(input_tokens), 0)::bigint AS input_tokens,
       coalesce(sum(output_tokens), 0)::bigint AS output_tokens,
       coalesce(sum(duration_seconds), 0) AS duration_seconds,
       coalesce(sum(cache_read_tokens), 0)::bigint AS cache_read_tokens,
       coalesce(sum(cache_write_tokens), 0)::bigint AS cache_write_tokens
FROM api_usage
WHERE created_at >= $1 AND created_at < $2
  AND ($3::bigint IS NULL OR chat_id = $3 OR ($4::bool AND chat_id = 0))
GROUP BY 1 ORDER BY cost_usd DESC, 1
"""

_DAY_SQL = """
/* all chats: one chat's spend, every chat's (operator report) or one chat's with no chat's */
SELECT (created_at AT TIME ZONE $5)::date AS day, count(*) AS calls,
       coalesce(sum(cost_usd), 0) AS cost_usd
FROM api_usage
WHERE created_at >= $1 AND created_at < $2
  AND ($3::bigint IS NULL OR chat_id = $3 OR ($4::bool AND chat_id = 0))
GROUP BY 1 ORDER BY 1
"""


def _spend(row: Any) -> Spend:
    return Spend(
        calls=int(row["calls"]),
        failed=int(row["failed"]),
        cost_usd=float(row["cost_usd"]),
        input_tokens=int(row["input_tokens"]),
        output_tokens=int(row["output_tokens"]),
        duration_seconds=float(row["duration_seconds"]),
        cache_read_tokens=int(row["cache_read_tokens"]),
        cache_write_tokens=int(row["cache_write_tokens"]),
    )


async def usage_summary(
    db: Queries,
    *,
    since: datetime,
    until: datetime,
    chat_id: int | None = None,
    tz: str = "UTC",
    include_shared: bool = False,
) -> UsageSummary:
    """Spend in ``[since, until)`` (optionally of one chat) by purpose, model and day.

    With ``chat_id`` and ``include_shared``, calls that belong to no chat (background
    embedding) count too; other chats' calls never do (a journal import is its chat's).

    ``since``/``until`` must be timezone-aware; days are calendar days in ``tz`` (an IANA
    name such as ``Europe/Madrid``). Database errors propagate.
    """
    if since.tzinfo is None or until.tzinfo is None:
        raise ValueError("since and until must be timezone-aware datetimes")
    args = (since, until, chat_id, include_shared)
    total_rows = await db.fetch(_GROUP_SQL.format(key="'all'::text"), *args)
    purpose_rows = await db.fetch(_GROUP_SQL.format(key="purpose"), *args)
    model_rows = await db.fetch(_GROUP_SQL.format(key="model"), *args)
    day_rows = await db.fetch(_DAY_SQL, *args, tz)
    total = _spend(total_rows[0]) if total_rows else Spend(0, 0, 0.0, 0, 0, 0.0)
    return UsageSummary(
        since=since,
        until=until,
        chat_id=chat_id,
        total=total,
        by_purpose={str(r["key"]): _spend(r) for r in purpose_rows},
        by_model={str(r["key"]): _spend(r) for r in model_rows},
        by_day=tuple(DaySpend(r["day"], int(r["calls"]), float(r["cost_usd"])) for r in day_rows),
    )
