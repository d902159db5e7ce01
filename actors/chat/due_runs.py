"""A due run in the chat actor (issue 22, design step 2): an inbox row of kind ``routine``
(:data:`actors.scheduler.routine.INBOX_KIND`), taken in the chat's order and never coalesced
with the person's messages.

The run is decoded (:meth:`~actors.scheduler.routine.DueRun.from_payload`), the gates are
checked again (:func:`check_gates`: the person may have written, or turned proactive off, since
the scheduler enqueued it; :mod:`actors.chat.proactive`), and then:

* a reminder: its text sent as it is, after "⏰", no model call;
* a routine: its rule (:meth:`~actors.scheduler.routine.Routine.decide`, database only) —
  None: ``skipped`` ("nothing to say", 0 model calls); a brief's ``text``: sent as it is; a
  brief's ``prompt``: a routine turn (:mod:`actors.agent.routine_turn`) that may decline —
  declined: nothing sent, ``declined`` recorded.

Every outcome is one ``proactive_runs`` row (with the model calls spent), committed with the
inbox row's end; what is sent goes through the outbox like every reply, stored with it as a
routine message (``source='routine'``, its name, full text and summary:
:mod:`memory.conversation.routine_summary`). A bad payload, a run for another chat or an
unknown routine is skipped with a logged reason; a failing rule or turn is ``failed``; nothing
reaches the person but a message meant for them.
"""

from __future__ import annotations

import attrs

from actors.agent.routine_turn import RoutineTurnFailed, looks_like_marker
from actors.agent.turn import TurnInput, TurnReply
from actors.chat.proactive import Outcome, Proactive, record_run
from actors.chat.turns import ChatTurns
from actors.errors import ModelUnavailable
from actors.queues import inbox
from actors.scheduler.routine import DueRun, RoutineContext
from memory.conversation.messages import insert_routine_message
from runtime import metrics
from runtime.db import Connection
from runtime.errors import DatabaseError, DatabaseOutage, DatabaseUnavailable
from runtime.logs import get_logger

log = get_logger(__name__)

#: what a due reminder's message starts with
REMINDER_MARK = "⏰"
NOTHING_TO_SAY = "nothing to say"

# --- one run --------------------------------------------------------------------------------


async def run_due(actor: ChatTurns, row: inbox.InboxRow) -> None:
    """Handle one ``routine`` inbox row of ``actor``'s chat (see the module docstring)."""
    deps, chat_id = actor.deps, actor.chat_id
    actor.received.pop(row.id, None)
    try:
        run = DueRun.from_payload(row.payload)
    except (KeyError, TypeError, ValueError) as exc:
        log.warning(
            "chat.run_bad_payload",
            chat_id=chat_id,
            inbox_id=row.id,
            error=f"{type(exc).__name__}: {exc}",
        )
        await deps.store.mark_skipped(
            chat_id, [row.id], f"bad routine payload: {type(exc).__name__}"
        )
        return
    if run.chat_id != chat_id:
        log.warning("chat.run_wrong_chat", chat_id=chat_id, inbox_id=row.id, run_chat=run.chat_id)
        await deps.store.mark_skipped(chat_id, [row.id], "routine run for another chat")
        return
    proactive = deps.proactive
    if proactive is None:
        log.warning("chat.run_unconfigured", chat_id=chat_id, inbox_id=row.id, name=run.name)
        await deps.store.mark_skipped(chat_id, [row.id], "no proactive lane configured")
        return
    await _Run(actor, proactive, run, row.id).go()


