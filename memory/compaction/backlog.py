"""The compaction sweep: the maintenance job that compacts what no turn asks for.

Turns ask for a compaction when the compaction rule says so
(:class:`memory.conversation.window.CompactionRule`); two cases need no turn:

* **idle chats** — nobody has written for ``COMPACTION_IDLE_AFTER`` and rows lie beyond
  ``COMPACTION_KEEP_RECENT``: compacted round after round down to ``keep_recent`` (at most the
  rule's ``max_rounds``), so a short conversation's facts become patterns the same night;
* **backlogs** — chats holding more uncompacted rows than a turn's window shows (databases
  from before the rule counted rows, when short messages never reached the token budget):
  compacted oldest first and throttled, one chunk per chat per pass.

:class:`CompactionSweep` runs a pass at start and then every ``MAINTENANCE_INTERVAL``: it lists
the chats with rows beyond ``keep_recent`` (:class:`SqlBacklog`, one aggregate over the
uncompacted rows' index), applies the rule to each (rows and idle time; the token budget is the
turns' to check, as only a new message grows it), and compacts the due ones, chats whose oldest
uncompacted row is oldest first, at most ``max_chunks`` chunks per pass. Each chunk goes through
the same compaction as a turn's request (the chat's advisory lock, the rule re-checked inside it),
so the sweep and the compactor actor never compact one chat at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Protocol

import attrs

from memory.compaction.run import CompactionOutcome
from memory.conversation.window import CompactionRule, Reason, WindowState
from runtime.db import Queries
from runtime.logs import get_logger
from runtime.periodic import PeriodicJob

log = get_logger(__name__)

#: chunks (extraction calls) one pass compacts at most, over all chats
SWEEP_CHUNKS = 20
#: outcomes that spent an extraction call (``not_needed`` and ``skipped`` cost no model call)
SPENT = frozenset({"ok", "failed"})
CompactOnce = Callable[[int], Awaitable[CompactionOutcome]]


@attrs.frozen
class ChatBacklog:
    """A chat's uncompacted rows: how many, and the times of the oldest and newest."""

    chat_id: int
    rows: int
    oldest_at: datetime
    newest_at: datetime

    def state(self, now: datetime) -> WindowState:
        """The rule's view at ``now`` (tokens left to the turns: 0)."""
        return WindowState(
            rows=self.rows, tokens=0, idle_seconds=(now - self.newest_at).total_seconds()
        )


class BacklogStore(Protocol):
    """Where the sweep finds candidates (SQL in production, memory in timer tests)."""

    async def backlog(self, keep_recent: int) -> Sequence[ChatBacklog]:
        """Chats with more than ``keep_recent`` uncompacted rows, oldest first."""
        ...


_BACKLOG = """
/* all chats: the compactor's backlog scan */
SELECT chat_id, count(*) AS n, min(created_at) AS oldest_at, max(created_at) AS newest_at
FROM chat_messages WHERE compacted_at IS NULL
GROUP BY chat_id HAVING count(*) > $1
ORDER BY min(created_at), chat_id
"""


@attrs.frozen
class SqlBacklog:
    """:class:`BacklogStore` on ``chat_messages`` (``idx_chat_messages_active``)."""

    db: Queries

    async def backlog(self, keep_recent: int) -> Sequence[ChatBacklog]:
        return [
            ChatBacklog(r["chat_id"], int(r["n"]), r["oldest_at"], r["newest_at"])
            for r in await self.db.fetch(_BACKLOG, keep_recent)
        ]


def wall_clock() -> datetime:
    return datetime.now(UTC)


@attrs.frozen
class SweepResult:
    """One pass: ``(chat_id, reason, statuses of its chunks)`` per chat it compacted."""

    chats: tuple[tuple[int, Reason, tuple[str, ...]], ...] = ()
    deferred: int = 0  # due chats left for the next pass (the pass's chunks were spent)

    @property
    def chunks(self) -> int:
        """Extraction calls the pass spent."""
        return sum(s in SPENT for _, _, statuses in self.chats for s in statuses)


class CompactionSweep(PeriodicJob):
    """The maintenance job compacting idle chats and old backlogs (see the module docstring)."""

    name = "compaction_sweep"

    def __init__(
        self,
        store: BacklogStore,
        compact: CompactOnce,
        rule: CompactionRule,
        *,
        interval: float,
        max_chunks: int = SWEEP_CHUNKS,
        clock: Callable[[], datetime] = wall_clock,
    ) -> None:
        super().__init__(interval)
        self.store, self.compact, self.rule = store, compact, rule
        self.max_chunks, self.clock = max_chunks, clock
        self.compacted = 0  # chunks compacted since start

    async def run_once(self) -> SweepResult:
        now = self.clock()
        done: list[tuple[int, Reason, tuple[str, ...]]] = []
        budget, deferred = self.max_chunks, 0
        for chat in await self.store.backlog(self.rule.keep_recent):
            reason = self.rule.reason(chat.state(now))
            if reason is None or reason == "tokens":
                continue
            if budget <= 0:
                deferred += 1
                continue
            statuses: list[str] = []
            rounds = 1 if reason == "rows" else self.rule.max_rounds
            while len(statuses) < rounds and budget > 0:
                outcome = await self.compact(chat.chat_id)
                statuses.append(outcome.status)
                budget -= outcome.status in SPENT  # a check that found nothing to do is free
                self.compacted += outcome.status == "ok"
                if outcome.status != "ok":
                    break
            done.append((chat.chat_id, reason, tuple(statuses)))
            log.info(
                "compaction_sweep.chat",
                chat_id=chat.chat_id,
                reason=reason,
                rows=chat.rows,
                chunks=statuses,
            )
        if deferred:
            log.info("compaction_sweep.deferred", chats=deferred, max_chunks=self.max_chunks)
        return SweepResult(tuple(done), deferred)
