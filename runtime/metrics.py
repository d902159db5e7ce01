"""Every Prometheus metric of engram, in one place (issue 25 item 4).

The metric objects live on :data:`REGISTRY` (not prometheus_client's global one, so a test or
a library cannot add to what ``/metrics`` shows); ``actors.web.metrics`` serves it in the text
format. Code observes through the small functions below, so label values stay bounded (a
skip's free-text reason becomes a short label by :func:`reason_label`). Gauges that describe
the database (queue depths, patterns by status) are set when ``/metrics`` is scraped.
"""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)

#: seconds: from a few milliseconds (webhook) to minutes (a slow model turn)
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120)

WEBHOOK_RESPONSES = Counter(
    "engram_webhook_responses",
    "Webhook requests answered, by HTTP status (200 is an acknowledged update).",
    ["code"],
    registry=REGISTRY,
)
WEBHOOK_SECONDS = Histogram(
    "engram_webhook_seconds",
    "Webhook request to its answer (the update stored before a 200).",
    buckets=_BUCKETS,
    registry=REGISTRY,
)
INBOX_DEPTH = Gauge(
    "engram_inbox_depth", "Inbox rows not finished, by status.", ["status"], registry=REGISTRY
)
OUTBOX_DEPTH = Gauge(
    "engram_outbox_depth", "Outbox rows not sent yet, by status.", ["status"], registry=REGISTRY
)
TURNS = Counter(
    "engram_turns", "Turns of the person's messages, by outcome.", ["outcome"], registry=REGISTRY
)
TURN_SECONDS = Histogram(
    "engram_turn_seconds",
    "A turn from its start to its reply committed (model calls and tools included).",
    buckets=_BUCKETS,
    registry=REGISTRY,
)
FIRST_DRAFT_SECONDS = Histogram(
    "engram_first_draft_seconds",
    "A turn's start to its first visible draft (streamed replies).",
    buckets=_BUCKETS,
    registry=REGISTRY,
)
MODEL_CALLS = Counter(
    "engram_model_calls",
    "Model and embedding calls, by purpose, model and result.",
    ["purpose", "model", "ok"],
    registry=REGISTRY,
)
MODEL_TOKENS = Counter(
    "engram_model_tokens",
    "Tokens of model calls, by purpose and kind (input includes cache reads and writes).",
    ["purpose", "kind"],
    registry=REGISTRY,
)
MODEL_COST = Counter(
    "engram_model_cost_usd",
    "US dollars of model calls, by purpose and model (the api_usage table's cost).",
    ["purpose", "model"],
    registry=REGISTRY,
)
MODEL_SECONDS = Histogram(
    "engram_model_call_seconds",
    "Latency of model calls, by purpose.",
    ["purpose"],
    buckets=_BUCKETS,
    registry=REGISTRY,
)
COMPACTIONS = Counter(
    "engram_compactions",
    "Compaction attempts, by outcome (ok, failed, skipped, not_needed, error).",
    ["outcome"],
    registry=REGISTRY,
)
COMPACTION_PATTERNS = Counter(
    "engram_compaction_patterns",
    "Patterns changed by compactions, by change (created, reinforced, contradicted).",
    ["change"],
    registry=REGISTRY,
)
PATTERNS = Gauge("engram_patterns", "Patterns, by status.", ["status"], registry=REGISTRY)
LIVE_ACTORS = Gauge(
    "engram_live_actors",
    "Actors running, by kind (chats: one per active chat; sender, scheduler: singletons).",
    ["kind"],
    registry=REGISTRY,
)
CHAT_LEASES = Gauge(
    "engram_chat_leases",
    "Chats whose lease this process holds (several processes on one database: README Scaling).",
    registry=REGISTRY,
)
CHAT_LEASES_LOST = Counter(
    "engram_chat_leases_lost",
    "Chat leases this process found taken by another at renewal (it stopped serving them).",
    registry=REGISTRY,
)
RESTARTS = Counter(
    "engram_actor_restarts",
    "Actor restarts after a crash, by kind and cause (crash, database outage).",
    ["kind", "cause"],
    registry=REGISTRY,
)
PROACTIVE_SENDS = Counter(
    "engram_proactive_sends",
    "Proactive messages sent, by kind (routine, reminder).",
    ["kind"],
    registry=REGISTRY,
)
PROACTIVE_SKIPS = Counter(
    "engram_proactive_skips",
    "Proactive runs that sent nothing, by reason.",
    ["reason"],
    registry=REGISTRY,
)
DATABASE_UP = Gauge(
    "engram_database_up",
    "1 when the last scrape could read the database's figures, else 0.",
    registry=REGISTRY,
)

_webhook_codes: dict[int, Counter] = {}


def webhook_answered(status: int, seconds: float) -> None:
    child = _webhook_codes.get(status)
    if child is None:
        child = _webhook_codes[status] = WEBHOOK_RESPONSES.labels(str(status))
    child.inc()
    WEBHOOK_SECONDS.observe(seconds)


def turn_finished(outcome: str, seconds: float) -> None:
    TURNS.labels(outcome).inc()
    TURN_SECONDS.observe(seconds)


def first_draft_shown(seconds: float) -> None:
    """A turn's first draft became visible ``seconds`` after the turn started (the drafts'
    hook calls it)."""
    FIRST_DRAFT_SECONDS.observe(seconds)


def model_call(
    *,
    purpose: str,
    model: str,
    ok: bool,
    input_tokens: int,
    output_tokens: int,
    cache_read_tokens: int,
    cache_write_tokens: int,
    cost_usd: float,
    latency_ms: float | None,
) -> None:
    MODEL_CALLS.labels(purpose, model, "true" if ok else "false").inc()
    for kind, n in (
        ("input", input_tokens),
        ("output", output_tokens),
        ("cache_read", cache_read_tokens),
        ("cache_write", cache_write_tokens),
    ):
        if n:
            MODEL_TOKENS.labels(purpose, kind).inc(n)
    if cost_usd > 0:
        MODEL_COST.labels(purpose, model).inc(cost_usd)
    if latency_ms is not None:
        MODEL_SECONDS.labels(purpose).observe(latency_ms / 1000)


def compaction_finished(
    outcome: str, *, created: int = 0, reinforced: int = 0, contradicted: int = 0
) -> None:
    COMPACTIONS.labels(outcome).inc()
    for change, n in (
        ("created", created),
        ("reinforced", reinforced),
        ("contradicted", contradicted),
    ):
        if n:
            COMPACTION_PATTERNS.labels(change).inc(n)


def actor_kind(name: str) -> str:
    """``chats[123]`` -> ``chats``: one label value per kind of actor, never per chat."""
    return name.partition("[")[0]


def actor_restarted(name: str, *, outage: bool) -> None:
    RESTARTS.labels(actor_kind(name), "database" if outage else "crash").inc()


_NOISE = re.compile(r"'[^']*'|\"[^\"]*\"|[0-9][0-9:.\-]*")


def reason_label(reason: str | None) -> str:
    """A bounded label for a free-text reason: the part before ``:``, without quoted names and
    numbers, lower case, words joined by ``_`` (``"daily cap: 3 sent"`` -> ``daily_cap``)."""
    head = (reason or "none").partition(":")[0]
    words = _NOISE.sub(" ", head).lower().split()
    return "_".join(words)[:40] or "none"


def proactive_sent(kind: str) -> None:
    PROACTIVE_SENDS.labels(kind).inc()


def proactive_skipped(reason: str | None) -> None:
    PROACTIVE_SKIPS.labels(reason_label(reason)).inc()
