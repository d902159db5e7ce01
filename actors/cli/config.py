"""``engram config``: the effective configuration, secrets shown only as set / not set.

Every variable of the configuration table in its order, with what engram will actually use:
the ``PATTERN_*`` thresholds of the current embedding model with their source (the setting, or
the model's calibrated default), the chats allowed (by the setting and, read from the database,
by pairing or ``engram chats allow``), and the mode ``engram serve`` will run in.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from actors.settings import Settings
    from runtime.settings import Field

THRESHOLDS = {
    "PATTERN_MIN_SIMILARITY": "min_similarity",
    "PATTERN_DEDUP_THRESHOLD": "dedup",
    "PATTERN_ADJUDICATE_THRESHOLD": "adjudicate",
    "PATTERN_MERGE_THRESHOLD": "merge",
}


def shown(settings: Settings, field: Field) -> str:
    """One variable's value as ``engram config`` prints it: the thresholds and MEMORY_MODEL as
    in force, with their source; DATABASE_URL redacted; secrets as set / not set."""
    from memory.embeddings.providers import embedding_model
    from memory.embeddings.thresholds import default_thresholds

    env, value = field.env, getattr(settings, field.attr)
    if env in THRESHOLDS:
        if value is not None:
            return f"{value:g} (setting)"
        model = embedding_model(settings.embedding_provider, settings.openai_api_key.reveal())
        default = getattr(default_thresholds(model), THRESHOLDS[env])
        return f"{default:g} (default for {model})"
    if env == "MEMORY_MODEL":
        if value:
            return f"{value} (setting)"
        source = "OPENAI_MODEL" if settings.llm_provider == "openai" else "default"
        return f"{settings.model_for('memory')} ({source} for LLM_PROVIDER={settings.llm_provider})"
    return settings.shown(field)


def config_lines(settings: Settings) -> list[str]:
    """``NAME=value`` for every variable, in the configuration table's order."""
    return [f"{f.env}={shown(settings, f)}" for f in type(settings).fields]


async def stored_lines(settings: Settings) -> list[str]:
    """The allowed chats (setting and database) and the serve mode, after the variables."""
    from actors.cli.chats import stored_text
    from actors.telegram.access import stored_chats
    from runtime.cli import open_settings_database
    from runtime.errors import DatabaseError
    from runtime.migrate import apply_migrations

    allowed = [f"{c} (setting)" for c in sorted(settings.telegram_allowed_chat_ids)]
    try:
        async with open_settings_database(settings) as db:
            await apply_migrations(db)
            stored = await stored_chats(db)
    except DatabaseError as exc:
        allowed.append(f"(the database's are unknown: {exc})")
    else:
        allowed += [f"{c.chat_id} ({stored_text(c, settings.timezone)})" for c in stored]
    if settings.telegram_webhook_url:
        mode = f"webhook ({settings.telegram_webhook_url}, registered at start)"
    else:
        mode = (
            "long polling (TELEGRAM_WEBHOOK_URL is empty; `engram serve --webhook` for a webhook)"
        )
    return [
        "",
        f"allowed chats: {', '.join(allowed) or 'none (engram serve prints a pairing code)'}",
        f"serve mode: {mode}",
    ]


async def cmd_config(settings: Settings, args: argparse.Namespace) -> int:
    for line in config_lines(settings):
        print(line)
    for line in await stored_lines(settings):
        print(line)
    return 0


def register(subparsers: Any) -> None:
    """Make ``engram config`` (declared by the runtime) show the bot's effective values."""
    subparsers.choices["config"].set_defaults(handler=cmd_config)
