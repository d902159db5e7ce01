"""Issue 20, row 4, from outside: chat B read chat A's journal entry through ``search_entries``.

``engram journal import FILE --chat A`` fills chat A's journal; ``engram serve --webhook`` (a
subprocess on its own PostgreSQL, two allowed chats, the strict fake Bot API) is driven by a
scripted fake Anthropic model that answers every message with a ``search_entries`` call. The
tool result the model receives in its next request is what the chat can read: in chat B it
lacks A's entry, in chat A it has it. Likewise for a journal imported before migration 012 (no
owner): ``engram serve`` gives it to the first allowed chat at start and logs so.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio
from engram_outside import REPO, Engram, free_port, post_update, serve_env, update_body
from fakes.anthropic_api import Reply, new_id, run_fake_anthropic
from fakes.bot_api import run_fake_bot_api

from runtime import db as dbmod
from runtime.migrate import apply_migrations, load_migrations

pytestmark = pytest.mark.slow

A, B = 4020001, 4020002
CODE = "4417"  # in chat A's entry only
QUERY = "lighthouse keeper blue door"
QUESTION = "What did the lighthouse keeper tell me about the blue door?"
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
        results = (
            [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
            if isinstance(content, list)
            else []
        )
        if results:
            self.tool_results.append(json.dumps(results, ensure_ascii=False))
            return Reply(({"type": "text", "text": "Here is what your journal says."},))
        call = {
            "type": "tool_use",
            "id": new_id("toolu_01"),
            "name": "search_entries",
            "input": {"query": QUERY},
        }
        return Reply((call,), "tool_use")


async def import_journal(env: Mapping[str, str], path: Path, chat: int) -> None:
    """``engram journal import FILE --chat ID``, as the operator runs it."""
    run = await trio.run_process(
        [
            sys.executable,
            "-m",
            "actors.cli",
            "journal",
            "import",
            str(path),
            "--chat",
            str(chat),
            "--embeddings",
            "local",
        ],
        env=dict(env),
        cwd=REPO,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    out = run.stdout.decode() + run.stderr.decode()
    assert run.returncode == 0, out
    assert "2 imported" in out, out


@asynccontextmanager
async def engram_with(
    tmp_path: Path, database_url: str
) -> AsyncIterator[tuple[dict[str, str], Callable[[], Awaitable[tuple[str, str, Engram]]]]]:
    """The fakes and the environment of an ``engram serve`` allowing chats A and B; and
    ``ask``, which starts it, asks the same question in chat B then in chat A and returns the
    tool results the model was sent in each (and the stopped process)."""
    model = SearchingModel()
    async with (
        run_fake_bot_api() as bot,
        run_fake_anthropic() as fake_model,
        httpx.AsyncClient(timeout=10) as client,
    ):
        fake_model.responder = model
        env = serve_env(
            tmp_path,
            bot_api=bot.base_url,
            model=fake_model.base_url,
            port=free_port(),
            chats=[A, B],
            DATABASE_URL=database_url,
        )

        async def ask() -> tuple[str, str, Engram]:
            engram = Engram(env, tmp_path / "engram.log")
            await engram.start()
            try:
                await engram.wait_ready()
                for update_id, chat in ((1, B), (2, A)):
                    body = update_body(update_id, chat=chat, text=QUESTION)
                    assert await post_update(client, engram.port, body) == 200
                    with trio.fail_after(60):
                        while not bot.sent_texts(chat):  # noqa: ASYNC110 (another process)
                            await trio.sleep(0.05)
                    assert len(model.tool_results) == update_id, engram.tail()
            finally:
                await engram.stop()
            in_b, in_a = model.tool_results
            return in_b, in_a, engram

        yield env, ask


def assert_only_a_reads(in_b: str, in_a: str, marks: tuple[str, ...]) -> None:
    for secret in marks:  # none of A's entries in B's tool result
        assert secret not in in_b, in_b
    for own in marks:  # chat A reads its own journal
        assert own in in_a, in_a


async def test_chat_b_cannot_read_chat_as_journal(tmp_path: Path, database_url: str) -> None:
    journal = tmp_path / "Journal.json"
    journal.write_text(json.dumps(JOURNAL))
    async with engram_with(tmp_path, database_url) as (env, ask):
        await import_journal(env, journal, A)
        in_b, in_a, _ = await ask()
    assert_only_a_reads(in_b, in_a, (CODE, "A0A0A0A0", "A1A1A1A1", "fog"))


async def test_entries_from_before_012_go_to_the_first_allowed_chat_and_serve_says_so(
    tmp_path: Path, raw_db: dbmod.Database
) -> None:
    await apply_migrations(raw_db, [m for m in load_migrations() if m.version < 12])
    await raw_db.execute(  # a journal imported by the previous engram (no owner)
        "INSERT INTO entries (uuid, created_at, text) VALUES ('OLD0OLD0', now(), $1)",
        f"The lighthouse keeper's blue door code is {CODE}.",
    )
    async with engram_with(tmp_path, raw_db.url) as (_, ask):
        in_b, in_a, engram = await ask()
    assert_only_a_reads(in_b, in_a, ("OLD0OLD0", "blue door code"))
    said = [e for e in engram.log_events() if e.get("event") == "journal.entries_assigned"]
    assert [e["message"] for e in said] == [
        f"assigned 1 journal entry to chat {A} (the first allowed chat)"
    ]
