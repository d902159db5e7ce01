"""The heartbeat: the bot's self-check every HEARTBEAT_INTERVAL seconds, and one alert per
incident to the owner chat (seed 003 §7.4).

Each pass runs :func:`~actors.scheduler.health_checks.run_checks` (the database alone: no model
call), keeps the result for ``/readyz`` (:meth:`Heartbeat.report`) and compares it with the
checks already alerted (:func:`alert_step`, pure): a check that crosses from ``ok`` to
``warning`` or ``critical`` joins one message to the owner chat; while it stays bad (warning to
critical included) nothing more is sent; when it is ``ok`` again one "recovered" line is sent
and the check may alert again. The alerted set is persisted (``bot_state`` key
:data:`STATE_KEY`), so a restart during an incident does not repeat its alert. Every process
checks itself (its ``/readyz``); with several processes on one database only the one holding
the named lease ``heartbeat_alerts`` (:attr:`Heartbeat.gate`) alerts, so an incident is told once.

The message goes through the outbox like any reply (the sender's outbox sweep finds it within
its sweep interval, 30 s). The owner chat is ALERT_CHAT_ID, else the first paired (stored)
chat, else the first of TELEGRAM_ALLOWED_CHAT_IDS; with none the alert is only logged.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Collection, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import attrs
import trio

from actors.queues import outbox
from actors.scheduler.health_checks import Check, CheckConfig, Contact, run_checks, worst
from actors.telegram.access import stored_chats
from runtime.db import Queries
from runtime.logs import get_logger

log = get_logger(__name__)

#: the ``bot_state`` row holding the names of the checks alerted and not yet recovered
STATE_KEY = "heartbeat.alerted"
#: the named lease of the one process per database that alerts
ALERT_LEASE = "heartbeat_alerts"
ALERT_HEAD = "⚠️ engram health"
RECOVERED_HEAD = "✅ engram health"


@attrs.frozen
class AlertStep:
    """What one pass changes: the checks alerted after it and the message to send (or None)."""

    alerted: frozenset[str]
    message: str | None


def alert_step(alerted: Collection[str], checks: Sequence[Check]) -> AlertStep:
    """The once-per-incident rule: alert a check newly bad, say once that it recovered,
    stay silent otherwise. A check absent from ``checks`` keeps its state."""
    now_bad = {c.name for c in checks if c.severity != "ok"}
    seen = {c.name for c in checks}
    new = [c for c in checks if c.name in now_bad and c.name not in alerted]
    recovered = [c for c in checks if c.name in alerted and c.name not in now_bad]
    lines = [f"{c.name}: {c.severity} — {c.detail}" for c in new]
    lines += [f"{c.name}: recovered — {c.detail}" for c in recovered]
    kept = {name for name in alerted if name not in seen}
    after = frozenset(kept | now_bad)
    if not lines:
        return AlertStep(after, None)
    head = ALERT_HEAD if new else RECOVERED_HEAD
    return AlertStep(after, "\n".join([head, *lines]))


class AlertSink(Protocol):
    """Where alerts go and where the alerted set is kept."""

    async def load(self) -> frozenset[str]: ...
    async def save(self, alerted: frozenset[str]) -> None: ...
    async def send(self, text: str) -> None: ...


@attrs.define(eq=False)
class SqlAlerts:
    """Alerts through the outbox to the owner chat; the alerted set in ``bot_state``."""

    db: Queries
    alert_chat_id: int | None = None
    allowed_chat_ids: Collection[int] = ()

    async def owner(self) -> int | None:
        """ALERT_CHAT_ID, else the first stored (paired) chat, else the first allowed one."""
        if self.alert_chat_id is not None:
            return self.alert_chat_id
        stored = await stored_chats(self.db)
        if stored:
            return stored[0].chat_id
        return min(self.allowed_chat_ids, default=None)

    async def load(self) -> frozenset[str]:
        raw = await self.db.fetchval("SELECT value FROM bot_state WHERE key = $1", STATE_KEY)
        value = json.loads(raw) if isinstance(raw, str) else raw
        return frozenset(str(v) for v in value or ())

    async def save(self, alerted: frozenset[str]) -> None:
        await self.db.execute(
            "INSERT INTO bot_state (key, value) VALUES ($1, $2::jsonb) ON CONFLICT (key) "
            "DO UPDATE SET value = EXCLUDED.value, updated_at = now()",
            STATE_KEY,
            json.dumps(sorted(alerted)),
        )

    async def send(self, text: str) -> None:
        chat_id = await self.owner()
        if chat_id is None:
            log.warning("heartbeat.no_alert_chat", alert=text)
            return
        await outbox.enqueue_reply(self.db, chat_id, text)
        log.info("heartbeat.alert_sent", chat_id=chat_id)


def _utcnow() -> datetime:
    return datetime.now(UTC)


@attrs.define(eq=False)
class Heartbeat:
    """The periodic self-check (a job of :data:`actors.wiring.JOBS`): ``run`` checks at once,
    then every ``interval`` seconds; a failed pass (the database down) is logged and the next
    one runs on schedule."""

    checks: Callable[[], Awaitable[list[Check]]]
    alerts: AlertSink
    interval: float
    clock: Callable[[], datetime] = _utcnow
    latest: list[Check] = attrs.field(factory=list, init=False)
    checked_at: datetime | None = attrs.field(default=None, init=False)
    passes: int = attrs.field(default=0, init=False)
    failures: int = attrs.field(default=0, init=False)
    #: True while this process speaks for the database (several processes: one alerts, see
    #: :meth:`BotSystem.run`); None: this process alone
    gate: Callable[[], Awaitable[bool]] | None = attrs.field(default=None, init=False)
    _alerted: frozenset[str] | None = attrs.field(default=None, init=False)

    async def run(
        self, *, task_status: trio.TaskStatus[Heartbeat] = trio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started(self)
        while True:
            try:
                await self.beat()
            except Exception as exc:  # a database hiccup must not end the heartbeat
                self.failures += 1
                log.warning("heartbeat.failed", error=f"{type(exc).__name__}: {exc}")
            await trio.sleep(self.interval)

    async def beat(self) -> list[Check]:
        """One pass: check, keep the result, alert on a change; the checks."""
        checks = await self.checks()
        self.latest, self.checked_at = checks, self.clock()
        if self.gate is None or await self.gate():
            await self._alert(checks)
        else:  # another process alerts; taking over later starts from what it saved
            self._alerted = None
        self.passes += 1  # a whole pass: its alert is in the outbox
        for check in checks:
            if check.severity != "ok":
                log.warning(
                    "heartbeat.check",
                    check=check.name,
                    severity=check.severity,
                    detail=check.detail,
                )
        return checks

    async def _alert(self, checks: list[Check]) -> None:
        if self._alerted is None:
            self._alerted = await self.alerts.load()
        step = alert_step(self._alerted, checks)
        if step.message is not None:
            await self.alerts.send(step.message)
        if step.alerted != self._alerted:
            await self.alerts.save(step.alerted)
        self._alerted = step.alerted

    def report(self) -> dict[str, Any]:
        """The latest result, for ``/readyz``'s body."""
        if self.checked_at is None:
            return {"status": "pending", "checks": {}}
        return {
            "status": worst(self.latest),
            "checked_at": self.checked_at.isoformat(),
            "checks": {c.name: {"severity": c.severity, "detail": c.detail} for c in self.latest},
        }


