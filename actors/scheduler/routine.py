"""What a routine is, and the inbox row that carries one run of a job to its chat's actor.

A routine decides before anything is spent: :meth:`Routine.decide` is a deterministic rule on the
database alone, and only when it returns a :class:`Brief` is anything sent — the brief's ``text``
as it is (no model call), or the model asked with ``prompt`` in a ``routine`` turn that may
decline. A reminder the person asked for carries its text and needs no rule.

A due run reaches the chat's actor as an inbox row (kind :data:`INBOX_KIND`, key
:func:`update_key`: one row per job and due time, so two schedulers cannot enqueue a run twice),
in the chat's order with the person's messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal, Protocol

import attrs

from actors.agent.turn import Reason
from runtime.db import Queries

#: the inbox ``kind`` of a due run
INBOX_KIND = "routine"


@attrs.frozen
class RoutineContext:
    """What a rule may look at: the chat, its time zone and the moment of the run."""

    db: Queries
    chat_id: int
    timezone: str
    now: datetime
    payload: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class Brief:
    """What a routine has to say: ``text`` sent as it is, or ``prompt`` for the model (a
    ``routine`` turn that may decline). Exactly one of the two."""

    text: str | None = None
    prompt: str | None = None

    def __attrs_post_init__(self) -> None:
        if (self.text is None) == (self.prompt is None):
            raise ValueError("a Brief has exactly one of text and prompt")


class Routine(Protocol):
    """One routine: a name (the job's name, shown in ``/routines`` and the window's label), a
    title for people, its default cron schedule (local time), and the rule."""

    @property
    def name(self) -> str: ...

    @property
    def title(self) -> str: ...

    @property
    def default_schedule(self) -> str: ...

    async def decide(self, ctx: RoutineContext) -> Brief | None:
        """The rule, on the database alone: None when there is nothing worth saying."""
        ...


@attrs.frozen
class DueRun:
    """One run of a job, as its inbox row's payload."""

    job_id: int
    chat_id: int
    name: str
    kind: Literal["routine", "reminder"]
    due_at: datetime
    payload: Mapping[str, Any] = attrs.field(factory=dict)

    @property
    def reason(self) -> Reason:
        return "reminder" if self.kind == "reminder" else "routine"

    def to_payload(self) -> dict[str, Any]:
        return {
            "engram_run": {
                "job_id": self.job_id,
                "chat_id": self.chat_id,
                "name": self.name,
                "kind": self.kind,
                "due_at": self.due_at.isoformat(),
                "payload": dict(self.payload),
            }
        }

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> DueRun:
        run = payload["engram_run"]
        kind = run["kind"]
        if kind not in ("routine", "reminder"):
            raise ValueError(f"unknown run kind {kind!r}")
        return cls(
            job_id=int(run["job_id"]),
            chat_id=int(run["chat_id"]),
            name=str(run["name"]),
            kind=kind,
            due_at=datetime.fromisoformat(run["due_at"]),
            payload=dict(run.get("payload") or {}),
        )


def update_key(job_id: int, due_at: datetime) -> str:
    """The inbox key of a run: one row per job and due time."""
    return f"run:{job_id}:{int(due_at.timestamp())}"
