"""The LLM settings section: which chat and memory models, their keys and endpoints, the prompt
cache, prices, transcription."""

from __future__ import annotations

from typing import ClassVar, Literal

import attrs

from memory.errors import LLMError
from memory.llm.cost import parse_rates
from runtime.parsers import Secret, choice, http_url, secret_word, visible
from runtime.settings import Field, SettingsSection

#: The values of LLM_PROVIDER.
PROVIDERS = ("anthropic", "openai")
#: each provider's settings: ``<PREFIX>_API_KEY``, ``<PREFIX>_MODEL``, ``<PREFIX>_BASE_URL``
SETTINGS_PREFIXES = {"anthropic": "ANTHROPIC", "openai": "OPENAI"}
#: MEMORY_MODEL when unset and LLM_PROVIDER=anthropic (with openai: OPENAI_MODEL)
DEFAULT_MEMORY_MODEL = "claude-haiku-4-5"
#: what a model is opened for: ``chat`` (turns) or ``memory`` (compaction, adjudication,
#: episode summaries)
LLMRole = Literal["chat", "memory"]
#: The values of PROMPT_CACHE_TTL ("off": no breakpoints).
CACHE_TTLS = ("5m", "1h", "off")
PromptCacheTTL = Literal["5m", "1h", "off"]


model_name = visible("a model name")


def model_rates(raw: str) -> str:
    """MODEL_RATES as written, once every entry parses (the error names the bad entry)."""
    value = raw.strip()
    parse_rates(value)
    return value


@attrs.frozen(kw_only=True, slots=False)
class LLMSettings(SettingsSection):
    """The chat model and the memory model (Anthropic or any OpenAI-compatible endpoint), the
    prompt cache's TTL, prices and speech-to-text."""

    fields: ClassVar[tuple[Field, ...]] = (
        Field(
            "OPENAI_API_KEY",
            "openai_api_key",
            "",
            secret_word,
            "OpenAI key (voice transcription; empty: voice notes are answered with a notice).",
            secret=True,
        ),
        Field(
            "OPENAI_BASE_URL",
            "openai_base_url",
            "",
            http_url,
            "OpenAI-compatible base URL (empty: the SDK default).",
        ),
        Field(
            "LLM_PROVIDER",
            "llm_provider",
            "anthropic",
            choice(*PROVIDERS),
            "anthropic, or openai for any OpenAI-compatible chat endpoint (OPENAI_BASE_URL).",
        ),
        Field(
            "ANTHROPIC_API_KEY",
            "anthropic_api_key",
            "",
            secret_word,
            "Anthropic API key.",
            secret=True,
        ),
        Field(
            "ANTHROPIC_MODEL",
            "anthropic_model",
            "claude-sonnet-4-6",
            model_name,
            "Claude model for turns.",
        ),
        Field(
            "ANTHROPIC_BASE_URL",
            "anthropic_base_url",
            "",
            http_url,
            "Anthropic API base URL (empty: the SDK default).",
        ),
        Field(
            "OPENAI_MODEL",
            "openai_model",
            "gpt-4o-mini",
            model_name,
            "Chat model when LLM_PROVIDER=openai.",
        ),
        Field(
            "MEMORY_MODEL",
            "memory_model",
            "",
            model_name,
            "Model for memory work (compaction, adjudication, episode summaries), from "
            "LLM_PROVIDER; empty: claude-haiku-4-5, or OPENAI_MODEL with openai.",
        ),
        Field(
            "PROMPT_CACHE_TTL",
            "prompt_cache_ttl",
            "5m",
            choice(*CACHE_TTLS),
            "Lifetime of the turn context's cached prefix (Anthropic cache_control): 5m, 1h, "
            "or off (no breakpoints).",
        ),
        Field(
            "MODEL_RATES",
            "model_rates",
            "",
            model_rates,
            "Prices on top of the built-in table: model=in/out (USD per 1M tokens) or "
            "model=usd/min, comma-separated.",
        ),
        Field(
            "TRANSCRIPTION_MODEL",
            "transcription_model",
            "whisper-1",
            model_name,
            "Speech-to-text model for voice notes.",
        ),
    )

    openai_api_key: Secret
    openai_base_url: str
    llm_provider: str
    anthropic_api_key: Secret
    anthropic_model: str
    anthropic_base_url: str
    openai_model: str
    memory_model: str = ""
    prompt_cache_ttl: PromptCacheTTL = "5m"
    model_rates: str = ""
    transcription_model: str

    def prompt_cache(self) -> Literal["5m", "1h"] | None:
        """The TTL of the turn context's prompt-cache breakpoints (None: PROMPT_CACHE_TTL=off)."""
        return None if self.prompt_cache_ttl == "off" else self.prompt_cache_ttl

    def model_for(self, role: LLMRole) -> str:
        """The model of ``role``: ``chat`` (turns) or ``memory`` (compaction, adjudication,
        episode summaries)."""
        if role == "memory" and self.memory_model:
            return self.memory_model
        if self.llm_provider == "openai":
            return self.openai_model
        return DEFAULT_MEMORY_MODEL if role == "memory" else self.anthropic_model


def settings_to_fix(exc: LLMError) -> str:
    """The settings an operator should check when the model refuses our requests."""
    prefix = SETTINGS_PREFIXES.get(exc.provider, "OPENAI")
    if exc.status in (401, 403):
        return f"{prefix}_API_KEY"
    if exc.status == 404:
        return f"{prefix}_MODEL or {prefix}_BASE_URL"
    if exc.status is None:
        return f"{prefix}_BASE_URL or {prefix}_API_KEY"
    return f"{prefix}_MODEL"