def sql_heartbeat(
    db: Queries,
    config: CheckConfig,
    *,
    interval: float,
    alert_chat_id: int | None = None,
    allowed_chat_ids: Collection[int] = (),
    bot_api: Callable[[], Contact] | None = None,
    clock: Callable[[], datetime] = _utcnow,
) -> Heartbeat:
    """The heartbeat on the real database (the composition root builds it); ``bot_api``: the
    Bot API client's record of its last answered and failed calls."""

    async def checks() -> list[Check]:
        return await run_checks(db, config, clock(), None if bot_api is None else bot_api())

    alerts = SqlAlerts(db, alert_chat_id, allowed_chat_ids)
    return Heartbeat(checks, alerts, interval, clock)


class CheckSettings(Protocol):
    """The settings the checks read (a :class:`~actors.settings.Settings` is one)."""

    @property
    def timezone(self) -> str: ...
    @property
    def daily_cost_alert_usd(self) -> float | None: ...
    @property
    def send_deadline(self) -> float: ...


def check_config(settings: CheckSettings, embedding_model: str) -> CheckConfig:
    """The checks' configuration from the bot's settings."""
    return CheckConfig(
        embedding_model=embedding_model,
        timezone=settings.timezone,
        daily_cost_alert_usd=settings.daily_cost_alert_usd,
        replies_window=timedelta(days=1, seconds=settings.send_deadline),
    )
