"""The chat actor's state and its turns (:class:`ChatTurns`, the base of
:class:`actors.chat.actor.ChatActor`, which reads the inbox into it): the texts taken are
coalesced into turns (:func:`actors.chat.limits.coalesce`) unless the chat is at a per-chat
limit (then they wait, the person told once); a turn runs with ``typing`` shown and can be
stopped by ``/stop`` or Telegram's Stop button, its reply streamed as a draft
(:mod:`actors.chat.drafts`); a model outage postpones it (``MODEL_AWAY``, retried on a timer until
``model_deadline``, then ``MODEL_GAVE_UP``); the reply, the outbox row and the inbox rows'
end are committed together.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from contextlib import nullcontext
from datetime import datetime

import attrs
import trio

from actors.agent.turn import TurnInput, TurnReply
from actors.chat import fragments, limits
from actors.chat.deps import ChatDeps
from actors.chat.drafts import ChatProgress, DraftStream
from actors.chat.typing_indicator import typing_while
from actors.errors import ModelUnavailable
from actors.telegram.errors import PhotoError
from memory.llm.protocol import ImageBlock
from runtime import metrics
from runtime.backoff import backoff_delay
from runtime.errors import (
    DatabaseError,
)
from runtime.logs import get_logger

log = get_logger(__name__)

SORRY = "Sorry, something went wrong on my side. Please try again in a moment."
UNSUPPORTED = "I can read text, photos and voice messages, but not this kind of message yet."


def photo_text(count: int, caption: str) -> str:
    """The person's words of a photo turn (stored as the user row): says photos were sent."""
    said = "[sent a photo]" if count == 1 else f"[sent {count} photos]"
    return f"{said} {caption}".strip()


MODEL_AWAY = "I can't reach my model right now; I'll answer as soon as it's back."
MODEL_GAVE_UP = (
    "Sorry, my model stayed unreachable for too long, so I could not answer one of your "
    "messages. Please send it again."
)


