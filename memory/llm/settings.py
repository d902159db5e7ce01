"""The LLM settings section: which chat model, its keys and endpoints, prices, transcription."""

from __future__ import annotations

from typing import ClassVar

import attrs

from runtime.settings import Field, Secret, SettingsSection, choice, http_url, secret, text

#: The values of LLM_PROVIDER.
PROVIDERS = ("anthropic", "openai")


@attrs.frozen(kw_only=True, slots=False)
class LLMSettings(SettingsSection):
    """The chat model (Anthropic or any OpenAI-compatible endpoint), prices and speech-to-text."""

    fields: ClassVar[tuple[Field, ...]] = (
        Field("OPENAI_API_KEY", "openai_api_key", "", secret,
              "OpenAI key (voice transcription; empty: voice notes are answered with a notice).",
              secret=True),
        Field("OPENAI_BASE_URL", "openai_base_url", "", http_url,
              "OpenAI-compatible base URL (empty: the SDK default)."),
        Field("LLM_PROVIDER", "llm_provider", "anthropic", choice(*PROVIDERS),
              "anthropic, or openai for any OpenAI-compatible chat endpoint (OPENAI_BASE_URL)."),
        Field("ANTHROPIC_API_KEY", "anthropic_api_key", "", secret, "Anthropic API key.",
              secret=True),
        Field("ANTHROPIC_MODEL", "anthropic_model", "claude-sonnet-4-5", text,
              "Claude model for turns."),
        Field("ANTHROPIC_BASE_URL", "anthropic_base_url", "", http_url,
              "Anthropic API base URL (empty: the SDK default)."),
        Field("OPENAI_MODEL", "openai_model", "gpt-4o-mini", text,
              "Chat model when LLM_PROVIDER=openai."),
        Field("MODEL_RATES", "model_rates", "", text,
              "Prices on top of the built-in table: model=in/out (USD per 1M tokens) or "
              "model=usd/min, comma-separated."),
        Field("TRANSCRIPTION_MODEL", "transcription_model", "whisper-1", text,
              "Speech-to-text model for voice notes."),
    )

    openai_api_key: Secret
    openai_base_url: str
    llm_provider: str
    anthropic_api_key: Secret
    anthropic_model: str
    anthropic_base_url: str
    openai_model: str
    model_rates: str = ""
    transcription_model: str
