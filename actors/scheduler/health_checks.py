"""The bot's self-check (seed 003 §7), on the database alone: no model call, no Bot API call.

Each check grades one thing ``ok`` | ``warning`` | ``critical`` with a one-line detail:

    inbox        updates waiting (pending or processing) and the oldest one's age
    outbox       replies waiting to be sent and the oldest one's age
    replies      replies that ended ``uncertain`` or were given up (``failed``) lately
    compaction   compaction runs that failed in the last 24 h
    embeddings   rows still lacking a vector of the current embedding model (the backfill's
                 backlog)
    cost         the whole bot's model cost today (in TIMEZONE) against DAILY_COST_ALERT_USD
    model, embedder   the last successful and failed call (``api_usage`` rows: every call is
                 recorded there, failures with ``ok = false``)
    bot_api      the last reply Telegram accepted (``outbox.sent_at``) against open replies
                 whose last attempt failed (the sender is retrying them: Telegram is failing);
                 in the running bot also the client's last answered and failed call (getUpdates
                 every 30 s in polling mode: an outage shows while nobody writes)

The thresholds are the constants below; the grading is pure (:func:`grade`,
:func:`service_check`), the reads are :func:`run_checks`. Used by the heartbeat
(:mod:`actors.scheduler.heartbeat`) and ``engram doctor``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Literal

import attrs

from memory.embeddings.store import missing_count
from memory.llm.usage import usage_summary
from runtime.clock import local
from runtime.db import Queries

Severity = Literal["ok", "warning", "critical"]
RANK: dict[Severity, int] = {"ok": 0, "warning": 1, "critical": 2}

#: seconds the oldest waiting update may wait (messages held by CHAT_TURNS_PER_MINUTE wait a
#: minute; a model outage holds them longer)
INBOX_WARN_AGE, INBOX_CRIT_AGE = 600.0, 3600.0
#: seconds the oldest unsent reply may wait (the sender paces at 1 s a chat, retries outages)
OUTBOX_WARN_AGE, OUTBOX_CRIT_AGE = 300.0, 1800.0
#: replies ended ``uncertain`` or given up within the window
REPLIES_WARN, REPLIES_CRIT = 1, 5
#: compaction runs failed within the last 24 h
COMPACTION_WARN, COMPACTION_CRIT = 1, 3
#: rows lacking a vector of the current model (a journal import makes many: a warning)
EMBEDDINGS_WARN, EMBEDDINGS_CRIT = 500, 5000
#: the share of DAILY_COST_ALERT_USD from which the cost check warns
COST_WARN_SHARE = 0.8
#: an outside service failing with no success for this long is critical (less: a warning)
SERVICE_CRIT_AGE = 1800.0
#: how far back the last success and failure of a service are looked for
SERVICE_LOOKBACK = timedelta(days=7)
DAY = timedelta(days=1)


@attrs.frozen
class Check:
    """One check's outcome."""

    name: str
    severity: Severity
    detail: str


@attrs.frozen
class CheckConfig:
    """What the checks need besides the database."""

    embedding_model: str
    timezone: str = "UTC"
    daily_cost_alert_usd: float | None = None
    #: how far back finished replies are counted: 24 h plus SEND_DEADLINE (a reply is given up
    #: SEND_DEADLINE after it was written)
    replies_window: timedelta = timedelta(days=2)


@attrs.frozen
class Contact:
    """An outside service's last successful and last failed call (None: none seen)."""

    last_ok: datetime | None
    last_failure: datetime | None


def grade(value: float, warn: float, crit: float) -> Severity:
    """``critical`` from ``crit``, ``warning`` from ``warn``, else ``ok``."""
    if value >= crit:
        return "critical"
    return "warning" if value >= warn else "ok"


def worst(checks: Iterable[Check]) -> Severity:
    """The most severe of ``checks`` (``ok`` when there are none)."""
    return max((c.severity for c in checks), key=RANK.__getitem__, default="ok")


def ago(seconds: float) -> str:
    """``45 s``, ``12 min``, ``3.5 h``, ``2.0 d``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 172_800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86_400:.1f} d"


def queue_check(name: str, count: int, oldest: datetime | None, now: datetime) -> Check:
    """A queue (inbox, outbox) graded by its oldest row's age."""
    if count == 0 or oldest is None:
        return Check(name, "ok", "empty")
    age = max(0.0, (now - oldest).total_seconds())
    warn, crit = (
        (INBOX_WARN_AGE, INBOX_CRIT_AGE) if name == "inbox" else (OUTBOX_WARN_AGE, OUTBOX_CRIT_AGE)
    )
    return Check(name, grade(age, warn, crit), f"{count} waiting, oldest {ago(age)}")


def replies_check(uncertain: int, failed: int) -> Check:
    severity = grade(uncertain + failed, REPLIES_WARN, REPLIES_CRIT)
    return Check("replies", severity, f"{uncertain} uncertain, {failed} given up lately")


def compaction_check(failed: int) -> Check:
    severity = grade(failed, COMPACTION_WARN, COMPACTION_CRIT)
    return Check("compaction", severity, f"{failed} failed run(s) in 24 h")


