"""Routine messages are memory, from outside (seed 004 Tests 7, 7b, 7d): ``engram serve`` as a
subprocess on a real PostgreSQL, Telegram faked by the strict fake Bot API, the models by the
strict fake Anthropic API. A due reminder of 600 words (its inbox row put there as the
scheduler puts it) is sent as it is after "⏰", stored verbatim with the memory model's summary,
and the next turn's request shows ``[reminder-1 @ HH:MM, ...]: <summary>``, not the 600 words;
an unknown routine's run is skipped with its reason, and the chat goes on."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from engram_outside import Engram, free_port, post_update, serve_env, update_body
from fakes.anthropic_api import Reply, run_fake_anthropic
from fakes.bot_api import run_fake_bot_api

from actors.queues import inbox
from actors.scheduler.routine import INBOX_KIND, DueRun, update_key
from runtime import db as dbmod

pytestmark = pytest.mark.slow

CHAT = 4022001
SUMMARY = "Reminder to prepare the quarterly review: gather numbers and book the room."
MARK = "zephyrine"  # a word only the full text has


def long_reminder() -> str:
    words = [
        "prepare",
        "the",
        "quarterly",
        "review",
        "gather",
        "the",
        "numbers",
        "and",
        "book",
        "the",
        "meeting",
        "room",
    ]
    body = [words[i % len(words)] for i in range(598)]
    return " ".join([*body[:300], MARK, "detail", *body[300:]])


def summarise(body: Mapping[str, Any]) -> Reply | None:
    system = json.dumps(body.get("system", ""))
    if "You summarise a message a companion bot sent" in system:
        return Reply(({"type": "text", "text": SUMMARY},))
    return None


async def test_a_long_reminder_is_sent_whole_and_the_next_turn_sees_its_summary(
    tmp_path: Path, database_url: str
) -> None:
    text = long_reminder()
    due_at = datetime.now(UTC).replace(microsecond=0)
    async with dbmod.asyncio_loop(), dbmod.open_database(database_url, max_size=2) as db:
        from runtime.migrate import apply_migrations

        await apply_migrations(db)
        for job, name, kind, payload in [
            (1, "reminder-1", "reminder", {"text": text}),
            (2, "no-such-routine", "routine", {}),
        ]:
            run = DueRun(
                job_id=job,
                chat_id=CHAT,
                name=name,
                kind=kind,  # type: ignore[arg-type]
                due_at=due_at,
                payload=payload,
            )
            await inbox.insert_update(
                db, update_key(job, due_at), None, CHAT, INBOX_KIND, run.to_payload()
            )
    async with (
        run_fake_bot_api() as bot,
        run_fake_anthropic() as model,
        httpx.AsyncClient(timeout=10) as client,
    ):
        model.responder = summarise
        model.default_text = "Noted."
        env = serve_env(
            tmp_path,
            bot_api=bot.base_url,
            model=model.base_url,
            port=free_port(),
            chats=[CHAT],
            DATABASE_URL=database_url,
            TIMEZONE="UTC",
        )
        engram = Engram(env, tmp_path / "engram.log")
        await engram.start()
        try:
            await engram.wait_ready()
            with trio.fail_after(30):  # the start's sweep finds the due rows
                while not bot.sent_texts(CHAT):  # noqa: ASYNC110 (another process)
                    await trio.sleep(0.05)
            assert bot.sent_texts(CHAT) == [f"⏰ {text}"]
            seen = len(model.requests)
            assert (
                await post_update(
                    client, engram.port, update_body(1, chat=CHAT, text="what was that about?")
                )
                == 200
            )
            with trio.fail_after(30):
                while len(bot.sent_texts(CHAT)) < 2:  # noqa: ASYNC110 (another process)
                    await trio.sleep(0.05)
            turn = json.dumps(model.requests[seen].body, ensure_ascii=False)
        finally:
            await engram.stop()
    assert bot.sent_texts(CHAT)[1] == "Noted."
    assert re.search(
        r"Assistant \[reminder-1 @ \d\d:\d\d(, [a-z0-9 ]+)?\]: " + re.escape(SUMMARY), turn
    ), turn[-1500:]
    assert SUMMARY in turn and MARK not in turn  # the summary, not the 600 words
    async with dbmod.asyncio_loop(), dbmod.open_database(database_url, max_size=2) as db:
        row = await db.fetchrow(
            "SELECT content, summary, source, routine_name FROM chat_messages"
            " WHERE chat_id = $1 AND source = 'routine'",
            CHAT,
        )
        runs: list[tuple[Any, ...]] = [
            (r["name"], r["outcome"], r["reason"], r["model_calls"])
            for r in await db.fetch("SELECT * FROM proactive_runs ORDER BY id")
        ]
    assert row is not None and row["content"] == f"⏰ {text}" and row["summary"] == SUMMARY
    assert runs == [
        ("reminder-1", "sent", None, 1),
        ("no-such-routine", "skipped", "unknown routine 'no-such-routine'", 0),
    ]
