"""The one place that turns settings into a chat model: :func:`check_llm_settings` (what the
configured provider needs, one error naming the variable) and :func:`open_llm` (the provider,
its SDK client closed when the block ends). A new provider is added here, to ``PROVIDERS`` in
:mod:`memory.llm.settings` and in its own module.

The provider modules are imported inside :func:`open_llm`, so only the configured provider's SDK
is ever imported. ``engram serve`` opens its models ``deferred``: the SDK (the heaviest import
of the process, ~0.9 s for anthropic) is imported in a worker thread once the process is
serving (:meth:`DeferredLLM.preload`) or by the first call, whichever comes first, so start-up
does not wait for it.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import trio

from memory.llm.cost import configured_rates
from memory.llm.protocol import LLM, Completion, Message, OnEvent, System, ToolSpec
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
        problems.append(
            SettingsError(
                "ANTHROPIC_API_KEY",
                "is required for LLM_PROVIDER=anthropic (or set LLM_PROVIDER=openai and "
                "OPENAI_BASE_URL for an OpenAI-compatible server)",
            )
        )
    if settings.llm_provider == "openai" and not (
        settings.openai_api_key or settings.openai_base_url
    ):
        problems.append(
            SettingsError(
                "OPENAI_BASE_URL",
                "is required for LLM_PROVIDER=openai (an OpenAI-compatible server; or set "
                "OPENAI_API_KEY for OpenAI itself)",
            )
        )
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


PROVIDER_MODULES = {
    "anthropic": "memory.llm.anthropic_provider",
    "openai": "memory.llm.openai_provider",
}
#: the largest image (decoded bytes) each provider takes in a request. Anthropic refuses an
#: image whose base64 text is over 5 MB (5,242,880 characters: "image exceeds 5 MB maximum"),
#: so 3/4 of that; OpenAI takes up to 20 MB an image.
MAX_IMAGE_BYTES = {"anthropic": 5 * 1024 * 1024 * 3 // 4, "openai": 20 * 1024 * 1024}


def max_image_bytes(settings: LLMSettings, cap: int) -> int:
    """The largest photo worth giving the chat model: ``cap`` (PHOTO_MAX_BYTES) or less."""
    return min(cap, MAX_IMAGE_BYTES[settings.llm_provider])


def _build(settings: LLMSettings, db: Queries, role: LLMRole) -> AnthropicLLM | OpenAICompatibleLLM:
    rates = configured_rates(settings.model_rates)
    if settings.llm_provider == "anthropic":
        from memory.llm.anthropic_provider import AnthropicLLM

        return AnthropicLLM(
            api_key=settings.anthropic_api_key.reveal(),
            db=db,
            rates=rates,
            model=settings.model_for(role),
            base_url=settings.anthropic_base_url or None,
        )
    from memory.llm.openai_provider import OpenAICompatibleLLM

    return OpenAICompatibleLLM(
        api_key=settings.openai_api_key.reveal() or "not-needed",
        model=settings.model_for(role),
        db=db,
        rates=rates,
        base_url=settings.openai_base_url or None,
    )


class DeferredLLM:
    """A provider whose SDK module is imported, and which is built, in a worker thread: by
    :meth:`preload` (nothing waits) or by the first call (see the module docstring).
    Implements :class:`~memory.llm.protocol.LLM`."""

    def __init__(
        self, build: Callable[[], AnthropicLLM | OpenAICompatibleLLM], module: str, model: str
    ) -> None:
        self.model = model
        self._build = build
        self._module = module
        self._llm: AnthropicLLM | OpenAICompatibleLLM | None = None
        self._building = threading.Lock()  # one import and build, whoever comes first
        self._preloading: threading.Thread | None = None

    @property
    def loaded(self) -> bool:
        """Whether the provider has been built (its SDK imported)."""
        return self._llm is not None

    def preload(self) -> None:
        """Import the SDK and build the provider in a background thread (no wait; once)."""
        if self._preloading is None and self._llm is None:
            self._preloading = threading.Thread(
                target=self._load, daemon=True, name=f"import {self._module}"
            )
            self._preloading.start()

    def _load(self) -> AnthropicLLM | OpenAICompatibleLLM:
        with self._building:
            if self._llm is None:
                importlib.import_module(self._module)
                self._llm = self._build()
            return self._llm

    async def provider(self) -> AnthropicLLM | OpenAICompatibleLLM:
        """The provider, built now if need be (waiting for its SDK's import)."""
        if self._llm is not None:
            return self._llm
        return await trio.to_thread.run_sync(self._load)

    async def complete(
        self,
        *,
        system: System,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        max_tokens: int,
        purpose: str,
        chat_id: int | None,
        on_event: OnEvent | None = None,
    ) -> Completion:
        llm = await self.provider()
        return await llm.complete(
            system=system,
            messages=messages,
            tools=tools,
            max_tokens=max_tokens,
            purpose=purpose,
            chat_id=chat_id,
            on_event=on_event,
        )

    async def aclose(self) -> None:
        if self._llm is not None:
            await self._llm.aclose()


def preload(*llms: LLM) -> None:
    """Start loading every :class:`DeferredLLM` among ``llms`` in the background."""
    for llm in llms:
        if isinstance(llm, DeferredLLM):
            llm.preload()


@asynccontextmanager
async def open_llm(
    settings: LLMSettings, db: Queries, role: LLMRole = "chat", *, deferred: bool = False
) -> AsyncIterator[LLM]:
    """The configured model for ``role`` (``chat``: ANTHROPIC_MODEL or OPENAI_MODEL;
    ``memory``: MEMORY_MODEL), on the configured provider; its SDK client is closed when the
    block ends. ``deferred``: a :class:`DeferredLLM` (the SDK imported later, off the
    start-up path)."""
    llm: AnthropicLLM | OpenAICompatibleLLM | DeferredLLM
    if deferred:
        llm = DeferredLLM(
            lambda: _build(settings, db, role),
            PROVIDER_MODULES[settings.llm_provider],
            settings.model_for(role),
        )
    else:
        llm = _build(settings, db, role)
    try:
        yield llm
    finally:
        with trio.move_on_after(5, shield=True):
            await llm.aclose()
