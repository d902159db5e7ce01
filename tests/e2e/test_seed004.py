"""Seed 004's end-to-end acceptance tests, from outside: ``engram serve`` as a subprocess (the
operator's process, webhook mode) on a real PostgreSQL, Telegram faked by the strict fake Bot API
and the model by the strict fake Anthropic API with a scripted extractor. Each test asserts what
the model is *shown*: the request bodies the fake receives.

* Test 1 — the project just mentioned is in the window of the next turn.
* Tests 3, 5, 6 and 10 — a job, a goal and the team offsite's date, said early and compacted
  away (their messages are no longer in the window), are in a later turn's context as memory,
  and still after a restart of the process.
* Test 6b — yesterday's messages are shown under their own day, in the configured time zone
  (local clock times, not UTC), apart from today's.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import attrs
import httpx
import pytest
import trio
from engram_outside import Engram, free_port, post_update, serve_env
from fakes.anthropic_api import FakeAnthropic, Reply, run_fake_anthropic
from fakes.bot_api import FakeBotApi, run_fake_bot_api
from fakes.extraction import MESSAGE, is_extraction, request_text

from runtime import db as dbmod

pytestmark = pytest.mark.slow

CHAT = 4004001
TZ = "Asia/Tokyo"  # far from UTC, so a UTC clock time is never mistaken for a local one


@attrs.define
class Extractor:
    """Answers compaction requests with valid extraction JSON: for every user message of the
    span containing a key of ``claims``, the claim (kind, content, optional day), citing it; the
    episode summary names no message text (so a test can tell memory from the window)."""

    claims: Mapping[str, tuple[str, str, str | None]]
    extractions: int = 0

    def __call__(self, body: Mapping[str, Any]) -> Reply | None:
        if not is_extraction(body):
            return None
        self.extractions += 1
        found = MESSAGE.findall(request_text(body))
        users = [(int(i), text) for i, role, text in found if role == "user"]
        new = []
        for key, (kind, content, day) in self.claims.items():
            cited = [i for i, text in users if key in text]
            if cited:
                claim: dict[str, Any] = {
                    "content": content,
                    "kind": kind,
                    "confidence": 0.9,
                    "signal": "explicit",
                    "evidence_message_ids": cited[:1],
                    "entry_uuids": [],
                    "temporal": None,
                }
                if day is not None:
                    claim["occurs_on"] = day
                new.append(claim)
        answer = {
            "new_patterns": new,
            "reinforcements": [],
            "contradictions": [],
            "supersedes": [],
            "meta_patterns": [],
            "episode_summary": f"A stretch of {len(found)} messages.",
        }
        return Reply(({"type": "text", "text": json.dumps(answer)},))


@attrs.define
class Chat:
    """A running ``engram serve`` with its fakes; ``say`` posts one message and waits for the
    reply, returning the text of the turn's first model request."""

    engram: Engram
    bot: FakeBotApi
    model: FakeAnthropic
    client: httpx.AsyncClient
    next_id: int = 1

    async def say(self, text: str) -> str:
        update_id = self.next_id
        self.next_id += 1
        before = len(self.bot.sent_texts(CHAT))
        seen = len(self.model.requests)
        body = {
            "update_id": update_id,
            "message": {
                "message_id": update_id,
                "date": int(datetime.now(UTC).timestamp()),
                "chat": {"id": CHAT, "type": "private", "first_name": "P"},
                "from": {"id": CHAT, "is_bot": False, "first_name": "P"},
                "text": text,
            },
        }
        assert await post_update(self.client, self.engram.port, body) == 200
        with trio.fail_after(30):
            while len(self.bot.sent_texts(CHAT)) <= before:  # noqa: ASYNC110 (another process)
                await trio.sleep(0.05)
        turns = [r for r in self.model.requests[seen:] if not is_extraction(r.body)]
        assert turns, "the turn made no model request"
        return json.dumps(turns[0].body, ensure_ascii=False)

    async def settle(self) -> None:
        """Wait until no model request has come for a second (compactions finished)."""
        while True:
            count = len(self.model.requests)
            await trio.sleep(1.0)
            if len(self.model.requests) == count:
                return


@asynccontextmanager
async def chat_with_engram(
    tmp_path: Path, database_url: str, extractor: Extractor, **env: str
) -> AsyncIterator[Chat]:
    async with (
        run_fake_bot_api() as bot,
        run_fake_anthropic() as model,
        httpx.AsyncClient(timeout=10) as client,
    ):
        model.responder = extractor
        model.default_text = "Noted."
        settings = serve_env(
            tmp_path,
            bot_api=bot.base_url,
            model=model.base_url,
            port=free_port(),
            chats=[CHAT],
            DATABASE_URL=database_url,
            TIMEZONE=TZ,
            **env,
        )
        engram = Engram(settings, tmp_path / "engram.log")
        await engram.start()
        try:
            await engram.wait_ready()
            yield Chat(engram, bot, model, client)
        finally:
            if engram.running:
                await engram.stop()


