"""The ``engram`` command: the runtime's core commands plus the bot's.

``engram serve [--polling]`` composes the process (see :mod:`runtime.serve`) with the bot's
actor system (:mod:`actors.system`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from actors.agent.handler import agent_tools, sql_agent
from actors.chat.actor import Transcriber
from actors.cli import journal as journal_commands
from actors.cli import patterns as patterns_cli
from actors.cli import telegram as telegram_commands
from actors.compactor import sql_compactor
from actors.settings import Settings, load_settings
from actors.system import BotSystem
from actors.telegram.client import BotApiClient
from actors.telegram.types import Voice
from memory.conversation.purge import PurgeJob
from memory.conversation.window import CompactionRule
from memory.embeddings.providers import open_embedder
from memory.embeddings.store import EmbeddingBackfill
from memory.embeddings.thresholds import thresholds_for
from memory.llm.cost import configured_rates
from memory.llm.factory import check_llm_settings, open_llm
from memory.llm.usage_writer import open_usage_writer
from memory.patterns.backlog import CompactionSweep, SqlBacklog
from memory.patterns.dedup import LLMAdjudicator
from memory.patterns.maintenance import ChatIndexJob
from memory.patterns.profile import SqlProfile
from memory.patterns.retrieval import LexiconCache, SqlPatternRetriever
from memory.tools.memory_tools import memory_tools
from runtime.cli import base_parser, open_settings_database, run_cli
from runtime.db import Database
from runtime.errors import SettingsError
from runtime.serve import serve
from runtime.shutdown import Shutdown


def check_serve_settings(settings: Settings, *, polling: bool) -> None:
    """What ``serve`` needs before it starts anything (one SettingsError naming the variable)."""
    check_llm_settings(settings)
    if not settings.telegram_bot_token:
        raise SettingsError("TELEGRAM_BOT_TOKEN", "is required (the token from BotFather)")
    if not polling and not settings.telegram_secret_token:
        raise SettingsError(
            "TELEGRAM_SECRET_TOKEN",
            "is required in webhook mode (or run `engram serve --polling`)",
        )


@asynccontextmanager
async def voice_transcriber(settings: Settings, db: Database) -> AsyncIterator[Transcriber | None]:
    """An OpenAI-backed transcriber when OPENAI_API_KEY is set; the SDK client is closed after."""
    if not settings.openai_api_key:
        yield None
        return
    from openai import AsyncOpenAI

    from actors.telegram.voice import transcribe_voice

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
    check_serve_settings(settings, polling=args.polling)
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
            retriever=SqlPatternRetriever(
                database, embedder, thresholds, lexicons=lexicons, timezone=settings.timezone
            ),
            profile=SqlProfile(database, settings.timezone, settings.profile_budget_tokens),
            tools=tools,
            on_over_budget=compactor.request,
        )

        def build(s: Settings, db: Database, shutdown: Shutdown) -> BotSystem:
            return BotSystem(
                s,
                db,
                shutdown,
                polling=args.polling,
                turns=agent,
                transcribe=transcribe,
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
    p.add_argument(
        "--polling",
        action="store_true",
        help="get updates by long polling instead of a webhook (no public HTTPS needed)",
    )
    p.set_defaults(handler=cmd_serve)
    telegram_commands.register(sub)
    journal_commands.register(sub)
    patterns_cli.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(build_parser(), argv, load=load_settings)


if __name__ == "__main__":
    sys.exit(main())
