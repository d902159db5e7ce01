"""Text embeddings: one provider interface, two providers, a factory.

* :class:`OpenAIEmbedder` — ``text-embedding-3-small`` (1536-d) through the openai SDK (which
  runs under trio), batched, one ``api_usage`` row per request (purpose ``embedding``).
* :class:`LocalEmbedder` — wordllama ``l2_supercat`` (256-d), whose weights ship inside the
  package: no network, no cost (and so no ``api_usage`` row); the CPU work runs in a worker
  thread so the event loop is never blocked.

Every vector is unit-normalised float32. Blank texts are embedded as :data:`EMPTY_TEXT` (the
API rejects empty inputs) and over-long texts are cut to the model's input limit, so any text
can be embedded. Failures are :class:`EmbeddingError` (``retryable`` when a later attempt may
work). Storage of vectors and the backfill job live in :mod:`memory.embeddings.store`.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Iterator, Sequence
from typing import Any, Literal, Protocol

import numpy as np
import trio

from memory.errors import EmbeddingError
from memory.llm.cost import DEFAULT_RATES, RateTable
from memory.llm.usage import log_api_usage, scrub_error
from runtime.db import Queries
from runtime.errors import SettingsError
from runtime.logs import get_logger

log = get_logger(__name__)

PURPOSE = "embedding"
EMPTY_TEXT = "(empty)"

OPENAI_MODEL = "text-embedding-3-small"
OPENAI_DIMS = 1536
#: per-input limit of the embedding models (8192) with a margin for the estimate
OPENAI_MAX_INPUT_TOKENS = 8000
#: per-request limit (300k summed over inputs), with a margin
OPENAI_MAX_REQUEST_TOKENS = 250_000
OPENAI_BATCH = 256

LOCAL_CONFIG = "l2_supercat"
LOCAL_DIMS = 256
LOCAL_MAX_CHARS = 20_000

Provider = Literal["auto", "openai", "local"]


class Embedder(Protocol):
    """A text embedding model; vectors are unit-normalised float32 of length ``dims``."""

    model: str
    dims: int

    async def embed(
        self, texts: Sequence[str], *, purpose: str, chat_id: int | None = None
    ) -> list[np.ndarray]: ...


# --- pure helpers ------------------------------------------------------------------------------


def unit(vector: Any, dims: int) -> np.ndarray:
    """``vector`` as a unit-length float32 array of ``dims`` (EmbeddingError if impossible)."""
    v = np.asarray(vector, dtype=np.float32).reshape(-1)
    if v.shape[0] != dims:
        raise EmbeddingError(f"expected a {dims}-d vector, got {v.shape[0]}-d")
    norm = float(np.linalg.norm(v))
    if not math.isfinite(norm) or norm == 0.0:
        raise EmbeddingError("the model returned a zero or non-finite vector")
    return v / np.float32(norm)


def estimate_tokens(text: str) -> int:
    """A cautious upper estimate of BPE tokens (ASCII ~3 chars/token, other text 1.5 bytes)."""
    ascii_chars = sum(1 for c in text if c < "\x80")
    other_bytes = len(text.encode("utf-8", "surrogatepass")) - ascii_chars
    return math.ceil(ascii_chars / 3 + other_bytes / 1.5)


def clip_text(text: str, max_tokens: int) -> str:
    """``text`` stripped (blank -> :data:`EMPTY_TEXT`) and cut to about ``max_tokens``."""
    text = text.strip() or EMPTY_TEXT
    if estimate_tokens(text) <= max_tokens:
        return text
    lo, hi = 0, len(text)  # longest prefix within the budget
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate_tokens(text[:mid]) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo] or EMPTY_TEXT


def request_batches(texts: Sequence[str], max_inputs: int, max_tokens: int) -> Iterator[list[str]]:
    """Consecutive slices of ``texts`` within ``max_inputs`` and ``max_tokens`` per request."""
    batch: list[str] = []
    tokens = 0
    for text in texts:
        cost = estimate_tokens(text)
        if batch and (len(batch) >= max_inputs or tokens + cost > max_tokens):
            yield batch
            batch, tokens = [], 0
        batch.append(text)
        tokens += cost
    if batch:
        yield batch


# --- OpenAI ------------------------------------------------------------------------------------


class OpenAIEmbedder:
    """``text-embedding-3-small`` via ``openai.AsyncOpenAI``; usage logged to ``api_usage``."""

    provider = "openai"

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str | None = None,
        usage_db: Queries | None = None,
        rates: RateTable = DEFAULT_RATES,
        model: str = OPENAI_MODEL,
        dims: int = OPENAI_DIMS,
        batch_size: int = OPENAI_BATCH,
        max_retries: int = 2,
        timeout: float = 60.0,
        client: Any = None,
    ) -> None:
        from openai import AsyncOpenAI

        self.model, self.dims = model, dims
        self.batch_size = max(1, min(batch_size, 2048))
        self._usage_db, self._rates = usage_db, rates
        self._secrets = (api_key,) if api_key else ()
        self._client = client or AsyncOpenAI(
            api_key=api_key, base_url=base_url or None, max_retries=max_retries, timeout=timeout
        )

    async def aclose(self) -> None:
        await self._client.close()

    async def embed(
        self, texts: Sequence[str], *, purpose: str, chat_id: int | None = None
    ) -> list[np.ndarray]:
        """Embed ``texts`` in as few requests as the API limits allow, in order."""
        prepared = [clip_text(t, OPENAI_MAX_INPUT_TOKENS) for t in texts]
        vectors: list[np.ndarray] = []
        for batch in request_batches(prepared, self.batch_size, OPENAI_MAX_REQUEST_TOKENS):
            vectors.extend(await self._request(batch, purpose, chat_id))
        return vectors

    async def _request(
        self, batch: list[str], purpose: str, chat_id: int | None
    ) -> list[np.ndarray]:
        from openai import APIConnectionError, APIStatusError, OpenAIError

        started = trio.current_time()
        try:
            response = await self._client.embeddings.create(model=self.model, input=batch)
        except OpenAIError as exc:
            # not chained: the SDK's exception holds the request, whose headers hold the key
            if isinstance(exc, APIStatusError):
                status = exc.status_code
                detail = f"{self.model}: HTTP {status}: {exc.message}"
                retryable = status in (408, 409, 429) or status >= 500
            else:
                detail = f"{self.model}: {type(exc).__name__}: {exc}"
                retryable = isinstance(exc, APIConnectionError)
            error = EmbeddingError(scrub_error(detail, self._secrets), retryable=retryable)
            await self._log(purpose, chat_id, started, 0, error=str(error))
            raise error from None
        usage = getattr(response, "usage", None)
        tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        await self._log(purpose, chat_id, started, tokens)
        data = sorted(response.data, key=lambda d: d.index)
        if [d.index for d in data] != list(range(len(batch))):
            raise EmbeddingError(f"{self.model}: {len(data)} vectors for {len(batch)} inputs")
        return [unit(d.embedding, self.dims) for d in data]

    async def _log(
        self, purpose: str, chat_id: int | None, started: float, tokens: int, error: str = ""
    ) -> None:
        if self._usage_db is None:
            return
        await log_api_usage(
            self._usage_db,
            provider=self.provider,
            model=self.model,
            purpose=purpose,
            chat_id=chat_id,
            input_tokens=tokens,
            latency_ms=(trio.current_time() - started) * 1000,
            ok=not error,
            error=error or None,
            rates=self._rates,
            secrets=self._secrets,
        )


# --- local (wordllama) -------------------------------------------------------------------------

_models: dict[int, Any] = {}
_models_lock = threading.Lock()


def _load_wordllama(dims: int) -> Any:
    """The wordllama model (loaded once per process, from the weights inside the package)."""
    with _models_lock:
        if dims in _models:
            return _models[dims]
        root = logging.getLogger()
        handlers, level = list(root.handlers), root.level
        try:
            import wordllama  # its import calls logging.basicConfig(); undone below

            model = wordllama.WordLlama.load(
                LOCAL_CONFIG,
                cache_dir=os.path.dirname(wordllama.__file__),
                dim=LOCAL_DIMS,
                trunc_dim=None if dims == LOCAL_DIMS else dims,
                disable_download=True,
            )
        except (ImportError, OSError, ValueError) as exc:
            raise EmbeddingError(f"cannot load the local embedding model: {exc}") from exc
        finally:
            root.handlers[:], root.level = handlers, level
        logging.getLogger("wordllama").setLevel(logging.WARNING)
        _models[dims] = model
        return model


class LocalEmbedder:
    """wordllama ``l2_supercat`` (static token embeddings, mean-pooled): fast, free, offline."""

    provider = "local"

    def __init__(self, *, dims: int = LOCAL_DIMS, batch_size: int = 32) -> None:
        if dims not in (64, 128, 256):
            raise ValueError("the shipped wordllama weights have 256 dims (truncatable to 64/128)")
        self.model = f"wordllama-l2-supercat-{dims}"
        self.dims = dims
        self.batch_size = batch_size

    async def aclose(self) -> None:
        """Nothing to release (the model stays cached for the process)."""

    async def load(self) -> None:
        """Load the model now (in a worker thread) rather than on the first ``embed``."""
        await trio.to_thread.run_sync(_load_wordllama, self.dims)

    async def embed(
        self, texts: Sequence[str], *, purpose: str, chat_id: int | None = None
    ) -> list[np.ndarray]:
        """Embed ``texts`` in a worker thread; ``purpose``/``chat_id`` are unused (no cost)."""
        if not texts:
            return []
        prepared = [(t.strip() or EMPTY_TEXT)[:LOCAL_MAX_CHARS] for t in texts]
        return await trio.to_thread.run_sync(self._embed_sync, prepared)

    def _embed_sync(self, texts: list[str]) -> list[np.ndarray]:
        model = _load_wordllama(self.dims)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # less padding
        try:
            matrix = model.embed([texts[i] for i in order], batch_size=self.batch_size)
        except Exception as exc:  # wordllama/tokenizers raise assorted errors
            raise EmbeddingError(f"{self.model}: {type(exc).__name__}: {exc}") from exc
        out: list[np.ndarray] = [np.empty(0, np.float32)] * len(texts)
        for row, i in enumerate(order):
            try:
                out[i] = unit(matrix[row], self.dims)
            except EmbeddingError:  # no tokens at all: embed the placeholder instead
                out[i] = unit(model.embed([EMPTY_TEXT])[0], self.dims)
        return out


# --- factory -----------------------------------------------------------------------------------


def embedding_model(provider: str, openai_api_key: str | None) -> str:
    """The model :func:`make_embedder` uses for these settings (``auto``: OpenAI when a key
    is set, else the local model), without building it."""
    if provider not in ("auto", "openai", "local"):
        raise SettingsError(
            "EMBEDDING_PROVIDER", f"must be auto, openai or local, not {provider!r}"
        )
    if provider == "local" or (provider == "auto" and not openai_api_key):
        return f"wordllama-l2-supercat-{LOCAL_DIMS}"
    return OPENAI_MODEL


def make_embedder(
    provider: str,
    openai_api_key: str | None,
    openai_base_url: str | None = None,
    *,
    usage_db: Queries | None = None,
    rates: RateTable = DEFAULT_RATES,
) -> OpenAIEmbedder | LocalEmbedder:
    """``auto``: OpenAI when a key is set, else local; ``openai`` requires the key.

    Close the result with ``await embedder.aclose()`` (or use ``factory.open_embedder``).
    """
    if embedding_model(provider, openai_api_key) != OPENAI_MODEL:
        return LocalEmbedder()
    if not openai_api_key:
        raise SettingsError("OPENAI_API_KEY", "is required for OpenAI embeddings")
    return OpenAIEmbedder(
        api_key=openai_api_key, base_url=openai_base_url, usage_db=usage_db, rates=rates
    )
