"""The CompactorActor: compaction decoupled from the turns (seed 000, "Concurrency safety").

    agent turn -> over budget -> compactor.request(chat_id)   (non-blocking, coalesced)
    CompactorActor (singleton): one chat at a time -> compact_chat(...) round after round
        while each round compacts something (at most ``max_rounds``), under the chat's
        advisory lock; the compaction rule is re-checked inside the lock every round

The mailbox is a bounded queue of chat ids: a chat already waiting is not queued twice (a
request for the chat being compacted right now is queued once more, so messages that arrived
meanwhile are looked at); a full mailbox drops the request with a warning (the next turn over
budget asks again). A failing compaction is logged and the actor carries on with the next chat.
On shutdown (:meth:`CompactorActor.aclose`) it refuses new requests, finishes the compaction in
hand and drops the queued ones: they are re-requested by the next turn over budget.

:class:`WindowEstimate` feeds the re-check of the compaction rule
(:class:`memory.conversation.window.CompactionRule`, the agent's own): the uncompacted rows
(counted up to the window), the seconds since the newest one, and the tokens by the agent's own
estimate (:func:`actors.agent.context.context_tokens` over the system prompt, the recent window
and the tool definitions) plus allowances for the retrieved patterns (the retriever's
2,000-token budget) and the episode summaries (``EPISODE_BUDGET_TOKENS``), so the compactor
never thinks a chat is under budget while the agent thinks it is over.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import attrs
import trio

from actors.agent.context import PERSONA, build_context
from actors.agent.handler import wall_clock
from actors.agent.tool_loop import tool_specs
from actors.settings import Settings
from memory.compaction.run import CompactionOptions, CompactionOutcome, compact_chat
from memory.conversation.episodes import EPISODE_BUDGET_TOKENS
from memory.conversation.messages import DEFAULT_WINDOW_LIMIT, recent_rows, repair_rows
from memory.conversation.window import CompactionRule, WindowState
from memory.embeddings.providers import Embedder
from memory.embeddings.thresholds import thresholds_for
from memory.llm.protocol import LLM, CacheTTL
from memory.patterns.dedup import Adjudicator
from memory.retrieval.ranking import PATTERN_BUDGET_TOKENS
from memory.retrieval.retriever import RetrievedMemory
from memory.tools.registry import ToolRegistry
from runtime.actor import Mailbox
from runtime.db import Database, Queries
from runtime.errors import ActorStopped, MailboxFull
from runtime.logs import get_logger

log = get_logger(__name__)

PATTERNS_ALLOWANCE = PATTERN_BUDGET_TOKENS  # the retriever's injected-pattern budget (seed 000)
CompactOnce = Callable[[int], Awaitable[CompactionOutcome]]


@attrs.frozen
class WindowEstimate:
    """The chat's window as the compaction rule sees it: rows (up to ``window_limit``: one
    more than a turn shows), the estimated tokens of its next turn and the seconds since its
    newest row (see the module docstring)."""

    db: Queries
    timezone: str
    tools: ToolRegistry
    window_limit: int = DEFAULT_WINDOW_LIMIT
    patterns_allowance: int = PATTERNS_ALLOWANCE
    episodes_allowance: int = EPISODE_BUDGET_TOKENS
    persona: str = PERSONA
    clock: Callable[[], datetime] = wall_clock
    #: the agent's PROMPT_CACHE_TTL: the context estimated as the agent lays it out
    cache: CacheTTL | None = None

    async def __call__(self, chat_id: int) -> WindowState:
        rows = await recent_rows(self.db, chat_id, self.window_limit)
        now = self.clock()
        context = build_context(
            now=now,
            timezone=self.timezone,
            memory=RetrievedMemory(),
            window=repair_rows(rows),
            tools=tool_specs(self.tools),
            persona=self.persona,
            cache=self.cache,
        )
        tokens = context.estimated_tokens + self.patterns_allowance + self.episodes_allowance
        idle = (now - rows[-1].created_at).total_seconds() if rows else 0.0
        return WindowState(rows=len(rows), tokens=tokens, idle_seconds=idle)


@attrs.define(eq=False)
class CompactorActor:
    """The singleton compactor (see the module docstring)."""

    compact: CompactOnce
    capacity: int = 64
    max_rounds: int = 10
    #: called with the chat after a round that compacted something (the vault's ``mark``)
    on_compacted: Callable[[int], None] | None = None
    #: the latest outcomes, newest last (observability and tests)
    outcomes: deque[CompactionOutcome] = attrs.field(factory=lambda: deque(maxlen=100))
    failures: int = 0
    dropped: int = 0
    _box: Mailbox[int] = attrs.field(init=False)
    _queued: set[int] = attrs.field(init=False, factory=set)
    _current: int | None = attrs.field(init=False, default=None)
    _stopping: bool = attrs.field(init=False, default=False)
    _started: bool = attrs.field(init=False, default=False)
    _done: trio.Event = attrs.field(init=False, factory=trio.Event)
    _idle: trio.Event = attrs.field(init=False, factory=trio.Event)

    def __attrs_post_init__(self) -> None:
        self._box = Mailbox("compactor", capacity=self.capacity)
        self._idle.set()

    # --- the sending side ------------------------------------------------------------------------

    def request(self, chat_id: int) -> None:
        """Ask for a compaction of ``chat_id``; returns at once (the agent's ``on_over_budget``)."""
        if self._stopping or chat_id in self._queued:
            return
        try:
            self._box.send_nowait(chat_id)
        except MailboxFull:
            self.dropped += 1
            log.warning("compactor.mailbox_full", chat_id=chat_id, capacity=self.capacity)
            return
        except ActorStopped:
            return
        self._queued.add(chat_id)
        self._idle = trio.Event()

    @property
    def pending(self) -> int:
        """Chats waiting (not counting the one being compacted)."""
        return len(self._queued)

    async def wait_idle(self) -> None:
        """Return once nothing is queued or in progress."""
        await self._idle.wait()

    async def aclose(self) -> None:
        """Refuse new requests, finish the compaction in hand, drop the queued ones."""
        self._stopping = True
        self._box.close_sending()
        if self._started:
            await self._done.wait()

    # --- the actor ---------------------------------------------------------------------------

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        self._started = True
        try:
            with self._box.inbox as inbox:
                task_status.started(self)
                async for chat_id in inbox:
                    self._queued.discard(chat_id)
                    if self._stopping:
                        log.info("compactor.dropped_at_shutdown", chat_id=chat_id)
                    else:
                        self._current = chat_id
                        try:
                            await self._compact(chat_id)
                        finally:
                            self._current = None
                    if not self._queued:
                        self._idle.set()
        finally:
            self._idle.set()
            self._done.set()

    async def _compact(self, chat_id: int) -> None:
        """Round after round while each one compacts something (a backlog takes several)."""
        for _ in range(self.max_rounds):
            try:
                outcome = await self.compact(chat_id)
            except Exception as exc:  # one chat's failure must not stop the compactor
                self.failures += 1
                log.error("compactor.failed", chat_id=chat_id, error=f"{type(exc).__name__}: {exc}")
                return
            self.outcomes.append(outcome)
            if outcome.status == "ok" and self.on_compacted is not None:
                self.on_compacted(chat_id)
            if outcome.status == "failed":
                self.failures += 1
            if outcome.status != "ok":
                return
        log.info("compactor.rounds_exhausted", chat_id=chat_id, rounds=self.max_rounds)


def sql_compactor(
    db: Database,
    llm: LLM,
    embedder: Embedder,
    settings: Settings,
    *,
    tools: ToolRegistry,
    adjudicator: Adjudicator | None = None,
    capacity: int = 64,
) -> CompactorActor:
    """The production compactor: :func:`memory.compaction.run.compact_chat` with the settings'
    keep-recent, chunk size, thresholds and compaction rule, the rule re-checked on
    :class:`WindowEstimate` over ``tools`` (the agent's registry); a request takes as many
    rounds as the rule may need (:attr:`CompactionRule.max_rounds`)."""
    rule = CompactionRule.from_settings(settings)
    options = CompactionOptions(
        timezone=settings.timezone,
        keep_recent=settings.compaction_keep_recent,
        max_messages=settings.compaction_chunk_messages,
        rule=rule,
        thresholds=thresholds_for(embedder.model, settings),
    )
    estimate = WindowEstimate(
        db,
        settings.timezone,
        tools,
        episodes_allowance=settings.episode_budget_tokens,
        cache=settings.prompt_cache(),
        window_limit=rule.window_limit,
    )

    async def once(chat_id: int) -> CompactionOutcome:
        return await compact_chat(
            db, llm, embedder, chat_id, options=options, estimate=estimate, adjudicator=adjudicator
        )

    return CompactorActor(once, capacity=capacity, max_rounds=rule.max_rounds)
