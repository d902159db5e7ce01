"""The composition root: the whole bot from :class:`~actors.settings.Settings` and a database.

:func:`open_bot` builds every component in dependency order and yields a :class:`Bot`:

    usage writer -> Bot API client (one, shared by the system and the voice transcriber)
      -> chat and memory models (:func:`~memory.llm.factory.open_llm`) -> embedder
      (:func:`~memory.embeddings.factory.open_embedder`) -> thresholds, BM25 lexicons -> tool
      registry -> compactor -> agent (``on_over_budget=compactor.request``, model confirmations)
      -> periodic jobs (:data:`JOBS`) -> scheduler and proactive controls
      (:mod:`actors.scheduler`) -> chat commands and buttons -> :class:`BotSystem`

:meth:`Bot.serve` runs it as a process (:func:`runtime.serve.serve`: migrations, the HTTP app,
signals) until shutdown; the system's own start steps are in :meth:`BotSystem.run`.

Where things go: a new actor is a start step of :meth:`BotSystem.run` (its parts built here); a
new periodic job is one line of :data:`JOBS`; a new HTTP route comes back from the system in
its :class:`~runtime.serve.SystemHandle`; a new LLM provider goes to :mod:`memory.llm`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from typing import Any

import attrs

from actors.agent.handler import Agent, agent_tools, sql_agent
from actors.chat.callbacks import CallbackTable
from actors.chat.commands import command_table
from actors.chat.deps import Transcriber
from actors.chat.export_command import ExportCommand
from actors.chat.memory_commands import MemoryServices
from actors.chat.model_asks import model_asks
from actors.chat.proactive_commands import ChatReminders, Controls
from actors.compactor import CompactorActor, sql_compactor
from actors.dashboard.context import DashboardDeps
from actors.dashboard.pages import dashboard_blueprint
from actors.scheduler.gates import Limits
from actors.scheduler.health_checks import Contact
from actors.scheduler.heartbeat import Heartbeat, check_config, sql_heartbeat
from actors.scheduler.routine import Routine
from actors.scheduler.routines import all_routines
from actors.scheduler.scheduler import Scheduler, SqlDueStore
from actors.settings import Settings
from actors.system import BotSystem
from actors.telegram.client import BotApiClient
from actors.telegram.photos import download_photos
from actors.telegram.types import Voice
from actors.vault.writer import sql_vault_writer
from actors.web.routes import web_blueprints
from memory.compaction.backlog import CompactionSweep, SqlBacklog
from memory.conversation.purge import PurgeJob
from memory.conversation.routine_summary import RoutineSummarizer
from memory.conversation.window import CompactionRule
from memory.embeddings.factory import open_embedder
from memory.embeddings.providers import Embedder
from memory.embeddings.store import EmbeddingBackfill
from memory.embeddings.thresholds import Thresholds, thresholds_for
from memory.llm.factory import max_image_bytes, open_llm, preload
from memory.llm.protocol import LLM
from memory.llm.usage_writer import open_usage_writer
from memory.patterns.dedup import LLMAdjudicator
from memory.patterns.maintenance import ChatIndexJob, PatternTtlJob
from memory.retrieval.profile import SqlProfile
from memory.retrieval.retriever import SqlPatternRetriever
from memory.retrieval.sql import LexiconCache
from memory.tools.memory_tools import memory_tools
from memory.tools.registry import ToolRegistry
from memory.tools.reminder_tools import REMINDER_TOOLS
from memory.vault.settings import vault_root
from runtime.cli import version
from runtime.db import Database, Queries
from runtime.serve import serve
from runtime.shutdown import Shutdown

#: the Bot API client of a bot without Telegram (only local chats): never called, and a call
#: by mistake fails at once (the discard port of the loopback)
NO_TELEGRAM_TOKEN = "0:" + "x" * 35
NO_TELEGRAM_URL = "http://127.0.0.1:9"


def dashboard(settings: Settings, db: Database, services: MemoryServices, system: BotSystem) -> Any:
    """The dashboard's pages (``DASHBOARD_TOKEN`` is set)."""
    vault = vault_root(settings.vault_dir, settings.home) if settings.vault == "on" else None
    deps = DashboardDeps(
        db,
        settings.dashboard_token.reveal(),
        services,
        vault_root=vault,
        reports=system.reports,
        allowed=settings.telegram_allowed_chat_ids,
        live_actors=lambda: system.live_chats(),
        on_change=system.vault_mark,
    )
    return dashboard_blueprint(deps)


@attrs.frozen
class Parts:
    """The components built before the system, which the periodic jobs are built from."""

    settings: Settings
    db: Database
    bot: BotApiClient
    llm: LLM
    memory_llm: LLM
    embedder: Embedder
    thresholds: Thresholds
    lexicons: LexiconCache
    tools: ToolRegistry
    compactor: CompactorActor
    agent: Agent