@attrs.frozen
class _Run:
    actor: ChatTurns
    proactive: Proactive
    run: DueRun
    inbox_id: int

    async def go(self) -> None:
        p, run, now = self.proactive, self.run, self.actor.deps.wall_clock()
        routine = p.routines.get(run.name) if run.kind == "routine" else None
        if run.kind == "routine" and routine is None:
            log.warning("chat.run_unknown_routine", chat_id=run.chat_id, name=run.name)
            await self._finish("skipped", f"unknown routine {run.name!r}")
            return
        blocked = await p.check_gates(p.db, run, now)
        if blocked is not None:
            await self._finish("skipped", f"gate: {blocked}")
            return
        if routine is None:  # a reminder
            what = str(run.payload.get("text") or run.payload.get("what") or "").strip()
            if not what:
                await self._finish("skipped", "reminder without text")
                return
            await self._send(f"{REMINDER_MARK} {what}", 0)
            return
        ctx = RoutineContext(
            db=p.db, chat_id=run.chat_id, timezone=p.timezone, now=now, payload=run.payload
        )
        try:
            brief = await routine.decide(ctx)
        except (DatabaseUnavailable, DatabaseOutage):
            raise
        except Exception as exc:
            log.error("chat.routine_rule_failed", chat_id=run.chat_id, name=run.name, exc_info=exc)
            await self._finish("failed", f"rule failed: {type(exc).__name__}")
            return
        if brief is None:
            await self._finish("skipped", NOTHING_TO_SAY)
        elif brief.text is not None:
            await self._send(brief.text, 0)
        elif brief.prompt is not None:
            await self._turn(brief.prompt)

    async def _turn(self, prompt: str) -> None:
        run = self.run
        turn = TurnInput(
            chat_id=run.chat_id,
            text=prompt,
            inbox_ids=(self.inbox_id,),
            message_ids=(),
            external_ids=(f"run:{run.job_id}",),
            reason="routine",
            routine=run.name,
        )
        try:
            reply = await self.actor.deps.turns.run_turn(turn)
        except ModelUnavailable as exc:
            await self._finish("failed", f"model unavailable: {type(exc.cause).__name__}")
            return
        except RoutineTurnFailed as exc:
            await self._finish("failed", str(exc), exc.model_calls)
            return
        except DatabaseError:
            raise  # the database's trouble, not the run's: handled as for any turn
        except Exception as exc:  # no apology to someone who did not write: recorded
            log.error("chat.routine_turn_failed", chat_id=run.chat_id, name=run.name, exc_info=exc)
            await self._finish("failed", f"turn failed: {type(exc).__name__}")
            return
        if reply.declined is not None:
            await self._finish("declined", reply.declined, reply.model_calls)
        elif looks_like_marker(reply.text):  # any handler's: a marker never reaches the person
            await self._finish("declined", "no message (empty or marker reply)", reply.model_calls)
        else:
            await self._send(reply.text, reply.model_calls, reply)

    async def _send(self, text: str, model_calls: int, reply: TurnReply | None = None) -> None:
        """Send ``text`` through the outbox, stored as the routine's message with its summary,
        and record ``sent``, in the reply's commit."""
        run, deps = self.run, self.actor.deps
        summary = await self.proactive.summarizer.summarize(run.chat_id, run.name, text)
        at, calls = deps.wall_clock(), model_calls + summary.model_calls
        extra = reply.persist if reply is not None else None

        async def persist(conn: Connection) -> None:
            if extra is not None:
                await extra(conn)
            await insert_routine_message(conn, run.chat_id, run.name, text, summary.text, at)
            await record_run(conn, run, "sent", None, calls)

        log.info("chat.run_sent", chat_id=run.chat_id, name=run.name, model_calls=calls)
        await self.actor._commit(TurnReply(text, persist=persist), [self.inbox_id])
        metrics.proactive_sent(run.kind)

    async def _finish(self, outcome: Outcome, reason: str, model_calls: int = 0) -> None:
        """Nothing sent: the run's record and its inbox row's end, together."""
        run = self.run
        log.info(
            "chat.run_finished",
            chat_id=run.chat_id,
            name=run.name,
            outcome=outcome,
            reason=reason,
            model_calls=model_calls,
        )
        async with self.proactive.db.transaction() as conn:
            await record_run(conn, run, outcome, reason, model_calls)
            await inbox.mark_skipped(conn, run.chat_id, [self.inbox_id], f"{outcome}: {reason}")
        self.actor.failures = 0
        metrics.proactive_skipped(reason if outcome == "skipped" else outcome)
