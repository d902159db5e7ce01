"""Pairing and the allowlist, end to end: the bot's actor system (long polling) against the
strict fake Bot API on a real PostgreSQL, with no TELEGRAM_ALLOWED_CHAT_IDS configured.

A chat pairs by sending ``/start <code>``; every other chat's updates are kept and it is told,
at most once an hour and in the same words whatever it sent, that the bot is private; wrong
codes lock only the chat that sent them, and guessing is paced without ever refusing the right
code sent in time; a chat allowed later (by the code, or
``engram chats allow`` from another process) gets its kept updates answered.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import attrs
import pytest
import trio
import trio.testing
from fakes.bot_api import DEFAULT_TOKEN, FakeBotApi, run_fake_bot_api

from actors.agent.turn import TurnInput, TurnReply
from actors.chat.actor import HELP
from actors.settings import load_settings
from actors.system import BotSystem
from actors.telegram.client import BotApiClient
from actors.telegram.pairing import PAIRED, PRIVATE, Attempt, ChatAccess
from actors.telegram.pairing_codes import CODE_ALPHABET, PairingCode, TokenBucket, new_code
from actors.telegram.poller import Poller
from actors.telegram.types import parse_update
from runtime import db as dbmod
from runtime.serve import serve
from runtime.shutdown import Shutdown

OWNER = 7001
STRANGER = 7002
ROOT = Path(__file__).resolve().parents[3]


@attrs.define
class Echo:
    turns: list[TurnInput] = attrs.field(factory=list)

    async def run_turn(self, turn: TurnInput) -> TurnReply:
        self.turns.append(turn)
        return TurnReply(f"echo: {turn.text}")


@attrs.define
class Bot:
    access: ChatAccess
    announced: list[str]
    now: list[float]  # the pairing clock (seconds)
    agent: Echo

    @property
    def code(self) -> str:
        assert self.access.code is not None
        return self.access.code.code


@asynccontextmanager
async def running(
    db: dbmod.Database, fake: FakeBotApi, *, allowed: str = "", refresh: float = 0.2
) -> AsyncIterator[Bot]:
    settings = load_settings(
        {
            "ENGRAM_PORT": "0",
            "TELEGRAM_BOT_TOKEN": DEFAULT_TOKEN,
            "TELEGRAM_ALLOWED_CHAT_IDS": allowed,
            "TELEGRAM_API_BASE_URL": fake.base_url,
            "SHUTDOWN_DEADLINE": "5",
        },
        dotenv=None,
    )
    shutdown = Shutdown(deadline=5, signals=())
    agent, now = Echo(), [0.0]
    announced: list[str] = []
    systems: list[BotSystem] = []
    started = trio.Event()

    def build(s: Any, d: dbmod.Database, sh: Shutdown) -> BotSystem:
        def short_poll(*args: Any, **kwargs: Any) -> Poller:
            return Poller(*args, poll_timeout=1, **kwargs)

        system = BotSystem(
            s,
            d,
            sh,
            polling=True,
            turns=agent,
            poller_factory=short_poll,
            bot_factory=lambda: BotApiClient(DEFAULT_TOKEN, base_url=fake.base_url),
            announce=announced.append,
            access_options={"clock": lambda: now[0], "refresh_interval": refresh},
        )
        systems.append(system)
        return system

    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            lambda: serve(
                settings, db, build, shutdown=shutdown, on_listening=lambda b: started.set()
            )
        )
        with trio.fail_after(20):
            await started.wait()
        access = await _access_of(systems[0])
        yield Bot(access, announced, now, agent)
        shutdown.request_stop("test")


async def _access_of(system: BotSystem) -> ChatAccess:
    """The ChatAccess the system started."""
    with trio.fail_after(5):
        while True:
            if system.chat_access is not None:
                return system.chat_access
            await trio.sleep(0.01)


async def wait_for(predicate: Any, limit: float = 15.0) -> None:
    """Poll state the fake server and the actors change (no event to wait on)."""
    with trio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110
            await trio.sleep(0.05)


async def settle(fake: FakeBotApi, seconds: float = 1.5) -> None:
    """Let the poller take everything queued and the actors answer it."""
    await wait_for(lambda: not fake.pending_updates)
    await trio.sleep(seconds)


# --- pure ---------------------------------------------------------------------------------------


def test_codes_are_long_random_and_readable() -> None:
    codes = {new_code() for _ in range(200)}
    assert len(codes) == 200
    assert all(len(c) >= 8 and set(c) <= set(CODE_ALPHABET) for c in codes)
    assert not set(CODE_ALPHABET) & set("01OI")


def test_code_is_single_use_and_five_wrong_tries_lock_only_that_chat() -> None:
    code = PairingCode("ABCDEFGHJK", expires_at=600.0)
    assert [code.attempt(STRANGER, "nope", 1.0) for _ in range(5)] == ["wrong"] * 5
    assert code.attempt(STRANGER, "ABCDEFGHJK", 2.0) == "locked"  # this chat is done...
    assert code.tries_left(STRANGER) == 0 and code.state(2.0) == "open"
    assert [code.attempt(9, "nope", 2.0) for _ in range(4)] == ["wrong"] * 4
    assert code.attempt(OWNER, "ABCDEFGHJK", 3.0) == "paired"  # ...the owner is not
    assert code.attempt(OWNER, "ABCDEFGHJK", 4.0) == "used"
    assert code.attempt(9, "ABCDEFGHJK", 4.0) == "used"
    expired = PairingCode("ABCDEFGHJK", expires_at=600.0)
    assert expired.attempt(OWNER, "ABCDEFGHJK", 600.0) == "expired"
    assert expired.attempt(OWNER, "ABCDEFGHJK", 599.9) == "paired"  # judged by arrival


def test_the_bucket_allows_a_burst_then_one_per_interval() -> None:
    bucket = TokenBucket(burst=3, interval=2.0)
    assert [bucket.take(0.0) for _ in range(4)] == [True, True, True, False]
    assert bucket.wait(0.0) == pytest.approx(2.0)
    assert bucket.wait(1.5) == pytest.approx(0.5)
    assert bucket.take(2.0) and not bucket.take(2.0)
    assert bucket.take(100.0) and bucket.take(100.0) and bucket.take(100.0)
    assert not bucket.take(100.0)  # refilled only up to the burst


class NoDatabase:
    """Stands in for the database where a test must do no I/O (under MockClock)."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"database used: {name}")