async def test_1_the_project_just_mentioned_is_in_the_window(
    tmp_path: Path, database_url: str
) -> None:
    async with chat_with_engram(tmp_path, database_url, Extractor({})) as chat:
        first = await chat.say("I'm working on a project called Lighthouse Atlas")
        assert "Lighthouse Atlas" in first  # the message itself
        second = await chat.say("What was the project I just told you about?")
    assert "Lighthouse Atlas" in second  # ... and, a turn later, in the window
    assert "What was the project I just told you about?" in second


async def test_3_5_6_10_job_goal_and_dates_outlive_their_messages_and_a_restart(
    tmp_path: Path, database_url: str
) -> None:
    today = datetime.now(ZoneInfo(TZ)).date()
    offsite = today + timedelta(days=10)
    said = {
        "job": "I work as a Solution Architect at GovTech",
        "goal": "My goal this year is to run the Tokyo marathon",
        "offsite": f"Our team offsite is on {offsite:%B} {offsite.day}",
    }
    claims = {
        "Solution Architect": ("fact", "User works as a Solution Architect at GovTech", None),
        "marathon": ("goal", "User wants to run the Tokyo marathon this year", None),
        "offsite": ("event", "User has a team offsite", offsite.isoformat()),
    }
    extractor = Extractor(claims)
    env = {"CONTEXT_TOKEN_BUDGET": "1000", "COMPACTION_KEEP_RECENT": "2"}
    async with chat_with_engram(tmp_path, database_url, extractor, **env) as chat:
        for text in said.values():
            await chat.say(text)
        for n in range(4):  # small talk pushes the three messages out of the window
            await chat.say(f"Just checking in, note number {n}")
        await chat.settle()
        assert extractor.extractions > 0, "nothing was compacted"
        later = await chat.say("What do you know about me?")
        await chat.engram.stop()
        await chat.engram.start()  # Test 10: a new process, the same database
        await chat.engram.wait_ready()
        restarted = await chat.say("Remind me what you know about me")
    for shown in (later, restarted):
        for text in said.values():
            assert text not in shown  # the messages themselves are compacted away ...
        assert "Solution Architect at GovTech" in shown  # ... their memory is not
        assert "Tokyo marathon" in shown
        assert "team offsite" in shown
        assert _local_day_shown(offsite, shown), "the offsite's date is not shown"


def _local_day_shown(day: date, text: str) -> bool:
    """Whether ``day`` appears in ``text`` in one of the forms a person reads."""
    forms = {day.isoformat(), f"{day.day} {day:%b}", f"{day:%b} {day.day}", f"{day.day} {day:%B}"}
    return any(form in text for form in forms)


async def test_6b_yesterday_is_its_own_day_in_local_time(tmp_path: Path, database_url: str) -> None:
    zone = ZoneInfo(TZ)
    now = datetime.now(zone)
    yesterday = (now - timedelta(days=1)).replace(hour=21, minute=7, second=0, microsecond=0)
    # the morning briefing of yesterday evening, stored as any turn would have stored it
    async with dbmod.asyncio_loop(), dbmod.open_database(database_url, max_size=2) as db:
        from runtime.migrate import apply_migrations

        await apply_migrations(db)
        await db.execute(
            "INSERT INTO chat_messages (chat_id, external_message_id, role, content, created_at)"
            " VALUES ($1, 'update:900', 'user', 'Tomorrow I have the dentist at nine', $2),"
            " ($1, NULL, 'assistant', 'Good luck at the dentist!', $2 + interval '1 minute')",
            CHAT,
            yesterday.astimezone(UTC),
        )
    async with chat_with_engram(tmp_path, database_url, Extractor({})) as chat:
        chat.next_id = 901
        shown = await chat.say("How did my day go?")
    assert "Tomorrow I have the dentist at nine" in shown
    # yesterday's clock time in the chat's zone (21:07), never the UTC one (12:07)
    assert "21:07" in shown
    assert yesterday.astimezone(UTC).strftime("%H:%M") not in shown
    # yesterday and today are told apart: yesterday's local date is shown, and so is today's
    assert _local_day_shown(yesterday.date(), shown) or "yesterday" in shown.lower()
    assert _local_day_shown(now.date(), shown) or "today" in shown.lower()
