"""The ``engram`` command: the runtime's core commands plus the bot's.

``engram serve [--polling | --webhook]`` composes the process (see :mod:`runtime.serve`) with
the bot's actor system (:mod:`actors.system`): long polling unless a webhook is configured
(``TELEGRAM_WEBHOOK_URL`` or ``--webhook``). Every missing setting is reported before anything
starts (:func:`check_serve_settings`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from actors.cli import chats as chats_commands
from actors.cli import config as config_command
from actors.cli import journal as journal_commands
from actors.cli import patterns as patterns_cli
from actors.cli import systemd as systemd_command
from actors.cli import telegram as telegram_commands
from runtime.cli import base_parser, run_cli
from runtime.errors import SettingsError, settings_error

if TYPE_CHECKING:  # the serve path's modules are imported by cmd_serve: --help stays fast
    from actors.chat.deps import Transcriber
    from actors.settings import Settings
    from actors.system import BotSystem
    from actors.telegram.types import Voice
    from runtime.db import Database
    from runtime.shutdown import Shutdown


def serve_mode(settings: Settings, args: argparse.Namespace) -> str:
    """``polling`` unless a webhook is configured (``--webhook`` or TELEGRAM_WEBHOOK_URL);
    ``--polling`` wins over the setting."""
    if getattr(args, "polling", False):
        return "polling"
    if getattr(args, "webhook", False) or settings.telegram_webhook_url:
        return "webhook"
    return "polling"


def check_serve_settings(settings: Settings, args: argparse.Namespace) -> None:
    """Everything ``serve`` needs before it starts (``args.check``): every missing setting at
    once, as :class:`~runtime.errors.SettingsErrors`."""
    from memory.llm.factory import llm_settings_problems

    problems = []
    if not settings.telegram_bot_token:
        problems.append(SettingsError(
            "TELEGRAM_BOT_TOKEN", "is required (talk to @BotFather in Telegram: /newbot)"
        ))  # fmt: skip
    problems += llm_settings_problems(settings)
    if serve_mode(settings, args) == "webhook" and not settings.telegram_secret_token:
        problems.append(SettingsError(
            "TELEGRAM_SECRET_TOKEN",
            "is required in webhook mode: 1-256 characters of A-Za-z0-9_- (e.g. the output of "
            "`openssl rand -hex 32`); or leave TELEGRAM_WEBHOOK_URL empty for long polling",
        ))  # fmt: skip
    error = settings_error(problems)
    if error is not None:
        raise error


def print_pairing(text: str) -> None:
    """The pairing instructions, on stdout (``engram serve``'s own output)."""
    print(f"\n{text}\n", flush=True)


@asynccontextmanager
async def voice_transcriber(settings: Settings, db: Database) -> AsyncIterator[Transcriber | None]:
    """An OpenAI-backed transcriber when OPENAI_API_KEY is set; the SDK client is closed after."""
    if not settings.openai_api_key:
        yield None
        return
    from openai import AsyncOpenAI

    from actors.telegram.client import BotApiClient
    from actors.telegram.voice import transcribe_voice
    from memory.llm.cost import configured_rates

    client = AsyncOpenAI(
        api_key=settings.openai_api_key.reveal(),
        base_url=settings.openai_base_url or None,
        max_retries=0,
    )
    bot = BotApiClient(
        settings.telegram_bot_token.reveal(), base_url=settings.telegram_api_base_url
    )
    try:

        async def transcribe(chat_id: int, voice: Voice) -> str:
            result = await transcribe_voice(
                bot=bot,
                openai=client,
                db=db,
                chat_id=chat_id,
                voice=voice,
                model=settings.transcription_model,
                rates=configured_rates(settings.model_rates),
            )
            return result.text

        yield transcribe
    finally:
        await bot.aclose()
        await client.close()


async def cmd_serve(settings: Settings, args: argparse.Namespace) -> int:
    from actors.agent.handler import agent_tools, sql_agent
    from actors.chat.callbacks import CallbackTable
    from actors.chat.commands import command_table
    from actors.chat.memory_commands import MemoryServices
    from actors.chat.model_asks import model_asks
    from actors.compactor import sql_compactor
    from actors.system import BotSystem
    from memory.compaction.backlog import CompactionSweep, SqlBacklog
    from memory.conversation.purge import PurgeJob
    from memory.conversation.routine_summary import RoutineSummarizer
    from memory.conversation.window import CompactionRule
    from memory.embeddings.providers import open_embedder
    from memory.embeddings.store import EmbeddingBackfill
    from memory.embeddings.thresholds import thresholds_for
    from memory.llm.cost import configured_rates
    from memory.llm.factory import open_llm
    from memory.llm.usage_writer import open_usage_writer
    from memory.patterns.dedup import LLMAdjudicator
    from memory.patterns.maintenance import ChatIndexJob, PatternTtlJob
    from memory.retrieval.profile import SqlProfile
    from memory.retrieval.retriever import SqlPatternRetriever
    from memory.retrieval.sql import LexiconCache
    from memory.tools.memory_tools import memory_tools
    from runtime.cli import open_settings_database
    from runtime.serve import serve

    check_serve_settings(settings, args)
    async with (
        open_settings_database(settings) as database,
        open_usage_writer(database) as usage,  # api_usage rows off the turn's path
        voice_transcriber(settings, database) as transcribe,
        # the SDK is imported once the process serves (or by the first call): not on start-up
        open_llm(settings, usage, deferred=True) as llm,
        open_llm(settings, usage, role="memory", deferred=True) as memory_llm,  # compaction
        open_embedder(
            settings.embedding_provider,
            settings.openai_api_key.reveal() or None,
            settings.openai_base_url or None,
            usage_db=usage,
            rates=configured_rates(settings.model_rates),
        ) as embedder,
    ):
        thresholds = thresholds_for(embedder.model, settings)
        lexicons = LexiconCache()  # per-chat BM25 statistics, shared by retrieval and recall
        tools = agent_tools(
            memory_tools(LLMAdjudicator(memory_llm), thresholds=thresholds, lexicons=lexicons)
        )
        compactor = sql_compactor(database, memory_llm, embedder, settings, tools=tools)
        agent = sql_agent(
            database,
            llm,
            timezone=settings.timezone,
            embedder=embedder,
            context_token_budget=settings.context_token_budget,
            episode_budget=settings.episode_budget_tokens,
            window_limit=settings.window_messages,
            retriever=SqlPatternRetriever(
                database, embedder, thresholds, lexicons=lexicons, timezone=settings.timezone
            ),
            profile=SqlProfile(database, settings.timezone, settings.profile_budget_tokens),
            tools=tools,
            on_over_budget=compactor.request,
            prompt_cache=settings.prompt_cache(),
            confirmations=model_asks,
        )

        def build(s: Settings, db: Database, shutdown: Shutdown) -> BotSystem:
            taps = CallbackTable()  # the buttons' handlers, registered by the commands
            services = MemoryServices(db, embedder, s.timezone, thresholds, lexicons)
            return BotSystem(
                s,
                db,
                shutdown,
                polling=serve_mode(s, args) == "polling",
                announce=print_pairing,
                turns=agent,
                transcribe=transcribe,
                callbacks=taps,
                commands=command_table(services, taps),
                routine_summarizer=RoutineSummarizer(memory_llm),
                background=[
                    EmbeddingBackfill(db, embedder).run,
                    PurgeJob(
                        db,
                        retention_days=s.message_retention_days,
                        interval=s.maintenance_interval,
                    ).run,
                    ChatIndexJob(
                        db,
                        model=embedder.model,
                        dims=embedder.dims,
                        interval=s.maintenance_interval,
                    ).run,
                    CompactionSweep(
                        SqlBacklog(db),
                        compactor.compact,
                        CompactionRule.from_settings(s),
                        interval=s.maintenance_interval,
                    ).run,
                    PatternTtlJob(
                        db,
                        interval=s.maintenance_interval,
                        max_per_chat=s.max_patterns_per_chat,
                        timezone=s.timezone,
                    ).run,
                ],
                compactor=compactor,
            )

        from memory.llm.factory import preload

        return await serve(
            settings, database, build, on_listening=lambda binds: preload(llm, memory_llm)
        )


def build_parser() -> argparse.ArgumentParser:
    parser, sub = base_parser()
    p = sub.add_parser("serve", help="run the bot (HTTP server, actors)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--polling",
        action="store_true",
        help="get updates by long polling (the default unless TELEGRAM_WEBHOOK_URL is set)",
    )
    mode.add_argument(
        "--webhook",
        action="store_true",
        help="get updates on POST /api/telegram (the default when TELEGRAM_WEBHOOK_URL is set)",
    )
    p.set_defaults(handler=cmd_serve, check=check_serve_settings, quiet_logs=False)
    telegram_commands.register(sub)
    chats_commands.register(sub)
    config_command.register(sub)
    systemd_command.register(sub)
    journal_commands.register(sub)
    patterns_cli.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    def load() -> Settings:
        from actors.settings import load_settings

        return load_settings()

    return run_cli(build_parser(), argv, load=load)


if __name__ == "__main__":
    sys.exit(main())
