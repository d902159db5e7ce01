"""``open_llm(..., deferred=True)`` (what ``engram serve`` opens): the provider's SDK is not
imported on start-up; it is loaded by ``preload`` in the background or by the first call."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import trio
from fakes.anthropic_api import FakeAnthropic

from memory.llm.factory import DeferredLLM, open_llm, preload
from memory.llm.protocol import Message
from memory.llm.settings import LLMSettings
from runtime.db import Database
from runtime.settings import load_settings

CHAT = 99


def _settings(fake: FakeAnthropic) -> LLMSettings:
    return load_settings(
        LLMSettings,
        {"ANTHROPIC_API_KEY": fake.api_key, "ANTHROPIC_BASE_URL": fake.base_url},
        dotenv=None,
    )


async def test_the_first_call_loads_the_provider(fake_claude: FakeAnthropic, db: Database) -> None:
    async with open_llm(_settings(fake_claude), db, deferred=True) as llm:
        assert isinstance(llm, DeferredLLM) and not llm.loaded
        assert llm.model == "claude-sonnet-4-6"
        completion = await llm.complete(
            system="be brief",
            messages=[Message.user("hi")],
            tools=[],
            max_tokens=32,
            purpose="test",
            chat_id=CHAT,
        )
        assert llm.loaded
        provider = await llm.provider()
    assert completion.text == "Hello from the fake Claude."
    assert provider._client.is_closed()  # closed with the block
    assert await db.fetchval("SELECT count(*) FROM api_usage WHERE chat_id = $1", CHAT) == 1


async def test_preload_builds_it_in_the_background(
    fake_claude: FakeAnthropic, db: Database
) -> None:
    async with open_llm(_settings(fake_claude), db, deferred=True) as llm:
        assert isinstance(llm, DeferredLLM)
        preload(llm, object())  # type: ignore[arg-type]  # anything else is left alone
        with trio.fail_after(10):
            while not llm.loaded:  # noqa: ASYNC110 (a plain thread, no event to wait on)
                await trio.sleep(0.01)
    assert fake_claude.requests == []  # loading calls nothing


async def test_unused_deferred_model_closes_without_loading(
    fake_claude: FakeAnthropic, db: Database
) -> None:
    async with open_llm(_settings(fake_claude), db, deferred=True) as llm:
        pass
    assert isinstance(llm, DeferredLLM) and not llm.loaded


@pytest.mark.slow
def test_the_sdk_is_not_imported_until_needed() -> None:
    code = textwrap.dedent(
        """
        import sys, trio
        import actors.cli.main  # everything engram serve imports before it serves
        from memory.llm.factory import open_llm
        from memory.llm.settings import LLMSettings
        from runtime.settings import load_settings

        async def main():
            s = load_settings(LLMSettings, {"ANTHROPIC_API_KEY": "k"}, dotenv=None)
            async with open_llm(s, None, deferred=True) as llm:
                print("before", "anthropic" in sys.modules, "openai" in sys.modules)
                await llm.provider()
                print("after", "anthropic" in sys.modules, "openai" in sys.modules)

        trio.run(main)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout.split("\n")
    assert "before False False" in out
    assert "after True False" in out
