"""``open_llm``: the provider, model and base URL come from the settings; the SDK client is
closed when the block ends. Real SDK clients against the strict fakes, real database."""

from __future__ import annotations

from typing import Any

import pytest
from fakes.anthropic_api import FakeAnthropic
from fakes.openai_api import CHAT_COMPLETIONS, FakeOpenAI

from memory.llm.anthropic_provider import AnthropicLLM
from memory.llm.factory import open_llm
from memory.llm.openai_provider import OpenAICompatibleLLM
from memory.llm.protocol import Message
from memory.llm.settings import LLMSettings
from runtime.db import Database
from runtime.settings import load_settings

CHAT = 4242


async def usage_rows(db: Database) -> list[dict[str, Any]]:
    return [dict(r) for r in await db.fetch("SELECT * FROM api_usage ORDER BY id")]


async def say_hi(llm: Any) -> str:
    """One real agent call through ``llm`` (64 tokens at most); the answer's text."""
    completion = await llm.complete(
        system="Be brief.",
        messages=[Message.user("hi")],
        tools=[],
        max_tokens=64,
        purpose="agent",
        chat_id=CHAT,
    )
    return str(completion.text)


async def test_anthropic_model_and_base_url_from_settings(
    fake_claude: FakeAnthropic, db: Database
) -> None:
    model = "claude-haiku-4-5"  # not the default model
    settings = load_settings(
        LLMSettings,
        {
            "ANTHROPIC_API_KEY": fake_claude.api_key,
            "ANTHROPIC_MODEL": model,
            "ANTHROPIC_BASE_URL": fake_claude.base_url,
        },
        dotenv=None,
    )
    assert settings.anthropic_model != load_settings(LLMSettings, {}, dotenv=None).anthropic_model
    fake_claude.queue_text("Hello from the fake.")
    async with open_llm(settings, db) as llm:
        assert type(llm) is AnthropicLLM and llm.model == model
        text = await say_hi(llm)
    assert text == "Hello from the fake."
    [request] = fake_claude.requests
    assert request.body["model"] == model and request.body["max_tokens"] == 64
    assert llm._client.is_closed()
    [row] = await usage_rows(db)
    assert (row["provider"], row["model"], row["chat_id"]) == ("anthropic", model, CHAT)


async def test_openai_model_and_base_url_from_settings(
    fake_openai: FakeOpenAI, db: Database
) -> None:
    model = "local-qwen2.5-7b"
    settings = load_settings(
        LLMSettings,
        {
            "LLM_PROVIDER": "openai",
            "OPENAI_API_KEY": fake_openai.api_key,
            "OPENAI_BASE_URL": fake_openai.base_url,
            "OPENAI_MODEL": model,
            "ANTHROPIC_API_KEY": "sk-ant-unused-0123456789",
        },
        dotenv=None,
    )
    fake_openai.queue_chat_text("Hi from the compatible server.")
    async with open_llm(settings, db) as llm:
        assert type(llm) is OpenAICompatibleLLM and llm.model == model
        text = await say_hi(llm)
    assert text == "Hi from the compatible server."
    [call] = fake_openai.calls_to(CHAT_COMPLETIONS)
    assert call.authorized and call.model == model and call.params["max_tokens"] == 64
    assert llm._client.is_closed()
    [row] = await usage_rows(db)
    assert (row["provider"], row["model"], row["chat_id"]) == ("openai", model, CHAT)


async def test_the_memory_role_opens_the_memory_model(
    fake_claude: FakeAnthropic, fake_openai: FakeOpenAI, db: Database
) -> None:
    claude = {"ANTHROPIC_API_KEY": fake_claude.api_key, "ANTHROPIC_BASE_URL": fake_claude.base_url}
    for env, expected in (
        ({}, "claude-haiku-4-5"),
        ({"MEMORY_MODEL": "claude-sonnet-4-5"}, "claude-sonnet-4-5"),
    ):
        settings = load_settings(LLMSettings, {**claude, **env}, dotenv=None)
        async with open_llm(settings, db, role="memory") as llm:
            assert type(llm) is AnthropicLLM and llm.model == expected
            await say_hi(llm)
        async with open_llm(settings, db) as llm:
            # the chat model is unchanged
            assert isinstance(llm, AnthropicLLM) and llm.model == "claude-sonnet-4-6"
    assert [r.body["model"] for r in fake_claude.requests] == [
        "claude-haiku-4-5",
        "claude-sonnet-4-5",
    ]
    settings = load_settings(
        LLMSettings,
        {
            "LLM_PROVIDER": "openai",
            "OPENAI_BASE_URL": fake_openai.base_url,
            "OPENAI_API_KEY": fake_openai.api_key,
            "OPENAI_MODEL": "local-qwen",
        },
        dotenv=None,
    )
    async with open_llm(settings, db, role="memory") as llm:
        assert type(llm) is OpenAICompatibleLLM and llm.model == "local-qwen"


async def test_the_client_is_closed_when_the_block_fails(
    fake_claude: FakeAnthropic, db: Database
) -> None:
    settings = load_settings(
        LLMSettings,
        {"ANTHROPIC_API_KEY": fake_claude.api_key, "ANTHROPIC_BASE_URL": fake_claude.base_url},
        dotenv=None,
    )
    opened: list[Any] = []
    with pytest.raises(RuntimeError, match="turn failed"):
        async with open_llm(settings, db) as llm:
            opened.append(llm)
            assert not llm._client.is_closed()  # type: ignore[attr-defined]
            raise RuntimeError("turn failed")
    [llm] = opened
    assert type(llm) is AnthropicLLM and llm.model == settings.anthropic_model
    assert llm._client.is_closed()
    assert fake_claude.requests == []
