"""The bot's actor system: what ``engram serve`` starts inside the root nursery, built with its
parts by :func:`actors.wiring.open_bot`. :meth:`BotSystem.run` starts it step by step, in this
order, each component ready before the next:

    BotSystem (nursery)
    ├─ (journal owners, getMe, setMyCommands, setWebhook: one-shot calls before the steps)
    ├─ Ownership            chat leases (renewed, released), LISTEN for wakes from other processes
    ├─ SenderActor          (supervised) outbox -> Telegram, for the chats leased here
    ├─ Registry[chat_id] -> ChatActor   (on demand, idle stop, restart on crash)
    ├─ CompactorActor       (when given): chats over their context budget -> patterns
    ├─ background jobs      the heartbeat (/readyz; alerts from one process), the vault writer;
    │                       in the one process holding their lease the maintenance jobs (JOBS)
    ├─ Router               inbox notifications -> chat actors (lease held) or their owner
    ├─ Scheduler            (when given, supervised): due jobs -> inbox rows, chats woken
    ├─ ChatAccess           who may talk: the allowlist (setting + stored), pairing, strangers
    └─ Poller               (--polling, in the one process holding its lease) getUpdates -> inbox
       or InboxWriter       (webhook) group commit of webhook updates -> inbox

It hands back a :class:`~runtime.serve.SystemHandle`: the webhook route (webhook mode), and the
drains run at shutdown in order: the scheduler (the tick in hand ends), the poller and router
(no new work), the chat mailboxes (each actor finishes the message in hand and its buffer), the
compactor (after the compaction in hand), the sender (after the request in hand), then every
chat lease is released, so other processes take the chats at once (a rolling restart); what is
left waits in the inbox/outbox. The inbox writer, like the HTTP server, serves until the end.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import datetime
from functools import partial
from typing import Any

import attrs
import trio
from quart import Blueprint

from actors.agent.turn import NoAgent, TurnHandler
from actors.chat.actor import chat_factory
from actors.chat.callbacks import Callbacks, CallbackTable
from actors.chat.command_base import CommandTable
from actors.chat.commands import command_table
from actors.chat.deps import ChatDeps, PhotoFetcher, Transcriber
from actors.chat.drafts import BotDraftSink, Drafts
from actors.chat.erase_command import EraseConfirm, vault_folder
from actors.chat.proactive import Proactive
from actors.chat.store import SqlChatStore
from actors.chat.wakes import RunningTurns
from actors.compactor import CompactorActor
from actors.journal_owner import assign_unowned_entries
from actors.local.draft import LocalOrTelegram
from actors.local.endpoint import chat_blueprint
from actors.local.hub import Edges, LocalHub
from actors.ownership import Ownership
from actors.queues.dedupe import DedupeCache
from actors.queues.inbox_writer import InboxWriter
from actors.queues.outbox import OutboxRow
from actors.router import Router
from actors.scheduler.heartbeat import ALERT_LEASE, Heartbeat
from actors.scheduler.jobs import pause_chat
from actors.scheduler.routine import Routine
from actors.scheduler.scheduler import Scheduler
from actors.sender.actor import OutboxReady, SenderActor
from actors.sender.policy import SenderLedger, SenderSettings
from actors.settings import Settings
from actors.telegram.client import BotApiClient
from actors.telegram.pairing import ChatAccess
from actors.telegram.pairing_codes import SqlPairingCodes
from actors.telegram.startup import introduce
from actors.telegram.webhook import WEBHOOK_PATH, webhook_handler
from memory.conversation.routine_summary import RoutineSummarizer
from memory.patterns.stats import cost_today, next_day_start
from runtime import metrics
from runtime.actor import Address
from runtime.asgi import AsgiApp
from runtime.db import Database, Queries
from runtime.errors import ActorError
from runtime.http import Report
from runtime.logs import get_logger
from runtime.registry import Registry
from runtime.serve import SystemHandle
from runtime.shutdown import Shutdown
from runtime.supervisor import supervise

log = get_logger(__name__)


@attrs.define(eq=False)
class BotSystem:
    """Composes the bot's actors around one Bot API client."""

    settings: Settings
    db: Database
    shutdown: Shutdown
    polling: bool = False
    turns: TurnHandler = attrs.field(factory=NoAgent)
    transcribe: Transcriber | None = None
    #: downloads the person's photos for the model (None: captions only)
    photos: PhotoFetcher | None = None
    bot_factory: Callable[[], BotApiClient] | None = None
    poller_factory: Callable[..., Any] | None = None
    #: jobs started with the system, each ``run(*, task_status)`` (e.g. the heartbeat)
    background: list[Callable[..., Awaitable[None]]] = attrs.field(factory=list)
    #: the same, run in one process per database (named lease): the maintenance jobs
    exclusive: list[tuple[str, Callable[..., Awaitable[None]]]] = attrs.field(factory=list)
    heartbeats: list[Heartbeat] = attrs.field(factory=list)  # in background; one alerts
    #: what this process serves among several (built from the settings by :meth:`run`)
    ownership: Ownership | None = None
    #: more of ``/readyz``'s body: names and latest reports (the heartbeat's checks)
    reports: list[tuple[str, Report]] = attrs.field(factory=list)
    #: the HTTP app's blueprints (/metrics, /api/v1/, /dashboard/)
    blueprints: list[Blueprint] = attrs.field(factory=list)
    #: the compactor (its ``request`` is the agent's ``on_over_budget``)
    compactor: CompactorActor | None = None
    #: the vault writer's ``mark`` (VAULT=on): after every commit that queues a reply
    vault_mark: Callable[[int], None] | None = None
    #: the scheduler (due jobs -> inbox rows; started once the router can wake chats)
    scheduler: Scheduler | None = None
    #: the message offered after pairing (the check-ins' button): ChatAccess's ``offer``
    pair_offer: Callable[[Queries, int], Awaitable[object]] | None = None
    #: shared by the sender and its restarts: rows in flight, replies given up (heartbeat)
    sender_ledger: SenderLedger = attrs.field(factory=SenderLedger)
    #: the handlers of inline buttons (action name -> handler)
    callbacks: CallbackTable = attrs.field(factory=CallbackTable)
    #: the chat commands (Telegram's menu: ``setMyCommands``)
    commands: CommandTable = attrs.field(factory=command_table)
    #: the routines due runs name, and what summarises a routine's message (MEMORY_MODEL)
    routines: Mapping[str, Routine] = attrs.field(factory=dict)
    routine_summarizer: RoutineSummarizer = attrs.field(factory=RoutineSummarizer)
    #: shows the pairing instructions (``engram serve`` prints them to stdout)
    announce: Callable[[str], None] = lambda text: None
    #: more arguments of :class:`~actors.telegram.pairing.ChatAccess` (tests: ttl, clock, ...)
    access_options: dict[str, Any] = attrs.field(factory=dict)
    #: the allowlist and pairing, once :meth:`run` started them
    chat_access: ChatAccess | None = attrs.field(init=False, default=None)
    #: how many chat actors run (once started)
    live_chats: Callable[[], int] = lambda: 0
    #: the Bot API client, shared with its owner (None: the system opens its own)
    bot: BotApiClient | None = None
    telegram: bool = True  #: False: no Telegram at all (``engram chat --standalone``)
    local: LocalHub = attrs.field(factory=LocalHub)  #: the local chats' clients (/ws/chat)

    _sender: Address[OutboxReady] | None = attrs.field(init=False, default=None)
    _sender_actor: SenderActor | None = attrs.field(init=False, default=None)
    _sender_done: trio.Event = attrs.field(init=False, factory=trio.Event)
    _poller_stop: trio.Event = attrs.field(init=False, factory=trio.Event)
    _poller_done: trio.Event = attrs.field(init=False, factory=trio.Event)
    _dedupe: DedupeCache = attrs.field(init=False, factory=DedupeCache)

    async def _spent_today(self, chat_id: int, now: datetime) -> float:
        """What the chat's model calls cost today (CHAT_DAILY_COST_USD)."""
        return await cost_today(self.db, chat_id, now=now, timezone=self.settings.timezone)

    @asynccontextmanager
    async def _open_bot(self) -> AsyncIterator[BotApiClient]:
        if self.bot is not None:  # its owner closes it
            yield self.bot
            return
        if self.bot_factory is not None:
            client = self.bot_factory()
        else:
            client = BotApiClient(
                self.settings.telegram_bot_token.reveal(),
                base_url=self.settings.telegram_api_base_url,
            )
        async with client:
            yield client

    async def run(self, *, task_status: trio.TaskStatus[SystemHandle]) -> None:
        """The start steps, in order; each component ready before the next."""
        settings = self.settings
        # entries imported before each chat owned its journal (migration 012)
        await assign_unowned_entries(self.db, settings.telegram_allowed_chat_ids)
        async with self._open_bot() as bot, trio.open_nursery() as nursery:
            username = None
            if self.telegram:  # getMe, the command menu, (webhook) setWebhook
                username = await introduce(bot, settings, self.commands, polling=self.polling)
            self.local.poke = lambda chat_id: self._outbox_ready(chat_id, None)
            own: Ownership = await nursery.start(self._ownership().run)
            self.sender_ledger.recovered = True  # the leases recover what a dead run left
            self._sender = await nursery.start(self._start_sender, bot)
            edges = Edges(self.local, bot if self.telegram else None)  # local chats: frames
            deps = self._chat_deps(edges, bot, own)
            if deps.drafts is not None:  # streamed replies: their tasks outlive each turn
                await nursery.start(deps.drafts.run)
            registry: Registry[int, Any] = await nursery.start(self._chats(deps).run)
            self.live_chats = registry.__len__
            own.attach(registry, lambda: self._sender_actor, self._poke_sender, settings.send_rate)
            if self.compactor is not None:
                await nursery.start(self.compactor.run)
            for beat in self.heartbeats:  # one process per database alerts
                beat.gate = partial(own.sql.acquire_named, ALERT_LEASE, 3 * beat.interval)
            for job in self.background:
                await nursery.start(job)
            for name, job in self.exclusive:
                await nursery.start(own.exclusive(f"job:{name}", job))
            router: Router = await nursery.start(self._router(edges, registry, deps, own).run)
            own.on_wake = router.remote
            if self.scheduler is not None:
                run = partial(self.scheduler.run, wake_chat=router.wake)
                await nursery.start(supervise, "scheduler", run, settings.restart_policy())
            routes: dict[str, AsgiApp] = {}
            drains: list[tuple[str, Callable[[], Awaitable[object]]]] = []
            if self.scheduler is not None:  # first: no new runs while the rest drains
                drains.append(("scheduler", self.scheduler.aclose))
            if self.telegram:
                chats: ChatAccess = await nursery.start(self._access(router, username).run)
                self.chat_access = chats
                if self.polling:
                    await nursery.start(self._start_poller, bot, router, chats)
                    drains.append(("poller", self._stop_poller))
                else:
                    writer: InboxWriter = await nursery.start(InboxWriter(self.db).run)
                    routes[WEBHOOK_PATH] = self._webhook(router, chats, writer)
            local_chat = chat_blueprint(self.db, self.local, settings.home, router.accepted)
            drains += [("router", router.aclose), ("chats", registry.aclose)]
            if self.compactor is not None:
                drains.append(("compactor", self.compactor.aclose))
            drains.append(("sender", self._stop_sender))
            drains.append(("leases", own.chats.release_all))  # a rolling restart's handover
            pages = [local_chat, *self.blueprints]
            task_status.started(SystemHandle(pages, routes, drains=drains, reports=self.reports))

    # --- the start steps ---------------------------------------------------------------------

    def _ownership(self) -> Ownership:
        if self.ownership is None:
            settings = self.settings
            self.ownership = Ownership(
                self.db, settings.instance_name(), settings.chat_lease_ttl, self.local.chats
            )
        return self.ownership

    def _poke_sender(self, chat_id: int) -> None:  # a chat taken over: look at its outbox
        with contextlib.suppress(ActorError, AssertionError):  # the sweep finds the rows
            assert self._sender is not None
            self._sender.send_nowait(OutboxReady(chat_id))

    async def _start_sender(
        self, bot: BotApiClient, *, task_status: trio.TaskStatus[Address[OutboxReady]]
    ) -> None:
        """The sender, supervised (outbox -> Telegram)."""
        policy = self.settings.restart_policy()
        await supervise("sender", partial(self._run_sender, bot), policy, task_status=task_status)

    async def _run_sender(
        self, bot: BotApiClient, *, task_status: trio.TaskStatus[Address[OutboxReady]]
    ) -> None:
        s = self.settings
        sending = SenderSettings(
            retry_cap=s.send_retry_cap, deadline=s.send_deadline, global_rate=s.send_rate
        )
        actor = SenderActor(
            self.db,
            bot,
            settings=sending,
            ledger=self.sender_ledger,
            on_blocked=self._blocked,
            local=self.local,
            may_send=self._ownership().may_send,
        )
        self._sender_actor = actor
        try:
            await actor.run(task_status=task_status)
        finally:
            self._sender_done.set()

    async def _blocked(self, chat_id: int, why: str) -> None:
        """The chat blocked the bot: its proactive jobs wait until the person writes again."""
        await pause_chat(self.db, chat_id, why)
        log.info("system.chat_paused", chat_id=chat_id)

    async def _stop_sender(self) -> None:
        assert self._sender is not None
        self._sender.close()
        await self._sender_done.wait()

    def _outbox_ready(self, chat_id: int, row: OutboxRow | None) -> None:
        if self.vault_mark is not None:  # a commit: the chat's vault is out of date
            self.vault_mark(chat_id)
        try:
            assert self._sender is not None
            self._sender.send_nowait(OutboxReady(chat_id, row))
        except ActorError:  # the sender's sweep finds the row anyway
            log.warning("system.outbox_notify_failed", chat_id=chat_id)

    def _chat_deps(self, edges: Edges, bot: BotApiClient, own: Ownership) -> ChatDeps:
        settings = self.settings
        return ChatDeps(
            store=SqlChatStore(self.db, owns=own.chats.holds, lease=own.incarnation),
            turns=self.turns,
            bot=edges,
            outbox_ready=self._outbox_ready,
            running=RunningTurns(),
            transcribe=self.transcribe,
            photos=self.photos,
            model_retry_cap=settings.send_retry_cap,
            model_deadline=settings.send_deadline,
            callbacks=Callbacks(self.db, self.callbacks),
            commands=self.commands,
            turns_per_minute=settings.chat_turns_per_minute,
            daily_cost_usd=settings.chat_daily_cost_usd,
            spent_today=self._spent_today,
            next_day=partial(next_day_start, timezone=settings.timezone),
            proactive=Proactive(
                self.db, self.routines, settings.timezone, summarizer=self.routine_summarizer
            ),
            erase=EraseConfirm(self.db, folder=vault_folder(settings.vault_dir, settings.home)),
            drafts=Drafts(
                LocalOrTelegram(self.local, BotDraftSink(bot)),
                settings.stream_replies,
                settings.draft_interval,
                on_first_text=metrics.first_draft_shown,
            ),
        )

    def _chats(self, deps: ChatDeps) -> Registry[int, Any]:
        """The chat actors: one per chat, on demand, stopped when idle, restarted on a crash."""
        settings = self.settings
        return Registry(
            "chats",
            chat_factory(deps),
            capacity=settings.mailbox_size,
            idle_timeout=settings.actor_idle_timeout,
            max_actors=settings.actor_max_live,
            policy=settings.restart_policy(),
            key_name="chat_id",
        )

    def _router(
        self, edges: Edges, registry: Registry[int, Any], deps: ChatDeps, own: Ownership
    ) -> Router:
        return Router(
            self.db,
            registry,
            edges,
            deps.running,
            wakes=deps.wakes,
            callbacks=deps.callbacks,
            leases=own.chats,
            lease_sql=own.sql,
            sweep_interval=min(30.0, own.ttl / 2),
        )

    def _access(self, router: Router, username: str | None) -> ChatAccess:
        return ChatAccess(
            self.db,
            self.settings.telegram_allowed_chat_ids,
            router.wake,
            self._outbox_ready,
            announce=self.announce,
            username=username,
            offer=self.pair_offer,
            shared=SqlPairingCodes(self.db, self.settings.instance_name()),
            **self.access_options,
        )

    async def _start_poller(
        self,
        bot: BotApiClient,
        router: Router,
        chats: ChatAccess,
        *,
        task_status: trio.TaskStatus[None],
    ) -> None:
        """getUpdates -> inbox, where the "poller" lease is held (one consumer allowed)."""
        from actors.telegram.poller import Poller  # imported only in polling mode

        poller = (self.poller_factory or Poller)(
            self.db,
            bot,
            allowed_chat_ids=chats,
            dedupe=self._dedupe,
            notify=router.accepted,
            stop=self._poller_stop,
            strangers=chats.stranger,
        )
        run = self._ownership().exclusive("poller", poller.run, stop=self._poller_stop)
        try:
            await run(task_status=task_status)
        finally:
            self._poller_done.set()

    async def _stop_poller(self) -> None:
        self._poller_stop.set()
        await self._poller_done.wait()

    def _webhook(self, router: Router, chats: ChatAccess, writer: InboxWriter) -> AsgiApp:
        """POST /api/telegram -> inbox (the webhook)."""
        return webhook_handler(
            secret_token=self.settings.telegram_secret_token.reveal(),
            allowed_chat_ids=chats,
            db=self.db,
            notify=router.accepted,
            dedupe=self._dedupe,
            insert=writer.insert_update,
            strangers=chats.stranger,
        )
