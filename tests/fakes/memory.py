"""The in-memory fakes shared by tests: the chat actor's store, agent and Bot API (no
database), a Bot API that answers nothing, a bag-of-words embedder (texts sharing words are
close) and an embedder whose provider is down."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import partial
from typing import Any

import attrs
import numpy as np
import trio
import trio.testing

from actors.agent.turn import TurnInput, TurnReply
from actors.errors import ModelUnavailable
from actors.queues.inbox import InboxRow
from actors.queues.outbox import OutboxRow
from memory.errors import EmbeddingError, LLMUnavailable
from runtime.errors import DatabaseUnavailable, UniqueViolation

CHAT = 42


@attrs.define
class MemoryStore:
    """In-memory ChatStore: rows by id, plus every commit in order."""

    rows: dict[int, InboxRow] = attrs.field(factory=dict)
    commits: list[tuple[str, tuple[int, ...], str | None, float]] = attrs.field(factory=list)
    outbox: list[str] = attrs.field(factory=list)  # every reply and notice, in order
    next_id: int = 1
    received_at: datetime = attrs.field(factory=lambda: datetime.now(UTC))
    blipped: bool = False

    def add(self, payload: dict[str, Any], attempts: int = 0, crashes: int = 0) -> int:
        row_id = self.next_id
        self.next_id += 1
        self.rows[row_id] = InboxRow(
            id=row_id,
            update_key=f"update:{payload['update_id']}",
            update_id=payload["update_id"],
            chat_id=CHAT,
            kind="message",
            payload=payload,
            status="pending",
            attempts=attempts,
            last_error=None,
            received_at=self.received_at,
            processed_at=None,
            crashes=crashes,
        )
        return row_id

    def _set(self, ids: Sequence[int], **changes: Any) -> None:
        for i in ids:
            self.rows[i] = attrs.evolve(self.rows[i], **changes)

    async def take_open(
        self, chat_id: int, after: int, max_attempts: int, max_crashes: int
    ) -> tuple[list[InboxRow], int | None]:
        rows = [
            r
            for r in sorted(self.rows.values(), key=lambda r: r.id)
            if r.status in ("pending", "processing", "failed") and r.id > after
        ]
        claimed = None
        if rows and rows[0].attempts < max_attempts and rows[0].crashes < max_crashes:
            claimed = rows[0].id
            await self.mark_processing(chat_id, [claimed])
        return rows, claimed

    async def mark_processing(self, chat_id: int, ids: Sequence[int]) -> None:
        self._set(ids, status="processing")

    async def mark_failed(self, chat_id: int, ids: Sequence[int], error: str) -> None:
        for i in ids:
            self._set([i], status="failed", attempts=self.rows[i].attempts + 1, last_error=error)

    async def mark_skipped(self, chat_id: int, ids: Sequence[int], reason: str) -> None:
        self._set(ids, status="skipped", last_error=reason)

    async def release(self, chat_id: int, ids: Sequence[int], reason: str) -> None:
        self._set(ids, status="pending", last_error=reason)

    async def notify(self, chat_id: int, text: str) -> OutboxRow | None:
        if self.outbox and self.outbox[-1] == text:
            return None
        self.outbox.append(text)
        return OutboxRow(
            id=len(self.outbox),
            chat_id=chat_id,
            text=text,
            parse_mode=None,
            reply_to_message_id=None,
            inbox_ids=(),
            status="pending",
            attempts=0,
            last_error=None,
            chunks_sent=0,
            telegram_message_ids=(),
            created_at=datetime.now(UTC),
            sent_at=None,
        )

    async def commit(
        self, chat_id: int, reply: TurnReply, inbox_ids: Sequence[int], skipped: str | None
    ) -> None:
        if reply.text == "echo:breaks a constraint":
            raise UniqueViolation("duplicate key value violates unique constraint")
        if reply.text == "echo:db blip" and not self.blipped:
            self.blipped = True
            raise DatabaseUnavailable("connection lost")
        self._set(inbox_ids, status="skipped" if skipped else "done")
        self.commits.append((reply.text, tuple(inbox_ids), skipped, trio.current_time()))
        self.outbox.append(reply.text)


@attrs.define
class Agent:
    """A turn handler that records turns; 'slow' takes 100 s, 'boom' raises."""

    turns: list[tuple[TurnInput, float]] = attrs.field(factory=list)
    store: MemoryStore | None = None
    after_commits: list[tuple[str, int]] = attrs.field(factory=list)
    model_down_until: float = float("-inf")

    async def run_turn(self, turn: TurnInput) -> TurnReply:
        self.turns.append((turn, trio.current_time()))
        if trio.current_time() < self.model_down_until:
            await trio.sleep(110)  # the turn's own retries, then it gives up
            down = LLMUnavailable("connection refused", provider="fake", model="fake")
            raise ModelUnavailable(down)
        if turn.text == "slow":
            await trio.sleep(100)
        if turn.text == "boom":
            raise RuntimeError("model exploded")
        if turn.text.startswith("after"):
            return TurnReply(f"echo:{turn.text[:20]}", after_commit=partial(self.after, turn.text))
        return TurnReply(f"echo:{turn.text[:20]}")

    async def after(self, text: str) -> None:
        """The after-commit hook: records how many commits it saw; 'after boom' raises."""
        self.after_commits.append((text, len(self.store.commits) if self.store else -1))
        if text == "after boom":
            raise RuntimeError("compactor gone")


@attrs.define
class Bot:
    actions: list[float] = attrs.field(factory=list)
    fail: bool = False

    async def send_chat_action(self, chat_id: int | str, action: str = "typing") -> None:
        self.actions.append(trio.current_time())
        if self.fail:
            raise OSError("network down")


def msg(update_id: int, message_id: int, text: str | None = None, **extra: Any) -> dict[str, Any]:
    m: dict[str, Any] = {
        "message_id": message_id,
        "date": 0,
        "chat": {"id": CHAT, "type": "private"},
        "from": {"id": 7, "is_bot": False, "first_name": "A"},
    }
    if text is not None:
        m["text"] = text
    m.update(extra)
    return {"update_id": update_id, "message": m}


DIMS = 64
MODEL = "fake-bow-64"


def bag_of_words(text: str) -> np.ndarray:
    """Hashing bag-of-words, unit-normalised: texts sharing words are close."""
    v = np.zeros(DIMS, dtype=np.float32)
    for word in re.findall(r"[a-z]+", text.lower()):
        v[int(hashlib.sha256(word.encode()).hexdigest(), 16) % DIMS] += 1.0
    norm = float(np.linalg.norm(v))
    return v / norm if norm else v


@attrs.define
class FakeEmbedder:
    model: str = MODEL
    dims: int = DIMS
    fail: bool = False
    calls: list[tuple[list[str], str, int | None]] = attrs.field(factory=list)

    async def embed(
        self, texts: Sequence[str], *, purpose: str, chat_id: int | None = None
    ) -> list[np.ndarray]:
        self.calls.append((list(texts), purpose, chat_id))
        if self.fail:
            raise RuntimeError("embedding service down")
        return [bag_of_words(t) for t in texts]


class DownEmbedder:
    """The local model's name and size, but the provider is down (calls counted)."""

    model, dims = "wordllama-l2-supercat-256", 256

    def __init__(self) -> None:
        self.calls = 0

    async def embed(
        self, texts: Sequence[str], *, purpose: str, chat_id: int | None = None
    ) -> list[np.ndarray]:
        self.calls += 1
        raise EmbeddingError("provider down", retryable=True)


class Quiet:
    """The chat actor's Bot API for typing and tap answers: says nothing."""

    async def send_chat_action(self, chat_id: int | str, action: str = "typing") -> None:
        pass

    async def answer_callback_query(self, callback_query_id: str, text: str | None = None) -> None:
        pass
