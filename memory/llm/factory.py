"""The one place that turns settings into a chat model: :func:`check_llm_settings` (what the
configured provider needs, one error naming the variable) and :func:`open_llm` (the provider,
its SDK client closed when the block ends). A new provider is added here, to ``PROVIDERS`` in
:mod:`memory.llm.settings` and in its own module.

The provider modules are imported inside :func:`open_llm`, so only the configured provider's SDK
is ever imported.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import trio

from memory.llm.cost import configured_rates
from memory.llm.protocol import LLM
from memory.llm.settings import LLMRole, LLMSettings
from runtime.db import Queries
from runtime.errors import SettingsError, settings_error

if TYPE_CHECKING:
    from memory.llm.anthropic_provider import AnthropicLLM
    from memory.llm.openai_provider import OpenAICompatibleLLM


def llm_settings_problems(settings: LLMSettings) -> list[SettingsError]:
    """Every variable the configured provider lacks or cannot read, each named (may be empty)."""
    problems: list[SettingsError] = []
    if settings.llm_provider == "anthropic" and not settings.anthropic_api_key:
        problems.append(SettingsError(
            "ANTHROPIC_API_KEY",
            "is required for LLM_PROVIDER=anthropic (or set LLM_PROVIDER=openai and "
            "OPENAI_BASE_URL for an OpenAI-compatible server)",
        ))  # fmt: skip
    if settings.llm_provider == "openai" and not (
        settings.openai_api_key or settings.openai_base_url
    ):
        problems.append(SettingsError(
            "OPENAI_BASE_URL",
            "is required for LLM_PROVIDER=openai (an OpenAI-compatible server; or set "
            "OPENAI_API_KEY for OpenAI itself)",
        ))  # fmt: skip
    try:
        configured_rates(settings.model_rates)  # a bad MODEL_RATES entry is named
    except SettingsError as exc:
        problems.append(exc)
    return problems


def check_llm_settings(settings: LLMSettings) -> None:
    """Raise :class:`SettingsError` (several: ``SettingsErrors``) naming what the configured
    provider lacks."""
    error = settings_error(llm_settings_problems(settings))
    if error is not None:
        raise error


@asynccontextmanager
async def open_llm(
    settings: LLMSettings, db: Queries, role: LLMRole = "chat"
) -> AsyncIterator[LLM]:
    """The configured model for ``role`` (``chat``: ANTHROPIC_MODEL or OPENAI_MODEL;
    ``memory``: MEMORY_MODEL), on the configured provider; its SDK client is closed when the
    block ends."""
    rates = configured_rates(settings.model_rates)
    llm: AnthropicLLM | OpenAICompatibleLLM
    if settings.llm_provider == "anthropic":
        from memory.llm.anthropic_provider import AnthropicLLM

        llm = AnthropicLLM(
            api_key=settings.anthropic_api_key.reveal(),
            db=db,
            rates=rates,
            model=settings.model_for(role),
            base_url=settings.anthropic_base_url or None,
        )
    else:
        from memory.llm.openai_provider import OpenAICompatibleLLM

        llm = OpenAICompatibleLLM(
            api_key=settings.openai_api_key.reveal() or "not-needed",
            model=settings.model_for(role),
            db=db,
            rates=rates,
            base_url=settings.openai_base_url or None,
        )
    try:
        yield llm
    finally:
        with trio.move_on_after(5, shield=True):
            await llm.aclose()