#: a started job's task: ``run(*, task_status)``
JobRun = Callable[..., Awaitable[None]]


@attrs.frozen
class PeriodicJob:
    """One periodic job: its name, the setting giving its period (``None``: the job's own,
    e.g. the backfill, which is also woken by new rows) and how it is built."""

    name: str
    interval: str | None
    build: Callable[[Parts, float | None], Any]  # -> a job with ``run`` (and ``interval``)
    #: True: one process per database runs it (a named lease); False: every process
    once: bool = True


def _every(interval: float | None) -> float:
    assert interval is not None, "a job built with a period has an interval setting"
    return interval


#: Every periodic job the bot runs, started with the system in this order.
JOBS: tuple[PeriodicJob, ...] = (
    PeriodicJob("embedding_backfill", None, lambda p, _: EmbeddingBackfill(p.db, p.embedder)),
    PeriodicJob(
        "purge",
        "maintenance_interval",
        lambda p, every: PurgeJob(
            p.db,
            retention_days=p.settings.message_retention_days,
            interval=_every(every),
        ),
    ),
    PeriodicJob(
        "chat_indexes",
        "maintenance_interval",
        lambda p, every: ChatIndexJob(
            p.db,
            model=p.embedder.model,
            dims=p.embedder.dims,
            interval=_every(every),
        ),
    ),
    PeriodicJob(
        "compaction_sweep",
        "maintenance_interval",
        lambda p, every: CompactionSweep(
            SqlBacklog(p.db),
            p.compactor.compact,
            CompactionRule.from_settings(p.settings),
            interval=_every(every),
        ),
    ),
    PeriodicJob(
        "heartbeat",
        "heartbeat_interval",
        lambda p, every: sql_heartbeat(
            p.db,
            check_config(p.settings, p.embedder.model),
            interval=_every(every),
            alert_chat_id=p.settings.alert_chat_id,
            allowed_chat_ids=p.settings.telegram_allowed_chat_ids,
            bot_api=lambda: Contact(p.bot.last_ok, p.bot.last_failure),
        ),
        once=False,  # each process checks itself (its /readyz)
    ),
    PeriodicJob(
        "pattern_ttl",
        "maintenance_interval",
        lambda p, every: PatternTtlJob(
            p.db,
            interval=_every(every),
            max_per_chat=p.settings.max_patterns_per_chat,
            timezone=p.settings.timezone,
        ),
    ),
)


def build_jobs(parts: Parts, jobs: Sequence[PeriodicJob] = JOBS) -> list[Any]:
    """Each job of ``jobs`` built with its interval setting's value."""
    return [
        job.build(parts, None if job.interval is None else getattr(parts.settings, job.interval))
        for job in jobs
    ]


@attrs.define(eq=False)
class Bot:
    """The opened bot: its parts, its jobs and the system built from them."""

    parts: Parts
    jobs: list[Any]
    system: BotSystem

    async def serve(self, on_listening: Callable[[list[str]], None] | None = None) -> int:
        """Run the process (:func:`runtime.serve.serve`) until shutdown; the exit code. The
        models' SDKs are imported once the process listens (then ``on_listening`` is called)."""
        parts, system = self.parts, self.system

        def listening(binds: list[str]) -> None:
            preload(parts.llm, parts.memory_llm)
            if on_listening is not None:
                on_listening(binds)

        return await serve(
            parts.settings,
            parts.db,
            lambda s, d, sh: system,
            on_listening=listening,
            shutdown=system.shutdown,
        )


@asynccontextmanager
async def voice_transcriber(
    settings: Settings, db: Queries, bot: BotApiClient
) -> AsyncIterator[Transcriber | None]:
    """An OpenAI-backed transcriber when OPENAI_API_KEY is set (downloading with ``bot``); the
    SDK client is closed after."""
    if not settings.openai_api_key:
        yield None
        return
    from openai import AsyncOpenAI

    from actors.telegram.voice import transcribe_voice
    from memory.llm.cost import configured_rates

    client = AsyncOpenAI(
        api_key=settings.openai_api_key.reveal(),
        base_url=settings.openai_base_url or None,
        max_retries=0,
    )
    rates = configured_rates(settings.model_rates)
    try:

        async def transcribe(chat_id: int, voice: Voice) -> str:
            result = await transcribe_voice(
                bot=bot,
                openai=client,
                db=db,
                chat_id=chat_id,
                voice=voice,
                model=settings.transcription_model,
                rates=rates,
            )
            return result.text

        yield transcribe
    finally:
        await client.close()


def export_command(p: Parts) -> ExportCommand:
    """``/export`` (the snapshot and the vault's zip, sent as documents)."""
    root = vault_root(p.settings.vault_dir, p.settings.home)
    return ExportCommand(p.db, p.bot, root, version(), embedding_model=p.embedder.model)


