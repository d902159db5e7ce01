"""Who may talk to the bot while it runs: the allowlist, pairing, and what strangers get.

:class:`ChatAccess` is started with the actor system. Its :attr:`~ChatAccess.allowlist` is the
union of ``TELEGRAM_ALLOWED_CHAT_IDS`` and the chats stored in ``allowed_chats``, held in memory
(ingest tests every update against it, no I/O) and refreshed every ``refresh_interval`` seconds
and at once after a pairing here, so ``engram chats allow`` / ``revoke`` from another process
take effect within seconds. A chat seen newly allowed gets its kept updates moved into the inbox
and its actor woken.

**Pairing.** When no chat is allowed at start (the setting empty and none stored), a one-time
code is made (:func:`new_code`: 10 characters from ``secrets``, no look-alikes) and announced
(printed by ``engram serve`` and logged). The first chat that sends ``/start <code>`` within
``ttl`` seconds (10 minutes) becomes allowed, stored with who sent it; its kept updates are
released and it is told it is paired. The code is compared in constant time
(``hmac.compare_digest``), works once, and after ``max_tries`` (5) wrong codes pairing is locked
until the process restarts.

**Strangers.** Every other update of a chat not allowed is kept (``held_updates``, 24 hours) and
acknowledged; the chat gets a polite "this bot is private" reply through the outbox, at most
once an hour (``stranger_notices``). See :mod:`actors.telegram.access` for the tables.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections.abc import Callable, Container, Iterable, Mapping
from typing import Any

import attrs
import trio

from actors.queues import outbox
from actors.queues.outbox import OutboxRow
from actors.telegram import access
from actors.telegram.types import Update, dedupe_keys
from runtime.db import Database
from runtime.errors import DatabaseError
from runtime.logs import get_logger

log = get_logger(__name__)

CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I: read off a terminal
CODE_LENGTH = 10
PAIRING_TTL = 600.0
MAX_TRIES = 5
REFRESH_INTERVAL = 5.0
PURGE_INTERVAL = 3600.0

PRIVATE = "Sorry, this bot is private."
PRIVATE_PAIRING = (
    "Sorry, this bot is private. If it is yours, send /start followed by the pairing code "
    "that `engram serve` printed."
)
PAIRED = "Paired: this chat can now talk to engram."


def new_code(length: int = CODE_LENGTH) -> str:
    """A random pairing code (``secrets``), safe in a ``t.me/<bot>?start=`` link."""
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(length))


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


@attrs.define
class PairingCode:
    """The one-time code and its state: open, then used, expired or locked."""

    code: str
    expires_at: float
    tries_left: int = MAX_TRIES
    used: bool = False

    def state(self, now: float) -> str:
        if self.used:
            return "used"
        if self.tries_left <= 0:
            return "locked"
        return "expired" if now >= self.expires_at else "open"

    def attempt(self, given: str, now: float) -> str:
        """``paired`` (the code is now used), ``wrong`` (a try spent) or the closed state."""
        state = self.state(now)
        if state != "open":
            return state
        if hmac.compare_digest(given.encode(), self.code.encode()):
            self.used = True
            return "paired"
        self.tries_left -= 1
        return "wrong"


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
    clock: Callable[[], float] = time.monotonic
    refresh_interval: float = REFRESH_INTERVAL
    notice_interval: float = access.NOTICE_INTERVAL
    allowlist: Allowlist = attrs.field(init=False)
    code: PairingCode | None = attrs.field(init=False, default=None)

    def __attrs_post_init__(self) -> None:
        self.allowlist = Allowlist(self.setting)

    def __contains__(self, chat_id: object) -> bool:
        """Whether ``chat_id`` is allowed now (ingest's ``allowed_chat_ids``)."""
        return chat_id in self.allowlist

    async def run(
        self, *, task_status: trio.TaskStatus[ChatAccess] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Load the stored chats, open pairing if nobody is allowed, then keep the list fresh."""
        await self.refresh()
        if not self.allowlist:
            self.open_pairing()
        task_status.started(self)
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
        log.warning("pairing.open", code=self.code.code, expires_in=self.ttl)
        self.announce(pairing_text(self.code.code, self.username, self.ttl))
        return self.code

    async def refresh(self) -> None:
        """Read the stored chats; each one newly allowed gets its kept updates released and
        its actor woken (``engram chats allow`` may have moved them into the inbox already)."""
        stored = {c.chat_id for c in await access.stored_chats(self.db)}
        new = stored - self.allowlist.stored - self.setting
        self.allowlist = Allowlist(self.setting, stored)
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
        if given is not None and self.code is not None:
            outcome = self.code.attempt(given, self.clock())
            if outcome == "paired":
                await self._pair(chat_id, update)
                return True
            log.warning("pairing.refused", chat_id=chat_id, outcome=outcome,
                        tries_left=self.code.tries_left)  # fmt: skip
            if outcome == "wrong" and self.code.tries_left == 0:
                log.warning("pairing.locked", reason=f"{self.max_tries} wrong codes")
        await self._hold(chat_id, update, payload)
        return False

    async def _pair(self, chat_id: int, update: Update) -> None:
        msg = update.message
        user_id = msg.from_user_id if msg is not None else None
        try:
            async with self.db.transaction() as conn:
                await access.allow_chat(conn, chat_id, "pairing", user_id)
                released = await access.release_held(conn, chat_id)
                await outbox.enqueue_reply(conn, chat_id, PAIRED)
        except BaseException:
            if self.code is not None:
                self.code.used = False  # not stored: Telegram's retry may still pair
            raise
        self.allowlist = Allowlist(self.setting, self.allowlist.stored | {chat_id})
        log.warning("pairing.paired", chat_id=chat_id, user_id=user_id, released=released)
        self.outbox_ready(chat_id, None)
        if released:
            self.wake(chat_id)

    async def _hold(self, chat_id: int, update: Update, payload: Mapping[str, Any]) -> None:
        key = dedupe_keys(update)[0]
        async with self.db.transaction() as conn:
            kept = await access.hold_update(
                conn, key, update.update_id, chat_id, update.kind, payload
            )
            notify = kept and await access.claim_notice(conn, chat_id, self.notice_interval)
            if notify:
                text = PRIVATE_PAIRING if self._pairing_open() else PRIVATE
                await outbox.enqueue_reply(conn, chat_id, text)
        log.info("access.held", chat_id=chat_id, update_id=update.update_id, kept=kept,
                 notified=notify)  # fmt: skip
        if notify:
            self.outbox_ready(chat_id, None)
        if chat_id in self.allowlist:  # allowed meanwhile: do not leave it behind
            await self._release(chat_id)

    def _pairing_open(self) -> bool:
        return self.code is not None and self.code.state(self.clock()) == "open"
