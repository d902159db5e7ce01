"""Who may talk to the bot while it runs: the allowlist, pairing, and what strangers get.

:class:`ChatAccess` is started with the actor system. Its :attr:`~ChatAccess.allowlist` is the
union of ``TELEGRAM_ALLOWED_CHAT_IDS`` and the chats stored in ``allowed_chats``, held in memory
(ingest tests every update against it, no I/O) and refreshed every ``refresh_interval`` seconds
and at once after a pairing here, so ``engram chats allow`` / ``revoke`` from another process
take effect within seconds. A chat seen newly allowed gets its kept updates moved into the inbox
and its actor woken.

**Pairing.** When no chat is allowed at start (the setting empty and none stored), a one-time
code is made (:func:`~actors.telegram.pairing_codes.new_code`: 10 characters from ``secrets``,
no look-alikes; shared with the other processes on the database) and announced
(printed by ``engram serve`` and logged). The first chat that sends ``/start <code>`` within
``ttl`` seconds (10 minutes) becomes allowed, stored with who sent it; its kept updates are
released and it is told it is paired. The code is compared in constant time
(``hmac.compare_digest``) and works once. Wrong codes count per chat: after ``max_tries`` (5)
a chat's codes are no longer tried, other chats' still are, so strangers cannot lock the owner
out. Across all chats, attempts are paced by a token bucket (``burst`` at once, then one per
``attempt_interval`` seconds: 20, then one every 3 s): an attempt beyond it waits its turn (in
memory, in order; a chat no more of them than it has tries left, ``max_waiting`` in all) instead
of being refused, and is judged by the moment it arrived, so the right code sent in time pairs
even behind a flood of guesses. Its update is kept meanwhile, and released when it pairs.

**Strangers.** Every other update of a chat not allowed is kept (``held_updates``, 24 hours) and
acknowledged; the chat gets the same polite "this bot is private" reply through the outbox
whether pairing is open or not and whatever code it sent, at most once an hour
(``stranger_notices``). See :mod:`actors.telegram.access` for the tables.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Awaitable, Callable, Container, Iterable, Mapping
from typing import Any

import attrs
import trio

from actors.queues import outbox
from actors.queues.outbox import OutboxRow
from actors.telegram import access
from actors.telegram.pairing_codes import MAX_TRIES, PairingCode, SharedCodes, TokenBucket, new_code
from actors.telegram.types import Update, dedupe_keys
from runtime.db import Database, Queries
from runtime.errors import DatabaseError
from runtime.logs import get_logger

log = get_logger(__name__)

PAIRING_TTL = 600.0
ATTEMPT_BURST = 20
ATTEMPT_INTERVAL = 3.0
MAX_WAITING = 10_000
REFRESH_INTERVAL = 5.0
PURGE_INTERVAL = 3600.0

#: every stranger's answer: it says nothing of whether pairing is open or a code was close
PRIVATE = "Sorry, this bot is private."
PAIRED = "Paired: this chat can now talk to engram."


def start_argument(update: Update) -> str | None:
    """The argument of a ``/start <arg>`` (or ``/start@bot <arg>``) message, else None."""
    msg = update.message
    if update.kind != "message" or msg is None or not msg.text:
        return None
    parts = msg.text.split()
    if len(parts) < 2 or parts[0].split("@")[0].lower() != "/start":
        return None
    return parts[1]


def pairing_text(code: str, username: str | None, ttl: float) -> str:
    """How to pair, as ``engram serve`` prints it."""
    to = f"@{username}" if username else "your bot"
    link = f" (or open https://t.me/{username}?start={code})" if username else ""
    return (
        "No chat may talk to this bot yet. To pair yours, send\n\n"
        f"    /start {code}\n\n"
        f"to {to} in Telegram within {ttl / 60:g} minutes{link}. The code works once.\n"
        "To allow a chat by its id instead: engram chats allow ID"
    )


@attrs.frozen
class Attempt:
    """A ``/start <code>`` waiting for its turn: judged by when it arrived."""

    chat_id: int
    user_id: int | None
    given: str
    arrived: float


class Allowlist(Container[int]):
    """The chats allowed now: the setting's and the stored ones (swapped whole on refresh)."""

    def __init__(self, setting: Iterable[int] = (), stored: Iterable[int] = ()) -> None:
        self.setting = frozenset(setting)
        self.stored = frozenset(stored)

    def __contains__(self, chat_id: object) -> bool:
        return chat_id in self.setting or chat_id in self.stored

    def __bool__(self) -> bool:
        return bool(self.setting or self.stored)


