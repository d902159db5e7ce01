"""The heartbeat (:mod:`actors.scheduler.heartbeat`): one alert per incident, on a MockClock
through in-memory fakes; the SQL alerts (owner chat, outbox row, the persisted alerted set)
on the real database."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from functools import partial

import attrs
import trio
import trio.testing

from actors.queues.lease_store import SqlLeases
from actors.scheduler.health_checks import Check, Severity
from actors.scheduler.heartbeat import (
    ALERT_HEAD,
    ALERT_LEASE,
    RECOVERED_HEAD,
    STATE_KEY,
    Heartbeat,
    SqlAlerts,
    alert_step,
)
from actors.telegram.access import allow_chat
from runtime.db import Database

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def inbox(severity: Severity) -> Check:
    return Check("inbox", severity, f"inbox is {severity}")


@attrs.define
class MemoryAlerts:
    """The alert sink in memory: what was sent, and the alerted set a restart finds."""

    sent: list[tuple[float, str]] = attrs.field(factory=list)
    alerted: frozenset[str] = frozenset()
    saves: int = 0

    async def load(self) -> frozenset[str]:
        return self.alerted

    async def save(self, alerted: frozenset[str]) -> None:
        self.alerted, self.saves = alerted, self.saves + 1

    async def send(self, text: str) -> None:
        self.sent.append((trio.current_time(), text))


def test_alert_step_alerts_once_and_recovers_once() -> None:
    first = alert_step(frozenset(), [inbox("warning"), Check("cost", "ok", "$0")])
    assert first.alerted == {"inbox"}
    assert first.message is not None and first.message.startswith(ALERT_HEAD)
    assert "inbox: warning — inbox is warning" in first.message and "cost" not in first.message
    assert alert_step(first.alerted, [inbox("critical")]).message is None  # same incident
    assert alert_step(first.alerted, [inbox("warning")]).message is None
    healed = alert_step(first.alerted, [inbox("ok")])
    assert healed.alerted == frozenset()
    assert healed.message == f"{RECOVERED_HEAD}\ninbox: recovered — inbox is ok"
    assert alert_step(frozenset(), [inbox("ok")]).message is None


def test_alert_step_keeps_a_check_that_was_not_run() -> None:
    step = alert_step(frozenset({"inbox"}), [Check("cost", "ok", "$0")])
    assert step.alerted == {"inbox"} and step.message is None


async def run_beats(beat: Heartbeat, count: int) -> None:
    """``count`` passes of ``beat`` (one at start, then one every interval)."""
    async with trio.open_nursery() as nursery:
        await nursery.start(beat.run)
        await trio.sleep(beat.interval * (count - 1) + 1)
        nursery.cancel_scope.cancel()


def script_checks(
    script: list[Severity], run_at: list[float]
) -> Callable[[], Awaitable[list[Check]]]:
    async def checks() -> list[Check]:
        run_at.append(trio.current_time())
        return [inbox(script[len(run_at) - 1])]

    return checks


async def test_one_alert_per_incident_on_a_mock_clock(
    autojump_clock: trio.testing.MockClock,
) -> None:
    script: list[Severity] = ["ok", "warning", "critical", "warning", "ok", "ok", "critical", "ok"]
    run_at: list[float] = []
    sink = MemoryAlerts()
    beat = Heartbeat(script_checks(script, run_at), sink, interval=60.0, clock=lambda: T0)
    await run_beats(beat, len(script))
    assert run_at == [60.0 * i for i in range(len(script))]
    assert [(at, text.splitlines()[0]) for at, text in sink.sent] == [
        (60.0, ALERT_HEAD),  # ok -> warning: the one alert
        (240.0, RECOVERED_HEAD),  # critical and warning again said nothing; ok: recovered once
        (360.0, ALERT_HEAD),  # a new incident
        (420.0, RECOVERED_HEAD),
    ]
    assert sink.saves == 4  # the alerted set is written only when it changes
    assert beat.report() == {
        "status": "ok",
        "checked_at": T0.isoformat(),
        "checks": {"inbox": {"severity": "ok", "detail": "inbox is ok"}},
    }


async def test_a_restart_during_an_incident_does_not_repeat_its_alert(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sink = MemoryAlerts()
    first = Heartbeat(script_checks(["warning", "critical"], []), sink, interval=30.0)
    await run_beats(first, 2)
    assert len(sink.sent) == 1 and sink.alerted == {"inbox"}
    again = Heartbeat(script_checks(["critical", "ok"], []), sink, interval=30.0)  # restarted
    await run_beats(again, 2)
    assert [text.splitlines()[0] for _, text in sink.sent] == [ALERT_HEAD, RECOVERED_HEAD]


async def test_a_failing_pass_is_counted_and_the_next_runs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls: list[float] = []

    async def checks() -> list[Check]:
        calls.append(trio.current_time())
        if len(calls) == 1:
            raise ConnectionError("database gone")
        return [inbox("ok")]

    beat = Heartbeat(checks, MemoryAlerts(), interval=10.0)
    assert beat.report() == {"status": "pending", "checks": {}}
    await run_beats(beat, 2)
    assert (beat.failures, beat.passes, calls) == (1, 1, [0.0, 10.0])


# --- the SQL alerts, on the real database -------------------------------------------------------


async def test_alerts_go_to_the_alert_chat_through_the_outbox(db: Database) -> None:
    alerts = SqlAlerts(db, alert_chat_id=-100123, allowed_chat_ids={5, 7})
    await alerts.send("⚠️ engram health\ninbox: warning")
    rows = await db.fetch("SELECT chat_id, text, status FROM outbox")
    assert [(r["chat_id"], r["text"], r["status"]) for r in rows] == [
        (-100123, "⚠️ engram health\ninbox: warning", "pending")
    ]


async def test_the_owner_is_the_first_paired_chat_else_the_first_allowed(db: Database) -> None:
    alerts = SqlAlerts(db, allowed_chat_ids={42, 17})
    assert await alerts.owner() == 17
    await allow_chat(db, 900, "pairing", user_id=1)
    await db.execute("UPDATE allowed_chats SET allowed_at = now() - interval '1 day'")
    await allow_chat(db, 800, "pairing", user_id=2)
    assert await alerts.owner() == 900  # the first paired, not the smallest id
    assert await SqlAlerts(db).owner() == 900
    assert await SqlAlerts(db, alert_chat_id=3).owner() == 3


async def test_no_owner_chat_sends_nothing(db: Database) -> None:
    await SqlAlerts(db).send("alert")
    assert await db.fetchval("SELECT count(*) FROM outbox") == 0


async def test_the_alerted_set_survives_in_bot_state(db: Database) -> None:
    alerts = SqlAlerts(db)
    assert await alerts.load() == frozenset()
    await alerts.save(frozenset({"outbox", "cost"}))
    assert await SqlAlerts(db).load() == {"cost", "outbox"}
    assert await db.fetchval("SELECT count(*) FROM bot_state WHERE key = $1", STATE_KEY) == 1
    await alerts.save(frozenset())
    assert await alerts.load() == frozenset()


async def test_several_processes_alert_an_incident_once(db: Database) -> None:
    """Two processes on one database, both seeing the check go bad and come back: one alert
    and one recovery, from the process holding the alert lease; the other only checks. When
    the alerter is gone, the other takes over from the alerted set it saved."""
    sink = SqlAlerts(db, alert_chat_id=-100777)
    procs = [Heartbeat(script_checks([], []), sink, interval=60.0) for _ in range(2)]
    for i, beat in enumerate(procs):
        leases = SqlLeases(db, f"host-{i}", f"host-{i}/run")
        beat.gate = partial(leases.acquire_named, ALERT_LEASE, 3 * beat.interval)

    async def both(severity: Severity) -> None:
        for beat in procs:
            beat.checks = lambda: fixed(severity)
            await beat.beat()

    async def fixed(severity: Severity) -> list[Check]:
        return [inbox(severity)]

    async def heads() -> list[str]:
        rows = await db.fetch("SELECT text FROM outbox WHERE chat_id = -100777 ORDER BY id")
        return [str(r["text"]).splitlines()[0] for r in rows]

    await both("warning")
    await both("critical")
    assert await heads() == [ALERT_HEAD]
    assert all(beat.latest[0].severity == "critical" for beat in procs)  # both check
    await db.execute("UPDATE process_leases SET expires_at = now() WHERE name = $1", ALERT_LEASE)
    await procs[1].beat()  # the alerter is gone: the other takes over, knowing it was told
    assert await heads() == [ALERT_HEAD]
    procs[1].checks = lambda: fixed("ok")
    await procs[1].beat()
    assert await heads() == [ALERT_HEAD, RECOVERED_HEAD]
