"""The agent: a :class:`~actors.agent.turn.TurnHandler` answering with an LLM and the journal tools.

One turn:

1. store the user row at once, in its own transaction (a re-run after a crash finds the same
   row by its ``external_message_id``);
2. build the context (:mod:`actors.agent.context`), ordered to be cached: persona and
   memory instructions, the profile, the summaries of earlier conversation (the chat's newest
   episodes within ``episode_budget``) and the window's older rows, with prompt-cache
   breakpoints (``prompt_cache``: their TTL, None for none); then the retrieved patterns, the
   date and time in the configured time zone and the latest rows with their ages; the window,
   the retrieval, the profile and the episodes are read at once;
3. run the tool loop (:mod:`actors.agent.tool_loop`) under the guardrails (seed 000, "Agent safety
   guardrails"): at most 15 tool calls, 120 s wall clock, stop when the same tool is called
   with identical arguments twice in a row, tool_use/tool_result pairs repaired before every
   request; the model's calls stream to the turn's progress (the draft), inside its stoppable
   scope: stopped, what was written is the reply, marked "(stopped)" (a Stop while step 2
   reads memory: the reply is "(stopped)");
4. return the reply; its ``persist`` hook stores the assistant and tool_result rows (results
   truncated for storage) in the chat actor's outbox transaction, with the messages asking the
   person to confirm what the model's ``forget_memory``/supersede asked for (``confirmations``,
   :class:`~actors.agent.turn.TurnConfirmations`: the model never forgets on its own).

A model that is down (unreachable, timeout, 429, 5xx, 529) is retried inside the turn (see
:mod:`actors.agent.tool_loop`); still down at the turn's deadline, the turn raises
:class:`~actors.errors.ModelUnavailable` (the chat actor tells the person and answers later).
Any other model failure (400, 401, 403, an unusable answer) gives a short "sorry" reply; the
user row stays. When a guardrail trips, the text the model already wrote is
sent, with a note saying why it stopped. When the compaction rule
(:class:`memory.conversation.window.CompactionRule`) says the chat must be compacted — the
next turn's window could not show every uncompacted row, or its estimated context exceeds
``context_token_budget`` — the reply's ``after_commit`` hook calls ``on_over_budget(chat_id)``
(the compactor's trigger) once the chat actor has committed the turn's rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import Any
from zoneinfo import ZoneInfo

import attrs
import trio

from actors.agent.context import PERSONA, TurnContext, build_context
from actors.agent.images import turn_reply_text, with_description
from actors.agent.routine_turn import (
    DECLINE,
    DECLINE_SPEC,
    ROUTINE_NOTE,
    brief_message,
    routine_reply,
)
from actors.agent.tool_loop import (
    STOPPED,
    Guardrails,
    LoopState,
    ToolLoop,
    is_outage,
    tool_specs,
    transcript_rows,
)
from actors.agent.turn import AskFactory, TurnInput, TurnReply
from actors.agent.turn_budget import OverBudget, compaction_reason, log_turn, request_compaction
from actors.agent.turn_links import link_cited_entries
from actors.agent.window_text import BLOCK_ROWS, RECENT_ROWS
from actors.errors import ModelUnavailable
from memory.conversation.episodes import (
    EPISODE_BUDGET_TOKENS,
    Episode,
    EpisodeSource,
    NoEpisodes,
    SqlEpisodes,
    episodes_to_load,
)
from memory.conversation.messages import (
    DEFAULT_WINDOW_LIMIT,
    ChatMessage,
    ConversationStore,
    SqlConversationStore,
)
from memory.conversation.window import CompactionRule
from memory.journal.tools import JOURNAL_TOOLS
from memory.llm.protocol import LLM, CacheTTL, Message, ToolSpec
from memory.patterns.stats import TurnRecorder, record_turn
from memory.retrieval.profile import NoProfile, Profile, ProfileSource, SqlProfile
from memory.retrieval.ranking import local_today
from memory.retrieval.retriever import NoPatterns, PatternRetriever, RetrievedMemory
from memory.tools.registry import QueryEmbedder, Reminders, Tool, ToolContext, ToolRegistry
from runtime.concurrency import both
from runtime.db import Connection, Database, Queries
from runtime.logs import get_logger

log = get_logger(__name__)

Clock = Callable[[], datetime]
#: the breakpoint on the tool loop's last message: read back by the next call of the same
#: turn, seconds later (never worth the 1-hour price)
TOOL_LOOP_CACHE: CacheTTL = "5m"


def wall_clock() -> datetime:
    """The current UTC time (the wall clock, independent of trio's)."""
    return datetime.now(UTC)


# --- the turn handler ----------------------------------------------------------------------------


def _valid_timezone(_: object, __: object, value: str) -> None:
    ZoneInfo(value)  # raises for an unknown zone


@attrs.define(kw_only=True)
class Agent:
    """The :class:`~actors.agent.turn.TurnHandler` of engram (see the module docstring)."""

    llm: LLM
    conversation: ConversationStore
    tools: ToolRegistry
    tool_db: Queries
    timezone: str = attrs.field(validator=_valid_timezone)
    embedder: QueryEmbedder | None = None
    retriever: PatternRetriever = attrs.field(factory=NoPatterns)
    profile: ProfileSource = attrs.field(factory=NoProfile)
    episodes: EpisodeSource = attrs.field(factory=NoEpisodes)
    episode_budget: int = EPISODE_BUDGET_TOKENS
    clock: Clock = wall_clock
    guardrails: Guardrails = attrs.field(factory=Guardrails)
    max_tokens: int = 2048
    window_limit: int = DEFAULT_WINDOW_LIMIT
    retrieval_timeout: float = 10.0
    context_token_budget: int = 40_000
    on_over_budget: OverBudget | None = None
    #: counts the turn (and whether its retrieval degraded) with its commit, for /stats
    turn_stats: TurnRecorder | None = None
    persona: str = PERSONA
    #: the TTL of the context's prompt-cache breakpoints (PROMPT_CACHE_TTL; None: none)
    prompt_cache: CacheTTL | None = "5m"
    #: the window split (:func:`actors.agent.context.split_window`)
    recent_rows: int = RECENT_ROWS
    block_rows: int = BLOCK_ROWS
    #: how the model's forget/supersede ask the person (None: those tools refuse)
    confirmations: AskFactory | None = None
    #: KEEP_PHOTOS: the bytes of a turn's photos are kept (chat_photos)
    keep_photos: bool = False
    #: a chat's reminders for the model's ``schedule_reminder`` (None: that tool refuses)
    reminders: Callable[[int], Reminders] | None = None

    async def run_turn(self, turn: TurnInput) -> TurnReply:
        """Answer one user message (see the module docstring), or run a routine turn
        (:mod:`actors.agent.routine_turn`)."""
        if turn.reason == "routine":
            return await self._routine_turn(turn)
        chat_id = turn.chat_id
        deadline = trio.current_time() + self.guardrails.turn_seconds
        now = self.clock()
        external_id = turn.external_ids[0] if turn.external_ids else None
        progress = turn.progress
        with progress.stoppable() as early:  # a Stop while memory is read is a Stop too
            (user_id, window, memory, episodes), profile = await both(
                lambda: self._store_and_recall(turn, external_id, now),
                lambda: self._profile(chat_id, now),
            )
        if early.cancelled_caught:
            return await self._stopped_early(turn, external_id, now)
        specs = tool_specs(self.tools)
        context = self._context(now, memory, window, episodes, profile, specs, self.persona)
        asks = None if self.confirmations is None else self.confirmations(chat_id)
        tool_ctx = self._tool_context(
            chat_id,
            now,
            confirm=asks,
            reminders=None if self.reminders is None else self.reminders(chat_id),
        )
        loop_cache = TOOL_LOOP_CACHE if self.prompt_cache else None
        loop = ToolLoop(
            self.llm,
            self.tools,
            specs,
            context.blocks,
            tool_ctx,
            self.guardrails,
            self.max_tokens,
            cache=loop_cache,
            on_event=progress.on_event if progress.streaming else None,
        )
        state = LoopState([Message.user(*turn.images, turn.text)])
        with trio.move_on_at(deadline) as scope, progress.stoppable() as stop:
            await loop.run(state, deadline)
        state.halt() if stop.cancelled_caught else state.flush()
        if state.error is not None and is_outage(state.error):
            log_turn(turn, state, memory)
            raise ModelUnavailable(state.error)
        if scope.cancelled_caught:
            state.tripped = "time_limit"
        rows = transcript_rows(state.messages, self.clock())
        log_turn(turn, state, memory)
        text = turn_reply_text(state, bool(turn.images))
        await link_cited_entries(self.tool_db, chat_id, memory.pattern_ids, state.messages, text)
        user_row = ChatMessage(role="user", content=turn.text, created_at=now, id=user_id)
        over = self._over_budget(chat_id, context, len(window), [user_row, *rows])

        day, stats = local_today(now, self.timezone), self.turn_stats

        async def persist(conn: Connection) -> None:
            if rows:
                await self.conversation.add_rows(conn, chat_id, rows)
            if stats is not None:
                await stats(conn, chat_id, day, degraded=memory.degraded)
            if asks is not None:
                await asks.send(conn, turn.inbox_ids)

        compact = partial(request_compaction, self.on_over_budget, chat_id) if over else None
        after = with_description(
            compact, self.llm, self.tool_db, chat_id, external_id, turn.images, self.keep_photos
        )
        keep = bool(rows) or stats is not None or asks is not None
        persisted = persist if keep else None
        return TurnReply(text, persist=persisted, after_commit=after, model_calls=state.llm_calls)

    async def _stopped_early(
        self, turn: TurnInput, external_id: str | None, now: datetime
    ) -> TurnReply:
        """Stopped before the model wrote anything: the person's message is stored (again, if
        the stop cut its insert: found by its id) and the reply says it stopped."""
        if external_id is not None:  # else its insert was the turn's first statement
            await self.conversation.add_user_and_recent(
                turn.chat_id, turn.text, external_id, now, 1
            )
        log.info("agent.stopped_before_generation", chat_id=turn.chat_id)
        return TurnReply(STOPPED)

    async def _routine_turn(self, turn: TurnInput) -> TurnReply:
        """A routine turn (:mod:`actors.agent.routine_turn`): the brief is not stored as the
        person's words; the ``decline`` tool is offered and ends the turn; nothing is stored
        here (the chat actor stores what is sent as the routine's message)."""
        chat_id = turn.chat_id
        deadline = trio.current_time() + self.guardrails.turn_seconds
        now = self.clock()
        (window, (memory, episodes)), profile = await both(
            lambda: both(
                lambda: self.conversation.recent(chat_id, self.window_limit),
                lambda: both(
                    lambda: self._retrieve(chat_id, turn.text), lambda: self._episodes(chat_id)
                ),
            ),
            lambda: self._profile(chat_id, now),
        )
        specs = (*tool_specs(self.tools), DECLINE_SPEC)
        persona = f"{self.persona}\n\n{ROUTINE_NOTE}"
        context = self._context(now, memory, window, episodes, profile, specs, persona)
        tool_ctx = self._tool_context(chat_id, now)
        loop = ToolLoop(
            self.llm,
            self.tools,
            specs,
            context.blocks,
            tool_ctx,
            self.guardrails,
            self.max_tokens,
            stops=frozenset({DECLINE}),
        )
        state = LoopState([Message.user(brief_message(turn))])
        with trio.move_on_at(deadline) as scope:
            await loop.run(state, deadline)
        return routine_reply(state, scope.cancelled_caught, chat_id, turn.routine)

    def _context(
        self,
        now: datetime,
        memory: RetrievedMemory,
        window: Sequence[ChatMessage],
        episodes: Sequence[Episode],
        profile: Profile,
        specs: Sequence[ToolSpec],
        persona: str,
    ) -> TurnContext:
        """The turn's context in its cache-friendly order (:func:`build_context`)."""
        return build_context(
            now=now,
            timezone=self.timezone,
            memory=memory,
            window=window,
            tools=specs,
            persona=persona,
            episodes=episodes,
            episode_budget=self.episode_budget,
            profile=profile,
            cache=self.prompt_cache,
            recent_rows=self.recent_rows,
            block_rows=self.block_rows,
        )

    def _tool_context(self, chat_id: int, now: datetime, **seams: Any) -> ToolContext:
        """What the turn's tools may use (``seams``: how they ask the person, reminders)."""
        return ToolContext(
            db=self.tool_db,
            embedder=self.embedder,
            chat_id=chat_id,
            timezone=self.timezone,
            now=now,
            **seams,
        )

    async def _store_and_recall(
        self, turn: TurnInput, external_id: str | None, now: datetime
    ) -> tuple[int, list[ChatMessage], RetrievedMemory, Sequence[Episode]]:
        """The user row and recent window, the retrieved patterns and the newest episodes,
        fetched concurrently (on three pool connections: none waits for another's round trips;
        the retrieval and the episodes never raise, failing ones degrade)."""
        (user_id, window), (memory, episodes) = await both(
            lambda: self.conversation.add_user_and_recent(
                turn.chat_id, turn.text, external_id, now, self.window_limit
            ),
            lambda: both(
                lambda: self._retrieve(turn.chat_id, turn.text),
                lambda: self._episodes(turn.chat_id),
            ),
        )
        return user_id, list(window), memory, episodes

    async def _episodes(self, chat_id: int) -> Sequence[Episode]:
        """The chat's newest episodes for the section; a failing read shows none."""
        try:
            return await self.episodes.recent(chat_id, episodes_to_load(self.episode_budget))
        except Exception as exc:
            log.warning("agent.episodes_failed", chat_id=chat_id, error=repr(exc))
            return ()

    async def _profile(self, chat_id: int, now: datetime) -> Profile:
        """The person's profile (read alongside the window and the retrieval); a failing read
        shows none."""
        try:
            return await self.profile.load(chat_id, now)
        except Exception as exc:
            log.warning("agent.profile_failed", chat_id=chat_id, error=repr(exc))
            return Profile()

    async def _retrieve(self, chat_id: int, query: str) -> RetrievedMemory:
        """Patterns for the turn; a failing or slow retriever degrades instead of failing."""
        with trio.move_on_after(self.retrieval_timeout):
            try:
                return await self.retriever.retrieve(chat_id, query)
            except Exception as exc:
                log.warning("agent.retrieval_failed", chat_id=chat_id, error=repr(exc))
                return RetrievedMemory(degraded=True)
        log.warning("agent.retrieval_timeout", chat_id=chat_id, seconds=self.retrieval_timeout)
        return RetrievedMemory(degraded=True)

    def _over_budget(
        self, chat_id: int, context: TurnContext, shown: int, new_rows: Sequence[ChatMessage]
    ) -> bool:
        """Whether the compaction rule says the chat must be compacted after this turn
        (:func:`actors.agent.turn_budget.compaction_reason`)."""
        if self.on_over_budget is None:
            return False
        rule = CompactionRule(
            token_budget=self.context_token_budget, keep_recent=0, window_limit=self.window_limit
        )
        return (
            compaction_reason(
                rule, chat_id, context, shown, new_rows, timezone=self.timezone, now=self.clock()
            )
            is not None
        )


def agent_tools(extra_tools: Sequence[Tool[Any]] = ()) -> ToolRegistry:
    """The tools a turn offers: the journal tools plus ``extra_tools`` (e.g. the memory tools).
    Built before the agent, since the compactor estimates the context with the same registry."""
    return ToolRegistry([*JOURNAL_TOOLS, *extra_tools])


def sql_agent(
    db: Database,
    llm: LLM,
    *,
    timezone: str,
    embedder: QueryEmbedder | None = None,
    tools: ToolRegistry | None = None,
    extra_tools: Sequence[Tool[Any]] = (),
    **options: Any,
) -> Agent:
    """The production agent: ``chat_messages`` on ``db``, ``tools`` (by default
    :func:`agent_tools` of ``extra_tools``) on ``db``."""
    options.setdefault("episodes", SqlEpisodes(db))
    options.setdefault("profile", SqlProfile(db, timezone))
    options.setdefault("turn_stats", record_turn)
    return Agent(
        llm=llm,
        conversation=SqlConversationStore(db),
        tools=tools if tools is not None else agent_tools(extra_tools),
        tool_db=db,
        timezone=timezone,
        embedder=embedder,
        **options,
    )
