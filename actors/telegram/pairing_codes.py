"""The pairing code itself: made at random, tried in constant time, one-time, per-chat tries
(:class:`PairingCode`), the pace of attempts (:class:`TokenBucket`), and the codes every
process of one database shares (:class:`SqlPairingCodes`).

With several ``engram serve`` processes on one database each announces a code of its own, and a
``/start <code>`` may reach any of them (a load balancer in front of the webhook). So every
open code is also a row of ``pairing_codes`` (its SHA-256, never the code; expiry on the
server's clock): any process pairs a chat with any live code, the row is consumed in the
pairing's own transaction (two processes cannot both pair with it), and the first pairing
closes every code (nobody pairs a second chat by another process's code).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Protocol

import attrs

from runtime.db import Database, Queries

CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I: read off a terminal
CODE_LENGTH = 10
MAX_TRIES = 5


def new_code(length: int = CODE_LENGTH) -> str:
    """A random pairing code (``secrets``), safe in a ``t.me/<bot>?start=`` link."""
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(length))


@attrs.define
class PairingCode:
    """The one-time code and its state: open, then used or expired; per chat, locked after
    ``max_tries`` wrong codes (other chats are not affected)."""

    code: str
    expires_at: float
    max_tries: int = MAX_TRIES
    used: bool = False
    #: wrong codes so far, by chat
    wrong: dict[int, int] = attrs.field(factory=dict)

    def tries_left(self, chat_id: int) -> int:
        return max(0, self.max_tries - self.wrong.get(chat_id, 0))

    def state(self, now: float, chat_id: int | None = None) -> str:
        """``used``, ``expired``, ``locked`` (for ``chat_id``) or ``open``."""
        if self.used:
            return "used"
        if now >= self.expires_at:
            return "expired"
        if chat_id is not None and self.tries_left(chat_id) <= 0:
            return "locked"
        return "open"

    def attempt(self, chat_id: int, given: str, now: float) -> str:
        """``paired`` (the code is now used), ``wrong`` (one of the chat's tries spent) or the
        closed state; ``now`` is when the attempt arrived."""
        state = self.state(now, chat_id)
        if state != "open":
            return state
        if hmac.compare_digest(given.encode(), self.code.encode()):
            self.used = True
            return "paired"
        self.wrong[chat_id] = self.wrong.get(chat_id, 0) + 1
        return "wrong"


@attrs.define
class TokenBucket:
    """``burst`` tokens, one more every ``interval`` seconds: how fast codes are tried."""

    burst: int
    interval: float
    tokens: float = attrs.field(init=False)
    stamp: float | None = attrs.field(init=False, default=None)

    def __attrs_post_init__(self) -> None:
        self.tokens = float(self.burst)

    def _fill(self, now: float) -> None:
        if self.stamp is not None:
            self.tokens = min(float(self.burst), self.tokens + (now - self.stamp) / self.interval)
        self.stamp = now

    def take(self, now: float) -> bool:
        """Spend a token if there is one."""
        self._fill(now)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def wait(self, now: float) -> float:
        """Seconds until a token is there (0 when one is)."""
        self._fill(now)
        return max(0.0, (1.0 - self.tokens) * self.interval)


def code_digest(code: str) -> bytes:
    """What the database keeps of a code (a 50-bit random code: its hash gives nothing away)."""
    return hashlib.sha256(code.encode("utf-8", "replace")).digest()


class SharedCodes(Protocol):
    """The open codes of every process on the database."""

    async def publish(self, code: str, ttl: float) -> None: ...

    async def consume(self, conn: Queries, given: str, waited: float) -> bool: ...

    async def close_all(self, conn: Queries) -> None: ...


@attrs.frozen
class SqlPairingCodes:
    """:class:`SharedCodes` in ``pairing_codes`` (a reference table: no chat)."""

    db: Database
    owner: str

    async def publish(self, code: str, ttl: float) -> None:
        """Make ``code`` valid in every process for ``ttl`` seconds (expired rows dropped)."""
        async with self.db.transaction() as conn:
            await conn.execute("DELETE FROM pairing_codes WHERE expires_at < now()")
            await conn.execute(
                "INSERT INTO pairing_codes (digest, owner, expires_at) "
                "VALUES ($1, $2, now() + make_interval(secs => $3)) ON CONFLICT DO NOTHING",
                code_digest(code),
                self.owner,
                ttl,
            )

    async def consume(self, conn: Queries, given: str, waited: float) -> bool:
        """Take the code ``given`` if it is open (it was when the attempt arrived, ``waited``
        seconds ago): inside the pairing's transaction, so a failed pairing leaves it open."""
        got = await conn.fetchval(
            "DELETE FROM pairing_codes WHERE digest = $1 "
            "AND expires_at > now() - make_interval(secs => $2) RETURNING true",
            code_digest(given),
            max(0.0, waited),
        )
        return bool(got)

    async def close_all(self, conn: Queries) -> None:
        """A chat is paired: no code pairs another (every process's)."""
        await conn.execute("DELETE FROM pairing_codes")
