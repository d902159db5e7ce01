"""A tap end to end, through ``engram serve``'s composition: a reply with buttons goes out
through the outbox; a tap comes in by webhook (or long polling) -> inbox -> router (answered at
once) -> chat actor -> the handler its token names -> the edit, through the outbox, to the
strict fake Bot API; on a real PostgreSQL. Expired, foreign and repeated taps change nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import httpx
import pytest
import trio
from fakes.bot_api import DEFAULT_TOKEN, FakeBotApi, run_fake_bot_api

from actors.agent.turn import TurnInput, TurnReply
from actors.chat import callbacks
from actors.chat.callbacks import EXPIRED, CallbackContext, CallbackTable
from actors.settings import load_settings
from actors.system import BotSystem
from actors.telegram.client import BotApiClient
from runtime import db as dbmod
from runtime.serve import serve
from runtime.shutdown import Shutdown

pytestmark = pytest.mark.slow  # the whole bot end to end (a few seconds each)

CHAT, OTHER = 5550101, 5550102
SECRET = "buttons-secret_token"


@attrs.define
class AskingAgent:
    """Answers "ask" with a question and two buttons (no model)."""

    db: dbmod.Database

    async def run_turn(self, turn: TurnInput) -> TurnReply:
        choices = [
            ("Yes", {"name": "pick", "choice": "yes"}),
            ("No", {"name": "pick", "choice": "no"}),
        ]
        kb = await callbacks.keyboard(self.db, turn.chat_id, [choices])
        return TurnReply("Coffee after 3 pm?", keyboard=kb)


@attrs.define
class Picks:
    """The test handler: records the tap, edits the message, says so."""

    seen: list[tuple[int, int, str]] = attrs.field(factory=list)

    async def pick(self, tap: CallbackContext) -> None:
        self.seen.append((tap.chat_id, tap.message_id, tap.action["choice"]))
        await tap.edit(f"Coffee after 3 pm? <b>{tap.action['choice']}</b>", parse_mode="HTML")


@attrs.define
class Bot:
    url: str
    fake: FakeBotApi
    picks: Picks
    polling: bool

    async def deliver(self, update: dict[str, Any]) -> None:
        """Hand an update to engram the way this run gets them (a webhook POST, or the poller
        fetching what the fake queued)."""
        if self.polling:
            return  # already queued by the fake for getUpdates
        async with httpx.AsyncClient() as client:
            headers = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
            response = await client.post(f"{self.url}/api/telegram", json=update, headers=headers)
        assert response.status_code == 200


@asynccontextmanager
async def running_bot(db: dbmod.Database, *, polling: bool = False) -> AsyncIterator[Bot]:
    env = {
        "ENGRAM_PORT": "0",
        "TELEGRAM_BOT_TOKEN": DEFAULT_TOKEN,
        "SHUTDOWN_DEADLINE": "5",
        "TELEGRAM_SECRET_TOKEN": SECRET,
        "TELEGRAM_ALLOWED_CHAT_IDS": f"{CHAT},{OTHER}",
    }
    picks = Picks()
    table = CallbackTable()
    table.register("pick", picks.pick, answer="Noted")
    async with run_fake_bot_api() as fake:
        settings = load_settings({**env, "TELEGRAM_API_BASE_URL": fake.base_url}, dotenv=None)
        shutdown = Shutdown(deadline=5, signals=())
        listening = trio.Event()
        urls: list[str] = []

        def on_listening(binds: list[str]) -> None:
            urls.extend(binds)
            listening.set()

        def build(s: Any, d: dbmod.Database, sh: Shutdown) -> BotSystem:
            def bot() -> BotApiClient:
                return BotApiClient(DEFAULT_TOKEN, base_url=fake.base_url)

            system = BotSystem(
                s, d, sh, polling=polling, turns=AskingAgent(d), bot_factory=bot, callbacks=table
            )
            if polling:
                from actors.telegram.poller import Poller

                def short_poll(*args: Any, **kwargs: Any) -> Poller:
                    return Poller(*args, poll_timeout=1, **kwargs)

                system.poller_factory = short_poll
            return system

        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: serve(settings, db, build, on_listening=on_listening, shutdown=shutdown)
            )
            with trio.fail_after(20):
                await listening.wait()
            yield Bot(urls[0], fake, picks, polling)
            shutdown.request_stop("test")


async def wait_for(predicate: Callable[[], object], limit: float = 15.0) -> None:
    """Poll state another server changes (no event to wait on)."""
    with trio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110
            await trio.sleep(0.05)


async def ask(bot: Bot, chat_id: int = CHAT) -> int:
    """Say "ask"; the id of the bot's message with the buttons, once it is there."""
    before = len(bot.fake.sent.get(chat_id, []))
    await bot.deliver(bot.fake.push_message(chat_id, "ask"))
    await wait_for(lambda: len(bot.fake.sent.get(chat_id, [])) > before)
    message = bot.fake.sent[chat_id][-1]
    assert [b["text"] for b in bot.fake.buttons(chat_id, message.message_id)] == ["Yes", "No"]
    return message.message_id


