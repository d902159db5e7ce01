"""The one place that turns settings into an embedder, as :mod:`memory.llm.factory` does for
the chat model: :func:`open_embedder` (EMBEDDING_PROVIDER, OPENAI_API_KEY, OPENAI_BASE_URL,
MODEL_RATES), its SDK client closed when the block ends."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Protocol

import trio

from memory.embeddings.providers import LocalEmbedder, OpenAIEmbedder, make_embedder
from memory.llm.cost import configured_rates
from runtime.db import Queries
from runtime.parsers import Secret


class EmbeddingSettings(Protocol):
    """The settings an embedder is built from (``MemorySettings`` with ``LLMSettings``)."""

    @property
    def embedding_provider(self) -> str: ...
    @property
    def openai_api_key(self) -> Secret: ...
    @property
    def openai_base_url(self) -> str: ...
    @property
    def model_rates(self) -> str: ...


@asynccontextmanager
async def open_embedder(
    settings: EmbeddingSettings, usage_db: Queries | None = None, *, provider: str | None = None
) -> AsyncIterator[OpenAIEmbedder | LocalEmbedder]:
    """The configured embedder (``provider`` overrides EMBEDDING_PROVIDER: a command's
    ``--embeddings``); OpenAI's calls are priced and written to ``usage_db``."""
    embedder = make_embedder(
        provider or settings.embedding_provider,
        settings.openai_api_key.reveal() or None,
        settings.openai_base_url or None,
        usage_db=usage_db,
        rates=configured_rates(settings.model_rates),
    )
    try:
        yield embedder
    finally:
        with trio.move_on_after(5, shield=True):
            await embedder.aclose()