def embeddings_check(missing: int, model: str) -> Check:
    severity = grade(missing, EMBEDDINGS_WARN, EMBEDDINGS_CRIT)
    more = "+" if missing >= EMBEDDINGS_CRIT else ""
    return Check("embeddings", severity, f"{missing}{more} row(s) without a {model} vector")


def cost_check(spent: float, limit: float | None) -> Check:
    if limit is None:
        return Check("cost", "ok", f"${spent:.2f} today (no DAILY_COST_ALERT_USD)")
    severity = grade(spent, COST_WARN_SHARE * limit, limit)
    return Check("cost", severity, f"${spent:.2f} of ${limit:.2f} today")


def service_check(name: str, contact: Contact, now: datetime) -> Check:
    """An outside service: ``ok`` unless its last call failed; failing with no success for
    :data:`SERVICE_CRIT_AGE` (or none seen) is ``critical``."""
    ok, failure = contact.last_ok, contact.last_failure
    if failure is None or (ok is not None and ok >= failure):
        if ok is None:
            return Check(name, "ok", "no calls yet")
        return Check(name, "ok", f"last success {ago((now - ok).total_seconds())} ago")
    since = (
        "no success in 7 d" if ok is None else f"last success {ago((now - ok).total_seconds())} ago"
    )
    down = ok is None or (now - ok).total_seconds() >= SERVICE_CRIT_AGE
    last = ago(max(0.0, (now - failure).total_seconds()))
    return Check(
        name, "critical" if down else "warning", f"failing: last failure {last} ago, {since}"
    )


# --- the reads ---------------------------------------------------------------------------------

_QUEUES = """
/* all chats: operator health overview of the queues */
SELECT
  (SELECT count(*) FROM inbox WHERE status IN ('pending', 'processing')) AS inbox_open,
  (SELECT min(received_at) FROM inbox WHERE status IN ('pending', 'processing')) AS inbox_oldest,
  (SELECT count(*) FROM outbox WHERE status IN ('pending', 'sending')) AS outbox_open,
  (SELECT min(created_at) FROM outbox WHERE status IN ('pending', 'sending')) AS outbox_oldest,
  (SELECT count(*) FROM outbox WHERE status = 'uncertain' AND created_at > $1) AS uncertain,
  (SELECT count(*) FROM outbox WHERE status = 'failed' AND created_at > $1) AS failed,
  (SELECT count(*) FROM compaction_runs WHERE status = 'failed' AND started_at > $2)
    AS compaction_failed,
  (SELECT max(sent_at) FROM outbox WHERE status = 'sent' AND sent_at > $3) AS bot_ok,
  (SELECT max(created_at) FROM outbox
    WHERE status IN ('pending', 'sending') AND attempts > 0 AND last_error IS NOT NULL)
    AS bot_failing
"""

_SERVICES = """
/* all chats: operator health overview of the providers */
SELECT purpose = 'embedding' AS embedder,
       max(created_at) FILTER (WHERE ok) AS last_ok,
       max(created_at) FILTER (WHERE NOT ok) AS last_failure
FROM api_usage WHERE created_at > $1 AND purpose <> 'transcription'
GROUP BY 1
"""


def latest(*times: datetime | None) -> datetime | None:
    return max((t for t in times if t is not None), default=None)


async def run_checks(
    db: Queries, config: CheckConfig, now: datetime, bot_api: Contact | None = None
) -> list[Check]:
    """Every check, read from ``db`` at ``now`` (database errors propagate). ``bot_api``: the
    running process's own record of its Bot API calls (the client's), joined to the outbox's."""
    q = await db.fetchrow(_QUEUES, now - config.replies_window, now - DAY, now - SERVICE_LOOKBACK)
    services = {
        bool(r["embedder"]): Contact(r["last_ok"], r["last_failure"])
        for r in await db.fetch(_SERVICES, now - SERVICE_LOOKBACK)
    }
    missing = await missing_count(db, config.embedding_model, EMBEDDINGS_CRIT)
    since = local(now, config.timezone).replace(hour=0, minute=0, second=0, microsecond=0)
    usage = await usage_summary(
        db, since=since, until=now + timedelta(seconds=1), tz=config.timezone
    )
    # the Bot API is failing while a retried reply's last attempt failed: since when is not
    # stored, so the failure is "now" (its age shows in the outbox check)
    seen = bot_api or Contact(None, None)
    bot = Contact(
        latest(q["bot_ok"], seen.last_ok),
        latest(now if q["bot_failing"] is not None else None, seen.last_failure),
    )
    none = Contact(None, None)
    return [
        queue_check("inbox", q["inbox_open"], q["inbox_oldest"], now),
        queue_check("outbox", q["outbox_open"], q["outbox_oldest"], now),
        replies_check(q["uncertain"], q["failed"]),
        compaction_check(q["compaction_failed"]),
        embeddings_check(missing, config.embedding_model),
        cost_check(usage.total.cost_usd, config.daily_cost_alert_usd),
        service_check("bot_api", bot, now),
        service_check("model", services.get(False, none), now),
        service_check("embedder", services.get(True, none), now),
    ]


def render(checks: Sequence[Check]) -> list[str]:
    """One line a check: ``warning   inbox        12 waiting, oldest 14 min``."""
    return [f"{c.severity:<9} {c.name:<11} {c.detail}" for c in checks]