def answered(fake: FakeBotApi, update: dict[str, Any]) -> dict[str, Any] | None:
    return fake.answered_callbacks.get(update["callback_query"]["id"])


@pytest.mark.parametrize("polling", [False, True], ids=["webhook", "polling"])
async def test_a_tap_is_answered_at_once_and_its_handler_edits_the_message(
    db: dbmod.Database, polling: bool
) -> None:
    async with running_bot(db, polling=polling) as bot:
        fake = bot.fake
        message_id = await ask(bot)
        tap = fake.tap(CHAT, message_id, "Yes")
        await bot.deliver(tap)
        await wait_for(lambda: fake.edits)
        assert bot.picks.seen == [(CHAT, message_id, "yes")]
        now = fake.message(CHAT, message_id)
        assert (now.visible_text, now.reply_markup) == ("Coffee after 3 pm? yes", None)
        assert answered(fake, tap) == {
            "callback_query_id": tap["callback_query"]["id"],
            "text": "Noted",
        }
        assert len(fake.sent[CHAT]) == 1  # an edit, not a new message
    inbox = await db.fetch("SELECT kind, status FROM inbox ORDER BY id")
    assert [(r["kind"], r["status"]) for r in inbox] == [
        ("message", "done"),
        ("callback_query", "done"),
    ]
    edit = await db.fetchrow("SELECT kind, status, edit_message_id FROM outbox WHERE kind = 'edit'")
    assert edit is not None and (edit["status"], edit["edit_message_id"]) == ("sent", message_id)


@pytest.mark.slow
async def test_a_double_tap_acts_once_and_a_sibling_on_the_edited_message_is_dead(
    db: dbmod.Database,
) -> None:
    async with running_bot(db) as bot:
        fake = bot.fake
        message_id = await ask(bot)
        no_token = fake.buttons(CHAT, message_id)[1]["callback_data"]
        first, second = fake.tap(CHAT, message_id, "Yes"), fake.tap(CHAT, message_id, "Yes")
        async with trio.open_nursery() as nursery:  # two taps at once
            nursery.start_soon(bot.deliver, first)
            nursery.start_soon(bot.deliver, second)
        await wait_for(lambda: fake.edits and answered(fake, first) and answered(fake, second))
        await wait_for(lambda: fake.calls_to("editMessageText")[-1].status is not None)
        stale = fake.push_callback(CHAT, no_token, message_id=message_id)  # an old client's tap
        await bot.deliver(stale)
        await wait_for(lambda: answered(fake, stale))
        await trio.sleep(0.3)  # the chat actor had its chance to act on it
        assert bot.picks.seen == [(CHAT, message_id, "yes")]
        assert len(fake.edits) == 1 and fake.message(CHAT, message_id).text.endswith("<b>yes</b>")
        assert answered(fake, stale)["text"] == EXPIRED  # type: ignore[index]
    statuses = await db.fetch("SELECT status FROM inbox WHERE kind = 'callback_query' ORDER BY id")
    assert sorted(r["status"] for r in statuses) == ["done", "skipped", "skipped"]


@pytest.mark.slow
async def test_an_expired_button_or_one_from_another_chat_changes_nothing(
    db: dbmod.Database,
) -> None:
    async with running_bot(db) as bot:
        fake = bot.fake
        message_id = await ask(bot)
        yes_token = fake.buttons(CHAT, message_id)[0]["callback_data"]
        theirs = await ask(bot, OTHER)  # the other chat has a message with buttons of its own
        foreign = fake.push_callback(OTHER, yes_token, message_id=theirs)  # CHAT's token
        await bot.deliver(foreign)
        await wait_for(lambda: answered(fake, foreign))
        assert answered(fake, foreign)["text"] == EXPIRED  # type: ignore[index]

        old_id = await ask(bot)
        await db.execute(
            "UPDATE callback_tokens SET created_at = now() - interval '25 hours' "
            "WHERE chat_id = $1 AND message_id IS NULL AND token = $2",
            CHAT,
            fake.buttons(CHAT, old_id)[0]["callback_data"],
        )
        expired = fake.tap(CHAT, old_id, "Yes")
        await bot.deliver(expired)
        await wait_for(lambda: answered(fake, expired))
        assert answered(fake, expired)["text"] == EXPIRED  # type: ignore[index]
        await trio.sleep(0.3)
        assert bot.picks.seen == [] and fake.edits == []

        tap = fake.tap(CHAT, message_id, "Yes")  # CHAT's own button still works in CHAT
        await bot.deliver(tap)
        await wait_for(lambda: fake.edits)
        assert bot.picks.seen == [(CHAT, message_id, "yes")]
        assert [e.message_id for e in fake.edits] == [message_id]