async def test_guesses_beyond_the_burst_are_judged_one_per_interval_by_arrival(
    autojump_clock: trio.testing.MockClock,
) -> None:
    access = ChatAccess(
        cast(dbmod.Database, NoDatabase()),
        frozenset(),
        lambda chat: None,
        lambda chat, row: None,
        burst=2,
        attempt_interval=3.0,
        ttl=5.0,
        clock=trio.current_time,
    )
    code = access.open_pairing()
    for n in range(6):  # chats 1..3, two wrong codes each
        attempt = Attempt(1 + n // 2, None, f"WRONG{n}", trio.current_time())
        assert not await access.try_code(attempt)
    assert sum(code.wrong.values()) == 2 and len(access.waiting) == 4  # the burst, at once
    async with trio.open_nursery() as nursery:
        nursery.start_soon(access.judge_waiting)
        # one more every 3 s, though the code expired at 5 s: each is judged by when it arrived
        for due, judged in ((3.0, 3), (6.0, 4), (9.0, 5), (12.0, 6)):
            await trio.sleep_until(due - 0.01)
            assert sum(code.wrong.values()) == judged - 1
            await trio.sleep_until(due + 0.01)
            assert sum(code.wrong.values()) == judged
        assert not access.waiting
        nursery.cancel_scope.cancel()
    assert code.wrong == {1: 2, 2: 2, 3: 2}
    late = Attempt(4, None, code.code, trio.current_time())
    assert not await access.try_code(late) and not code.used  # arrived after the 5 s


def start_update(update_id: int, chat_id: int, text: str) -> tuple[Any, dict[str, Any]]:
    payload = {
        "update_id": update_id,
        "message": {
            "message_id": update_id,
            "date": 0,
            "text": text,
            "chat": {"id": chat_id, "type": "private"},
            "from": {"id": chat_id, "is_bot": False, "first_name": "T"},
        },
    }
    return parse_update(payload), payload


async def test_guesses_from_many_chats_are_paced_and_the_right_code_still_pairs(
    db: dbmod.Database,
) -> None:
    now = [0.0]
    woken: list[int] = []
    access = ChatAccess(
        db,
        frozenset(),
        woken.append,
        lambda chat, row: None,
        burst=3,
        attempt_interval=0.1,
        clock=lambda: now[0],
        refresh_interval=60,
    )
    strangers = (201, 202, 203)
    async with trio.open_nursery() as nursery:
        await nursery.start(access.run)
        assert access.code is not None
        right = access.code.code
        n = 0
        for chat in strangers:
            for guess in range(6):  # the sixth is over the chat's five
                n += 1
                assert not await access.stranger(*start_update(n, chat, f"/start WRONG{guess}"))
        # three judged at once (the burst), the rest wait their turn (one every 0.1 s); every
        # chat's sixth is refused, the chat has no tries left for it
        assert sum(access.code.wrong.values()) + len(access.waiting) == 3 * 5
        assert access.waiting
        assert not await access.stranger(*start_update(100, OWNER, f"/start {right}"))
        assert OWNER not in access  # waits its turn behind the guesses...
        now[0] = 601.0  # ...past the code's ten minutes: it arrived in time, so it counts
        assert not await access.stranger(*start_update(101, 204, f"/start {right}"))  # too late
        with trio.fail_after(10):
            while OWNER not in access:  # noqa: ASYNC110
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    assert [access.code.tries_left(c) for c in strangers] == [0, 0, 0]
    assert woken == [OWNER]
    rows = await db.fetch("SELECT chat_id, allowed_by FROM allowed_chats")
    assert [(r["chat_id"], r["allowed_by"]) for r in rows] == [(OWNER, "pairing")]
    replies = await db.fetch("SELECT chat_id, text FROM outbox ORDER BY id")
    by_chat = {r["chat_id"]: r["text"] for r in replies if r["chat_id"] != OWNER}
    assert by_chat == dict.fromkeys((*strangers, 204), PRIVATE)  # one notice each, same words
    # while it waited, the owner was told what any stranger is; then that it is paired
    assert [r["text"] for r in replies if r["chat_id"] == OWNER] == [PRIVATE, PAIRED]
    # the owner's /start was kept while it waited, and went to the inbox when it paired
    texts = await db.fetch(
        "SELECT payload->'message'->>'text' AS t FROM inbox WHERE chat_id = $1", OWNER
    )
    assert [r["t"] for r in texts] == [f"/start {right}"]


# --- through the fake Bot API -----------------------------------------------------------------


async def test_right_code_pairs_the_chat_and_its_kept_updates_are_answered(
    db: dbmod.Database,
) -> None:
    async with run_fake_bot_api() as fake, running(db, fake) as bot:
        [text] = bot.announced
        assert f"/start {bot.code}" in text
        assert f"https://t.me/engram_test_bot?start={bot.code}" in text
        fake.push_message(OWNER, "hello, are you there?")
        await wait_for(lambda: fake.sent_texts(OWNER))
        assert fake.sent_texts(OWNER) == [PRIVATE]
        fake.push_message(OWNER, f"/start {bot.code}")
        await wait_for(lambda: len(fake.sent_texts(OWNER)) == 4)
        # paired; then the kept message is answered by the agent, then the /start itself
        assert fake.sent_texts(OWNER)[1:] == [PAIRED, "echo: hello, are you there?", HELP]
        assert [t.text for t in bot.agent.turns] == ["hello, are you there?"]
        assert OWNER in bot.access
    row = await db.fetchrow(
        "SELECT allowed_by, user_id FROM allowed_chats WHERE chat_id = $1", OWNER
    )
    assert row is not None and (row["allowed_by"], row["user_id"]) == ("pairing", OWNER)
    assert await db.fetchval("SELECT count(*) FROM held_updates") == 0


@pytest.mark.slow
async def test_wrong_code_does_not_pair(db: dbmod.Database) -> None:
    async with run_fake_bot_api() as fake, running(db, fake) as bot:
        fake.push_message(STRANGER, "/start NOTTHECODE")
        await wait_for(lambda: fake.sent_texts(STRANGER))
        await settle(fake)
        assert fake.sent_texts(STRANGER) == [PRIVATE]
        assert STRANGER not in bot.access
        assert bot.access.code is not None and bot.access.code.tries_left(STRANGER) == 4
    assert await db.fetchval("SELECT count(*) FROM allowed_chats") == 0
    assert await db.fetchval("SELECT count(*) FROM held_updates WHERE chat_id = $1", STRANGER) == 1


@pytest.mark.slow
async def test_an_expired_code_does_not_pair(db: dbmod.Database) -> None:
    async with run_fake_bot_api() as fake, running(db, fake) as bot:
        bot.now[0] = 600.0  # ten minutes after start
        fake.push_message(OWNER, f"/start {bot.code}")
        await wait_for(lambda: fake.sent_texts(OWNER))
        await settle(fake)
        assert fake.sent_texts(OWNER) == [PRIVATE]  # pairing is over: no hint about a code
        assert OWNER not in bot.access
    assert await db.fetchval("SELECT count(*) FROM allowed_chats") == 0


@pytest.mark.slow
async def test_a_second_chat_cannot_use_the_code_again(db: dbmod.Database) -> None:
    async with run_fake_bot_api() as fake, running(db, fake) as bot:
        code = bot.code
        fake.push_message(OWNER, f"/start {code}")
        await wait_for(lambda: PAIRED in fake.sent_texts(OWNER))
        fake.push_message(STRANGER, f"/start {code}")
        await wait_for(lambda: fake.sent_texts(STRANGER))
        await settle(fake)
        assert fake.sent_texts(STRANGER) == [PRIVATE]
        assert OWNER in bot.access and STRANGER not in bot.access
    rows = await db.fetch("SELECT chat_id FROM allowed_chats")
    assert [r["chat_id"] for r in rows] == [OWNER]


@pytest.mark.slow
async def test_five_wrong_codes_lock_only_the_chat_that_sent_them(db: dbmod.Database) -> None:
    async with run_fake_bot_api() as fake, running(db, fake) as bot:
        for n in range(5):
            fake.push_message(STRANGER, f"/start GUESS{n}")
        await settle(fake)
        assert bot.access.code is not None and bot.access.code.state(0.0, STRANGER) == "locked"
        fake.push_message(STRANGER, f"/start {bot.code}")  # the right code, from a locked chat
        await settle(fake)
        assert STRANGER not in bot.access
        fake.push_message(OWNER, f"/start {bot.code}")  # the owner still pairs
        await wait_for(lambda: PAIRED in fake.sent_texts(OWNER))
        assert OWNER in bot.access
        assert fake.sent_texts(STRANGER) == [PRIVATE]  # one notice for six tries
    rows = await db.fetch("SELECT chat_id FROM allowed_chats")
    assert [r["chat_id"] for r in rows] == [OWNER]


@pytest.mark.slow
async def test_the_private_reply_comes_at_most_once_an_hour(db: dbmod.Database) -> None:
    async with run_fake_bot_api() as fake, running(db, fake, allowed=str(OWNER)) as bot:
        assert bot.access.code is None and bot.announced == []  # a chat is allowed: no pairing
        for text in ("hi", "hello?", "anyone?"):
            fake.push_message(STRANGER, text)
        await settle(fake)
        assert fake.sent_texts(STRANGER) == [PRIVATE]
        # an hour later, the next message is answered again (the notice time moved back)
        await db.execute("UPDATE stranger_notices SET notified_at = now() - interval '61 minutes'")
        fake.push_message(STRANGER, "still nobody?")
        await wait_for(lambda: len(fake.sent_texts(STRANGER)) == 2)
        await settle(fake, 0.5)
        assert fake.sent_texts(STRANGER) == [PRIVATE, PRIVATE]
        assert bot.agent.turns == []
    assert await db.fetchval("SELECT count(*) FROM held_updates WHERE chat_id = $1", STRANGER) == 4


@pytest.mark.slow
async def test_a_chat_allowed_later_from_the_cli_gets_its_kept_updates_answered(
    db: dbmod.Database, database_url: str, tmp_path: Path
) -> None:
    async with run_fake_bot_api() as fake, running(db, fake, allowed=str(OWNER)) as bot:
        fake.push_message(STRANGER, "first")
        fake.push_message(STRANGER, "second")
        await settle(fake)
        assert fake.sent_texts(STRANGER) == [PRIVATE]
        # another process: `engram chats allow ID`
        result = await trio.to_thread.run_sync(
            lambda: cli(tmp_path, database_url, "chats", "allow", str(STRANGER))
        )
        assert result.returncode == 0, result.stderr
        assert f"chat {STRANGER} allowed" in result.stdout
        assert "2 kept update(s) will be answered" in result.stdout
        await wait_for(lambda: len(fake.sent_texts(STRANGER)) == 3)
        assert fake.sent_texts(STRANGER)[1:] == ["echo: first", "echo: second"]
        assert STRANGER in bot.access
        # and revoked again: its next message is kept, not answered
        result = await trio.to_thread.run_sync(
            lambda: cli(tmp_path, database_url, "chats", "revoke", str(STRANGER))
        )
        assert result.returncode == 0, result.stderr
        await wait_for(lambda: STRANGER not in bot.access)
        fake.push_message(STRANGER, "third")
        await settle(fake)
        assert len(fake.sent_texts(STRANGER)) == 3
    assert await db.fetchval("SELECT count(*) FROM held_updates WHERE chat_id = $1", STRANGER) == 1


@pytest.mark.slow
async def test_updates_older_than_a_day_are_not_released(db: dbmod.Database) -> None:
    async with run_fake_bot_api() as fake, running(db, fake, allowed=str(OWNER)):
        fake.push_message(STRANGER, "yesterday's")
        fake.push_message(STRANGER, "today's")
        await settle(fake, 0.5)
        await db.execute(
            "UPDATE held_updates SET received_at = now() - interval '25 hours' "
            "WHERE payload->'message'->>'text' = 'yesterday''s'"
        )
        await db.execute(
            "INSERT INTO allowed_chats (chat_id, allowed_by) VALUES ($1, 'cli')", STRANGER
        )
        await wait_for(lambda: len(fake.sent_texts(STRANGER)) == 2)
        await settle(fake, 0.5)
        assert fake.sent_texts(STRANGER) == [PRIVATE, "echo: today's"]


def cli(tmp_path: Path, database_url: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return cli_env(tmp_path, database_url, {}, *argv)


@pytest.mark.slow
async def test_chats_lists_counts_and_who_allowed_them(
    db: dbmod.Database, database_url: str, tmp_path: Path
) -> None:
    await db.execute(
        "INSERT INTO chat_messages (chat_id, role, content) VALUES (11, 'user', 'a'), "
        "(11, 'assistant', 'b'), (22, 'user', 'c')"
    )
    await db.execute(
        "INSERT INTO allowed_chats (chat_id, allowed_by, user_id) VALUES (22, 'pairing', 5)"
    )
    await db.execute(
        "INSERT INTO held_updates (chat_id, update_key, kind, payload) "
        "VALUES (33, 'update:1', 'message', '{}')"
    )
    await db.execute(  # chat 44's journal: a chat the database knows by its entries alone
        "INSERT INTO entries (uuid, created_at, chat_id) VALUES ('a', now(), 44), ('b', now(), 44)"
    )
    env_setting = {"TELEGRAM_ALLOWED_CHAT_IDS": "11"}
    result = await trio.to_thread.run_sync(
        lambda: cli_env(tmp_path, database_url, env_setting, "chats")
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    header = ["chat", "allowed", "messages", "patterns", "kept", "updates", "journal"]
    assert lines[0].split() == header
    rows = {line.split()[0]: line for line in lines[1:]}
    assert re.match(r"11\s+setting\s+2\s+0\s+0\s+0$", rows["11"])
    assert re.match(
        r"22\s+paired \d{4}-\d\d-\d\d \d\d:\d\d \(user 5\)\s+1\s+0\s+0\s+0$", rows["22"]
    )
    assert re.match(r"33\s+no\s+0\s+0\s+1\s+0$", rows["33"])
    assert re.match(r"44\s+no\s+0\s+0\s+0\s+2$", rows["44"])
    assert result.stderr == ""  # a command's stderr stays quiet


def cli_env(
    tmp_path: Path, database_url: str, extra: dict[str, str], *argv: str
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ENGRAM_", "TELEGRAM_"))}
    env.update(DATABASE_URL=database_url, ENGRAM_HOME=str(tmp_path), LOG_FORMAT="json", **extra)
    return subprocess.run(
        [sys.executable, "-m", "actors.cli", *argv],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_kept_updates_older_than_a_day_are_purged(db: dbmod.Database) -> None:
    from actors.telegram import access

    for n in (1, 2):
        assert await access.hold_update(db, f"update:{n}", n, STRANGER, "message", {"n": n})
    assert not await access.hold_update(db, "update:1", 1, STRANGER, "message", {"n": 1})
    await db.execute(
        "UPDATE held_updates SET received_at = now() - interval '25 hours' WHERE update_id = 1"
    )
    assert await access.purge_held(db) == 1
    rows = await db.fetch("SELECT update_id FROM held_updates")
    assert [r["update_id"] for r in rows] == [2]