@attrs.define
class ChatTurns:
    """A chat actor's state, and the turns it runs."""

    chat_id: int
    deps: ChatDeps
    state: fragments.Reassembler = attrs.field(factory=fragments.Reassembler)
    cursor: int = 0  # highest inbox id already taken into memory
    sources: dict[int, tuple[str, str]] = attrs.field(factory=dict)  # inbox id -> (ext id, kind)
    in_hand: tuple[int, ...] = ()  # the rows being processed: charged if it raises
    received: dict[int, datetime] = attrs.field(factory=dict)  # inbox id -> received_at
    retry_at: float | None = None  # the model is down: when to retry the chat's oldest row
    model_failures: int = 0  # postponements in a row (the retry backoff's exponent)
    failures: int = 0  # failures since a row was last answered (the retry's exponent)
    ready: list[fragments.Flushed] = attrs.field(factory=list)  # taken, for the next turn
    held: list[fragments.Flushed] = attrs.field(factory=list)  # waiting for a per-chat limit
    held_until: float | None = None  # when the limit lets the held messages' turn start
    told_limit: bool = False  # the person was told the chat is at its limit (once)
    turn_starts: list[float] = attrs.field(factory=list)  # recent turns (the rate limit)
    turns_run: int = 0

    def _forget(self) -> None:
        self.state, self.cursor, self.in_hand = fragments.Reassembler(), 0, ()
        self.ready, self.held, self.held_until = [], [], None
        self.sources.clear()
        self.received.clear()

    def _ext(self, inbox_id: int) -> str:
        return self.sources.pop(inbox_id, (f"inbox:{inbox_id}", "text"))[0]

    # --- turns ---------------------------------------------------------------------------------

    async def _run_flushed(self, flushed: Sequence[fragments.Flushed]) -> None:
        """Turns for the texts taken so far and ``flushed``: consecutive ones together
        (:func:`actors.chat.limits.coalesce`), unless the chat is at a limit (then they wait)."""
        batch = limits.coalesce([*self.ready, *flushed])
        self.ready = []
        for n, item in enumerate(batch):
            fetch = self.deps.photos if item.photos else None
            if not item.text.strip() and fetch is None:
                await self._commit(TurnReply(UNSUPPORTED), item.update_ids, skipped="no text")
                continue
            if await self._held(batch[n:]):
                return
            images: tuple[ImageBlock, ...] = ()
            if fetch is not None:
                try:
                    async with typing_while(self.deps.bot, self.chat_id, self.deps.typing_interval):
                        images = await fetch(item.photos)
                except PhotoError as exc:  # str(exc) is meant for the person
                    await self._commit(TurnReply(str(exc)), item.update_ids)
                    continue
            kinds = {self.sources.get(i, ("", "text"))[1] for i in item.update_ids}
            turn = TurnInput(
                chat_id=self.chat_id,
                text=photo_text(len(images), item.text) if images else item.text,
                inbox_ids=tuple(item.update_ids),
                message_ids=tuple(item.message_ids),
                external_ids=tuple(self._ext(i) for i in item.update_ids),
                sender_id=item.sender_id or None,
                kind="photo" if images else "media_group" if "media_group" in kinds else "text",
                images=images,
            )
            await self._run_turn(turn)

    async def _reclaim_and_run(self, held: Sequence[fragments.Flushed]) -> None:
        """The held messages' turn, now that the limit allows it (claimed again first)."""
        ids = [i for item in held for i in item.update_ids]
        self.in_hand = tuple(ids)
        await self.deps.store.mark_processing(self.chat_id, ids)
        await self._run_flushed(held)

    async def _held(self, items: Sequence[fragments.Flushed]) -> bool:
        """True when the chat is at a per-chat limit (:mod:`actors.chat.limits`): ``items``
        then wait, handed back to the inbox uncharged, for :attr:`held_until`; the person is
        told once."""
        deps, now = self.deps, trio.current_time()
        until, why = self.held_until, ""
        if until is None:
            until, why = limits.next_turn_at(self.turn_starts, now, deps.turns_per_minute), "rate"
        if until is None and deps.daily_cost_usd is not None and deps.spent_today is not None:
            wall = deps.wall_clock()
            if await deps.spent_today(self.chat_id, wall) >= deps.daily_cost_usd:
                renew = deps.next_day(wall) if deps.next_day is not None else wall
                until, why = now + max(1.0, (renew - wall).total_seconds()), "cost"
        if until is None:
            return False
        ids = [i for item in items for i in item.update_ids]
        self.held += items
        self.held_until = until
        await deps.store.release(self.chat_id, ids, "waiting: per-chat limit")
        if not self.told_limit and why:
            self.told_limit = True
            text = limits.RATE_LIMITED if why == "rate" else limits.COST_LIMITED
            notice = await deps.store.notify(self.chat_id, text)
            if notice is not None:
                deps.outbox_ready(self.chat_id, notice if notice.status == "sending" else None)
            log.info("chat.limited", limit=why, inbox_ids=ids, wait=round(until - now, 1))
        return True

    async def _run_turn(self, turn: TurnInput) -> None:
        self.in_hand = turn.inbox_ids
        self.told_limit = False
        self.turns_run += 1
        self.turn_starts = [
            *self.turn_starts[-max(1, self.deps.turns_per_minute) :],
            trio.current_time(),
        ]
        drafts = self.deps.drafts if turn.reason == "user_message" else None
        stream = drafts.open(self.chat_id) if drafts is not None else None
        turn = attrs.evolve(turn, progress=ChatProgress(self.chat_id, self.deps.running, stream))
        try:
            await self._answer(turn, stream)
        finally:
            if stream is not None:  # the edit mode's placeholder goes, the reply being queued
                stream.finish()

    async def _answer(self, turn: TurnInput, stream: DraftStream | None) -> None:
        """Run the turn (its draft shown while it runs), then commit its reply."""
        reply: TurnReply | None = None
        outage: ModelUnavailable | None = None
        started, outcome = time.perf_counter(), "ok"
        with trio.CancelScope() as scope:  # Stop before the generation began stops all of it
            self.deps.running.register(self.chat_id, scope, stream.draft_id if stream else None)
            try:
                async with (
                    typing_while(self.deps.bot, self.chat_id, self.deps.typing_interval),
                    stream if stream is not None else nullcontext(),
                ):
                    reply = await self.deps.turns.run_turn(turn)
            except ModelUnavailable as exc:
                outage = exc
            except DatabaseError:
                raise  # the rows' failure or the database's (see _charging), not a SORRY
            except Exception as exc:
                log.error("chat.turn_failed", inbox_ids=list(turn.inbox_ids), exc_info=exc)
                reply, outcome = TurnReply(SORRY), "failed"
            finally:
                self.deps.running.unregister(self.chat_id, scope)
        if outage is not None:
            if await self._postpone(turn, outage):
                metrics.turn_finished("postponed", time.perf_counter() - started)
                raise outage  # leaves the actor's loops: the chat's later rows wait behind it
            reply, outcome = TurnReply(MODEL_GAVE_UP), "model_gave_up"
        self.model_failures = 0  # the model answered, or the wait for it is over
        if scope.cancelled_caught or reply is None:
            log.info("chat.turn_stopped", inbox_ids=list(turn.inbox_ids))
            await self.deps.store.mark_skipped(self.chat_id, turn.inbox_ids, "stopped by /stop")
            metrics.turn_finished("stopped", time.perf_counter() - started)
            return
        await self._commit(reply, turn.inbox_ids)
        metrics.turn_finished(outcome, time.perf_counter() - started)
        if reply.after_commit is not None:
            try:
                await reply.after_commit()
            except Exception as exc:  # the reply is committed: nothing to undo, keep going
                log.error("chat.after_commit_failed", inbox_ids=list(turn.inbox_ids), exc_info=exc)

    async def _postpone(self, turn: TurnInput, outage: ModelUnavailable) -> bool:
        """The model is down: hand the turn's rows back uncharged, tell the person (once), and
        retry the chat's oldest open row later, forgetting what is in memory (it is all in the
        inbox). False when the turn's oldest row is past ``model_deadline``: answer it."""
        deps, ids = self.deps, turn.inbox_ids
        arrived = [self.received[i] for i in ids if i in self.received]
        age = (deps.wall_clock() - min(arrived)).total_seconds() if arrived else 0.0
        cause = type(outage.cause).__name__
        if age >= deps.model_deadline:
            log.error("chat.model_gave_up", inbox_ids=list(ids), age=round(age), cause=cause)
            return False
        await deps.store.release(self.chat_id, ids, str(outage))
        notice = await deps.store.notify(self.chat_id, MODEL_AWAY)
        if notice is not None:
            deps.outbox_ready(self.chat_id, notice if notice.status == "sending" else None)
        base, cap = deps.model_retry_base, deps.model_retry_cap
        delay = backoff_delay(
            self.model_failures, base=base, cap=cap, jitter=0.2, draw=random.random()
        )
        self.model_failures += 1
        self.retry_at = trio.current_time() + delay
        self._forget()
        log.warning(
            "chat.model_unavailable",
            inbox_ids=list(ids),
            cause=cause,
            retry_in=round(delay, 3),
            told=notice is not None,
        )
        return True

    async def _commit(
        self, reply: TurnReply, inbox_ids: Sequence[int], *, skipped: str | None = None
    ) -> None:
        """Commit the reply and finish the rows (see :class:`ChatStore`); then notify."""
        self.in_hand = tuple(inbox_ids)
        claimed = await self.deps.store.commit(self.chat_id, reply, inbox_ids, skipped)
        self.failures = 0  # rows answered: the next failure is a new row's
        for row_id in inbox_ids:
            self.received.pop(row_id, None)
        self.deps.outbox_ready(self.chat_id, claimed)