@asynccontextmanager
async def open_bot(
    settings: Settings,
    db: Database,
    *,
    polling: bool = True,
    announce: Callable[[str], None] = lambda text: None,
    shutdown: Shutdown | None = None,
    **system_options: Any,
) -> AsyncIterator[Bot]:
    """The whole bot, built in dependency order; every client is closed when the block ends.
    ``polling``: long polling (else the webhook); ``announce`` shows the pairing instructions;
    ``system_options``: more :class:`BotSystem` fields (tests: ``poller_factory``, ...)."""
    async with AsyncExitStack() as stack:
        usage = await stack.enter_async_context(open_usage_writer(db))  # off the turn's path
        token, api_url = settings.telegram_bot_token.reveal(), settings.telegram_api_base_url
        if not token:  # no Telegram (engram chat --standalone): a client nothing calls
            token, api_url = NO_TELEGRAM_TOKEN, NO_TELEGRAM_URL
            system_options.setdefault("telegram", False)
        bot = await stack.enter_async_context(BotApiClient(token, base_url=api_url))
        transcribe = await stack.enter_async_context(voice_transcriber(settings, db, bot))
        # the SDK is imported once the process serves (or by the first call): not on start-up
        llm = await stack.enter_async_context(open_llm(settings, usage, deferred=True))
        memory_llm = await stack.enter_async_context(
            open_llm(settings, usage, role="memory", deferred=True)  # compaction, adjudication
        )
        embedder = await stack.enter_async_context(open_embedder(settings, usage))
        thresholds = thresholds_for(embedder.model, settings)
        lexicons = LexiconCache()  # per-chat BM25 statistics, shared by retrieval and recall
        tools = agent_tools(
            [
                *memory_tools(LLMAdjudicator(memory_llm), thresholds=thresholds, lexicons=lexicons),
                *REMINDER_TOOLS,
            ]
        )
        scheduler = Scheduler(
            SqlDueStore(db), Limits.from_settings(settings), tick=settings.proactive_tick
        )
        routines: list[Routine] = all_routines(settings)
        controls = Controls(
            db, settings.timezone, routines, grace_s=settings.proactive_grace, poke=scheduler.poke
        )
        compactor = sql_compactor(db, memory_llm, embedder, settings, tools=tools)
        vault = sql_vault_writer(settings, db)  # None when VAULT=off
        if vault is not None:
            compactor.on_compacted = vault.mark
        agent = sql_agent(
            db,
            llm,
            timezone=settings.timezone,
            embedder=embedder,
            context_token_budget=settings.context_token_budget,
            episode_budget=settings.episode_budget_tokens,
            window_limit=settings.window_messages,
            retriever=SqlPatternRetriever(
                db, embedder, thresholds, lexicons=lexicons, timezone=settings.timezone
            ),
            profile=SqlProfile(db, settings.timezone, settings.profile_budget_tokens),
            tools=tools,
            on_over_budget=compactor.request,
            prompt_cache=settings.prompt_cache(),
            keep_photos=settings.keep_photos == "on",
            confirmations=model_asks,
            reminders=partial(ChatReminders, controls),
        )
        parts = Parts(
            settings,
            db,
            bot,
            llm,
            memory_llm,
            embedder,
            thresholds,
            lexicons,
            tools,
            compactor,
            agent,
        )
        jobs = build_jobs(parts)
        image_cap = max_image_bytes(settings, settings.photo_max_bytes)  # the model's limit too
        taps = CallbackTable()  # the buttons' handlers, registered by the commands
        services = MemoryServices(db, embedder, settings.timezone, thresholds, lexicons)
        controls.register_taps(taps)
        beats = [job for job in jobs if isinstance(job, Heartbeat)]
        system = BotSystem(
            settings,
            db,
            shutdown or Shutdown(deadline=settings.shutdown_deadline),
            polling=polling,
            announce=announce,
            turns=agent,
            transcribe=transcribe,
            photos=partial(download_photos, bot, max_bytes=image_cap),
            bot=bot,
            callbacks=taps,
            commands=command_table(
                services, taps, [*controls.commands(), *export_command(parts).commands()]
            ),
            background=[j.run for j, spec in zip(jobs, JOBS, strict=True) if not spec.once]
            + ([vault.run] if vault is not None else []),
            exclusive=[(spec.name, j.run) for j, spec in zip(jobs, JOBS, strict=True) if spec.once],
            reports=[("heartbeat", job.report) for job in beats],
            heartbeats=beats,
            blueprints=web_blueprints(
                settings,
                services,
                beats[0].report if beats else dict,
                settings.telegram_allowed_chat_ids,
            ),
            compactor=compactor,
            vault_mark=None if vault is None else vault.mark,
            routines={routine.name: routine for routine in routines},
            routine_summarizer=RoutineSummarizer(memory_llm),
            scheduler=scheduler,
            pair_offer=controls.pair_offer,
            **system_options,
        )
        if settings.dashboard_token:
            system.blueprints.append(dashboard(settings, db, services, system))
        yield Bot(parts, jobs, system)
