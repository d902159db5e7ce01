"""Issue 20, row 4, from outside: chat B read chat A's journal entry through ``search_entries``.

``engram journal import FILE --chat A`` fills chat A's journal; ``engram serve --webhook`` (a
subprocess on its own PostgreSQL, two allowed chats, the strict fake Bot API) is driven by a
scripted fake Anthropic model that answers every message with a ``search_entries`` call. The
tool result the model receives in its next request is what the chat can read: in chat B it
lacks A's entry, in chat A it has it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio
from engram_outside import REPO, Engram, free_port, post_update, serve_env, update_body
from fakes.anthropic_api import Reply, new_id, run_fake_anthropic
from fakes.bot_api import run_fake_bot_api

pytestmark = pytest.mark.slow

A, B = 4020001, 4020002
CODE = "4417"  # in chat A's entry only
QUERY = "lighthouse keeper blue door"
JOURNAL = {
    "entries": [
        {
            "uuid": "A0A0A0A0A0A0A0A0A0A0A0A0A0A0A0A0",
            "creationDate": "2024-03-10T09:00:00Z",
            "text": f"The lighthouse keeper told me the blue door code is {CODE}. Keep it quiet.",
            "tags": ["secret"],
        },
        {
            "uuid": "A1A1A1A1A1A1A1A1A1A1A1A1A1A1A1A1",
            "creationDate": "2024-03-11T09:00:00Z",
            "text": "Rain all day; the lighthouse was hidden in the fog.",
        },
    ]
}


@attrs.define
class SearchingModel:
    """Answers a message with a ``search_entries`` call; after the tool result, with text. Keeps
    each tool result it was sent (the text the chat's turn could read)."""

    tool_results: list[str] = attrs.field(factory=list)

    def __call__(self, body: Mapping[str, Any]) -> Reply | None:
        if "search_entries" not in {t.get("name") for t in body.get("tools") or []}:
            return None  # not a turn (e.g. memory upkeep): the default answer
        last = (body.get("messages") or [{}])[-1]
        content = last.get("content")
        results = [
            b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"
        ] if isinstance(content, list) else []  # fmt: skip
        if results:
            self.tool_results.append(json.dumps(results, ensure_ascii=False))
            return Reply(({"type": "text", "text": "Here is what your journal says."},))
        call = {"type": "tool_use", "id": new_id("toolu_01"), "name": "search_entries",
                "input": {"query": QUERY}}  # fmt: skip
        return Reply((call,), "tool_use")


async def import_journal(env: Mapping[str, str], path: Path, chat: int) -> None:
    """``engram journal import FILE --chat ID``, as the operator runs it."""
    run = await trio.run_process(
        [
            sys.executable, "-m", "actors.cli", "journal", "import", str(path), "--chat", str(chat),
            "--embeddings", "local",
        ],
        env=dict(env), cwd=REPO, capture_stdout=True, capture_stderr=True, check=False,
    )  # fmt: skip
    out = run.stdout.decode() + run.stderr.decode()
    assert run.returncode == 0, out
    assert "2 imported" in out, out


async def test_chat_b_cannot_read_chat_as_journal(tmp_path: Path, database_url: str) -> None:
    journal = tmp_path / "Journal.json"
    journal.write_text(json.dumps(JOURNAL))
    model = SearchingModel()
    async with (
        run_fake_bot_api() as bot,
        run_fake_anthropic() as fake_model,
        httpx.AsyncClient(timeout=10) as client,
    ):
        fake_model.responder = model
        env = serve_env(
            tmp_path, bot_api=bot.base_url, model=fake_model.base_url, port=free_port(),
            chats=[A, B], DATABASE_URL=database_url,
        )  # fmt: skip
        await import_journal(env, journal, A)
        engram = Engram(env, tmp_path / "engram.log")
        await engram.start()
        try:
            await engram.wait_ready()
            for update_id, chat in ((1, B), (2, A)):
                text = "What did the lighthouse keeper tell me about the blue door?"
                assert (
                    await post_update(
                        client, engram.port, update_body(update_id, chat=chat, text=text)
                    )
                    == 200
                )
                with trio.fail_after(60):
                    while not bot.sent_texts(chat):  # noqa: ASYNC110 (another process)
                        await trio.sleep(0.05)
                assert len(model.tool_results) == update_id, engram.tail()
        finally:
            await engram.stop()
    in_b, in_a = model.tool_results
    for secret in (CODE, "A0A0A0A0", "A1A1A1A1", "fog"):  # neither of A's entries, in B
        assert secret not in in_b, in_b
    for own in (CODE, "A0A0A0A0", "A1A1A1A1", "fog"):  # chat A reads its own journal
        assert own in in_a, in_a