@attrs.define(eq=False)
class ChatAccess:
    """The allowlist, pairing and the stranger path of ingest (see the module docstring)."""

    db: Database
    setting: frozenset[int]
    #: wake a chat's actor (the router's ``wake``): its kept updates are in the inbox now
    wake: Callable[[int], None]
    #: tell the sender a reply is waiting (``outbox_ready(chat_id, None)``)
    outbox_ready: Callable[[int, OutboxRow | None], None]
    #: shows the pairing instructions (``engram serve`` prints them); they are logged anyway
    announce: Callable[[str], None] = lambda text: None
    username: str | None = None
    ttl: float = PAIRING_TTL
    max_tries: int = MAX_TRIES
    burst: int = ATTEMPT_BURST
    attempt_interval: float = ATTEMPT_INTERVAL
    max_waiting: int = MAX_WAITING
    clock: Callable[[], float] = time.monotonic
    refresh_interval: float = REFRESH_INTERVAL
    notice_interval: float = access.NOTICE_INTERVAL
    offer: Callable[[Queries, int], Awaitable[object]] | None = None  # after "Paired" (+ button)
    #: every process's open codes (several processes on one database); None: this one's alone
    shared: SharedCodes | None = None
    allowlist: Allowlist = attrs.field(init=False)
    code: PairingCode | None = attrs.field(init=False, default=None)
    bucket: TokenBucket = attrs.field(init=False)
    #: attempts beyond the bucket, in arrival order, and how many each chat has there
    waiting: deque[Attempt] = attrs.field(init=False, factory=deque)
    waiting_by_chat: dict[int, int] = attrs.field(init=False, factory=dict)
    _wake_waiting: trio.Event = attrs.field(init=False, factory=trio.Event)

    def __attrs_post_init__(self) -> None:
        self.allowlist = Allowlist(self.setting)
        self.bucket = TokenBucket(self.burst, self.attempt_interval)

    def __contains__(self, chat_id: object) -> bool:
        """Whether ``chat_id`` is allowed now (ingest's ``allowed_chat_ids``)."""
        return chat_id in self.allowlist

    async def run(
        self, *, task_status: trio.TaskStatus[ChatAccess] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Load the stored chats, open pairing if nobody is allowed, then keep the list fresh."""
        await self.refresh()
        if not self.allowlist:
            code = self.open_pairing()
            if self.shared is not None:
                await self.shared.publish(code.code, self.ttl)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.judge_waiting)
            task_status.started(self)
            await self._keep_fresh()

    async def _keep_fresh(self) -> None:
        purged_at = -PURGE_INTERVAL
        while True:
            await trio.sleep(self.refresh_interval)
            try:
                await self.refresh()
                if trio.current_time() - purged_at >= PURGE_INTERVAL:
                    purged_at = trio.current_time()
                    dropped = await access.purge_held(self.db)
                    if dropped:
                        log.info("access.held_purged", updates=dropped)
            except DatabaseError as exc:  # the next pass tries again
                log.warning("access.refresh_failed", error=str(exc)[:300])

    def open_pairing(self) -> PairingCode:
        """Make and announce a fresh code."""
        self.code = PairingCode(new_code(), self.clock() + self.ttl, self.max_tries)
        self.waiting.clear()
        self.waiting_by_chat.clear()
        log.warning("pairing.open", code=self.code.code, expires_in=self.ttl)
        self.announce(pairing_text(self.code.code, self.username, self.ttl))
        return self.code

    async def refresh(self) -> None:
        """Read the stored chats; each one newly allowed gets its kept updates released and
        its actor woken (``engram chats allow`` may have moved them into the inbox already)."""
        stored = {c.chat_id for c in await access.stored_chats(self.db)}
        new = stored - self.allowlist.stored - self.setting
        self.allowlist = Allowlist(self.setting, stored)
        if new and self.code is not None and self.shared is not None:
            self.code.used = True  # paired through another process: every code is closed
        for chat_id in sorted(new):
            log.info("access.allowed", chat_id=chat_id)
            await self._release(chat_id, wake=True)

    async def _release(self, chat_id: int, *, wake: bool = False) -> None:
        released = await access.release_held(self.db, chat_id)
        if released:
            log.info("access.released", chat_id=chat_id, updates=released)
        if released or wake:
            self.wake(chat_id)

    async def stranger(self, update: Update, payload: Mapping[str, Any]) -> bool:
        """Ingest's path for a chat not allowed: True when this update paired the chat (store
        it as usual); otherwise it is kept and acknowledged (False). ValueError for an update
        that cannot be stored, DatabaseError when storage is down (not acknowledged then)."""
        chat_id = update.chat_id
        if chat_id is None:
            return False
        given = start_argument(update)
        if given is not None:
            msg = update.message
            attempt = Attempt(chat_id, msg.from_user_id if msg else None, given, self.clock())
            if await self.try_code(attempt):
                return True
        await self._hold(chat_id, update, payload)
        return False

    async def try_code(self, attempt: Attempt) -> bool:
        """Judge ``attempt`` now if the bucket allows (True: it paired the chat), else queue it
        for :meth:`judge_waiting` (False). Raises like :meth:`_pair`."""
        if self.code is None:
            return False
        state = self.code.state(attempt.arrived, attempt.chat_id)
        if state != "open":  # no token spent on an attempt that cannot pair
            log.warning("pairing.refused", chat_id=attempt.chat_id, outcome=state)
        elif not self.waiting and self.bucket.take(trio.current_time()):
            return await self._judge(attempt)
        else:
            self._wait(attempt)
        return False

    async def _judge(self, attempt: Attempt) -> bool:
        """Try the code; True when it paired the chat (stored). Raises like :meth:`_pair`."""
        code = self.code
        if code is None:
            return False
        outcome = code.attempt(attempt.chat_id, attempt.given, attempt.arrived)
        if outcome == "paired":
            if await self._pair(attempt):
                return True
            outcome = "used"  # consumed by another process's pairing meanwhile
        elif outcome == "wrong" and self.shared is not None and await self._pair(attempt):
            if left := code.wrong.pop(attempt.chat_id) - 1:  # another process's code: not
                code.wrong[attempt.chat_id] = left  # a wrong one
            code.used = True
            return True
        tries_left = code.tries_left(attempt.chat_id)
        log.warning(
            "pairing.refused", chat_id=attempt.chat_id, outcome=outcome, tries_left=tries_left
        )
        if outcome == "wrong" and tries_left == 0:
            locked = f"{self.max_tries} wrong codes"
            log.warning("pairing.chat_locked", chat_id=attempt.chat_id, reason=locked)
        return False

    def _wait(self, attempt: Attempt) -> None:
        """Queue an attempt beyond the bucket, unless its chat has no tries left for it or
        the queue is full (then it is dropped, logged)."""
        assert self.code is not None
        chat_id = attempt.chat_id
        queued = self.waiting_by_chat.get(chat_id, 0)
        full = len(self.waiting) >= self.max_waiting
        if full or queued >= self.code.tries_left(chat_id):
            why = "queue full" if full else "no tries left"
            log.warning("pairing.refused", chat_id=chat_id, waiting=len(self.waiting), outcome=why)
            return
        self.waiting.append(attempt)
        self.waiting_by_chat[chat_id] = queued + 1
        log.info("pairing.attempt_waits", chat_id=chat_id, waiting=len(self.waiting))
        self._wake_waiting.set()

    async def judge_waiting(self) -> None:
        """Judge queued attempts as the bucket allows, in their order."""
        while True:
            await self._wake_waiting.wait()
            self._wake_waiting = trio.Event()
            while self.waiting:
                await trio.sleep(self.bucket.wait(trio.current_time()))
                if not self.bucket.take(trio.current_time()):
                    continue
                attempt = self.waiting.popleft()
                left = self.waiting_by_chat.pop(attempt.chat_id, 1) - 1
                if left:
                    self.waiting_by_chat[attempt.chat_id] = left
                try:
                    await self._judge(attempt)
                except DatabaseError as exc:  # not stored: the code is open again
                    log.warning(
                        "pairing.store_failed", chat_id=attempt.chat_id, error=str(exc)[:300]
                    )

    async def _pair(self, attempt: Attempt) -> bool:
        """Allow the chat (False: the shared code was not open, nothing written)."""
        chat_id, user_id = attempt.chat_id, attempt.user_id
        try:
            async with self.db.transaction() as conn:
                if self.shared is not None:
                    waited = self.clock() - attempt.arrived
                    if not await self.shared.consume(conn, attempt.given, waited):
                        return False
                    await self.shared.close_all(conn)
                await access.allow_chat(conn, chat_id, "pairing", user_id)
                released = await access.release_held(conn, chat_id)
                await outbox.enqueue_reply(conn, chat_id, PAIRED)
                if self.offer is not None:  # the check-ins offered: actors.chat.proactive_commands
                    await self.offer(conn, chat_id)
        except BaseException:
            if self.code is not None:
                self.code.used = False  # not stored: Telegram's retry may still pair
            raise
        self.allowlist = Allowlist(self.setting, self.allowlist.stored | {chat_id})
        self.waiting.clear()  # the code is used: what waits cannot pair
        self.waiting_by_chat.clear()
        log.warning("pairing.paired", chat_id=chat_id, user_id=user_id, released=released)
        self.outbox_ready(chat_id, None)
        if released:
            self.wake(chat_id)
        return True

    async def _hold(self, chat_id: int, update: Update, payload: Mapping[str, Any]) -> None:
        key = dedupe_keys(update)[0]
        async with self.db.transaction() as conn:
            kept = await access.hold_update(
                conn, key, update.update_id, chat_id, update.kind, payload
            )
            notify = kept and await access.claim_notice(conn, chat_id, self.notice_interval)
            if notify:
                await outbox.enqueue_reply(conn, chat_id, PRIVATE)
        log.info(
            "access.held", chat_id=chat_id, update_id=update.update_id, kept=kept, notified=notify
        )
        if notify:
            self.outbox_ready(chat_id, None)
        if chat_id in self.allowlist:  # allowed meanwhile: do not leave it behind
            await self._release(chat_id)
