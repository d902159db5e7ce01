"""Inline keyboards, message edits and the command menu: the types' limits, the client's methods
against the strict fake Bot API over real HTTP, and the fake's own limits (sent raw, past the
types, so the fake is shown to refuse what Telegram refuses)."""

from __future__ import annotations

from typing import Any

import pytest
from fakes.bot_api import FakeBotApi

from actors.telegram.client import BotApiClient
from actors.telegram.errors import BadRequest, InvalidBotCommand, InvalidKeyboard
from actors.telegram.keyboards import (
    BotCommand,
    Button,
    InlineKeyboard,
    callback_data_fits,
    commands_json,
)
from actors.telegram.types import parse_update

CHAT = 42


def yes_no() -> InlineKeyboard:
    return InlineKeyboard(
        [
            [Button("Yes", "t-yes")],
            [Button("No", "t-no"), Button("Docs", url="https://example.org")],
        ]
    )


# --- the types ---------------------------------------------------------------------------------


def test_callback_data_is_limited_in_utf8_bytes_not_characters() -> None:
    assert callback_data_fits("x" * 64) and not callback_data_fits("x" * 65)
    assert not callback_data_fits("")
    assert callback_data_fits("é" * 32) and not callback_data_fits("é" * 33)  # 66 bytes, 33 chars
    with pytest.raises(InvalidKeyboard, match="1-64 bytes"):
        Button("Go", "é" * 33)
    assert Button("Go", "é" * 32).callback_data == "é" * 32


@pytest.mark.parametrize(
    "make",
    [
        lambda: Button("", "data"),
        lambda: Button("   ", "data"),
        lambda: Button("Both", "data", url="https://example.org"),
        lambda: Button("Neither"),
        lambda: Button("Empty url", url=" "),
        lambda: InlineKeyboard([]),
        lambda: InlineKeyboard([[Button("a", "a")], []]),
        lambda: InlineKeyboard([[Button("b", str(i)) for i in range(10)] for _ in range(11)]),
    ],
)
def test_keyboards_telegram_would_refuse_are_refused_when_built(make: Any) -> None:
    with pytest.raises(InvalidKeyboard):
        make()


def test_a_keyboard_round_trips_through_its_json() -> None:
    kb = yes_no()
    assert kb.to_json() == {
        "inline_keyboard": [
            [{"text": "Yes", "callback_data": "t-yes"}],
            [
                {"text": "No", "callback_data": "t-no"},
                {"text": "Docs", "url": "https://example.org"},
            ],
        ]
    }
    assert InlineKeyboard.from_json(kb.to_json()) == kb
    assert [b.text for b in kb.buttons] == ["Yes", "No", "Docs"]
    full = InlineKeyboard([[Button("b", str(i)) for i in range(10)] for _ in range(10)])
    assert len(full.buttons) == 100
    bad: object
    for bad in ({"keyboard": []}, {"inline_keyboard": [{"text": "x"}]}, [], None):
        with pytest.raises(InvalidKeyboard):
            InlineKeyboard.from_json(bad)


def test_bot_commands_are_validated() -> None:
    assert BotCommand("/memory", "What I remember").command == "memory"
    for name in ("Memory", "", "a" * 33, "mem-ory", "mémoire"):
        with pytest.raises(InvalidBotCommand):
            BotCommand(name, "x")
    for description in ("", " ", "d" * 257):
        with pytest.raises(InvalidBotCommand):
            BotCommand("ok", description)
    assert BotCommand("a" * 32, "d" * 256).command == "a" * 32
    with pytest.raises(InvalidBotCommand, match="at most 100"):
        commands_json([BotCommand(f"c{i}", "x") for i in range(101)])
    with pytest.raises(InvalidBotCommand, match="twice"):
        commands_json([BotCommand("a", "x"), BotCommand("a", "y")])


# --- the client against the fake ---------------------------------------------------------------


async def test_a_keyboard_is_sent_and_a_tap_comes_back(bot: BotApiClient, fake: FakeBotApi) -> None:
    message_id = await bot.send_message(CHAT, "Sure?", reply_markup=yes_no())
    assert fake.sent[CHAT][-1].reply_markup == yes_no().to_json()
    assert [b["text"] for b in fake.buttons(CHAT, message_id)] == ["Yes", "No", "Docs"]
    pushed = fake.tap(CHAT, message_id, "No")
    batch = await bot.get_updates()
    assert batch.payloads[0] == pushed
    query = batch.updates[0].callback_query
    assert query is not None and (query.data, query.message_id) == ("t-no", message_id)
    assert batch.updates[0].chat_id == CHAT
    with pytest.raises(AssertionError, match="no 'Maybe' button"):
        fake.tap(CHAT, message_id, "Maybe")
    with pytest.raises(AssertionError):  # a url button sends no callback query
        fake.tap(CHAT, message_id, "Docs")


async def test_edits_change_the_text_and_the_keyboard(bot: BotApiClient, fake: FakeBotApi) -> None:
    message_id = await bot.send_message(CHAT, "Forget these?", reply_markup=yes_no())
    keep = InlineKeyboard([[Button("Undo", "t-undo")]])
    await bot.edit_message_text(CHAT, message_id, "<b>Forgotten</b>", "HTML", reply_markup=keep)
    now = fake.message(CHAT, message_id)
    assert (now.visible_text, now.reply_markup) == ("Forgotten", keep.to_json())
    await bot.edit_message_reply_markup(CHAT, message_id, None)  # remove the keyboard
    assert fake.message(CHAT, message_id).reply_markup is None
    await bot.edit_message_reply_markup(CHAT, message_id, yes_no())
    await bot.edit_message_text(CHAT, message_id, "Done.")  # no reply_markup: buttons go
    now = fake.message(CHAT, message_id)
    assert (now.text, now.reply_markup) == ("Done.", None)
    assert fake.sent_texts(CHAT) == ["Forget these?"]  # the send record is not rewritten
    assert [e.text for e in fake.edits] == ["<b>Forgotten</b>", None, None, "Done."]
    with pytest.raises(BadRequest, match="message is not modified") as caught:
        await bot.edit_message_text(CHAT, message_id, "Done.")
    assert caught.value.is_not_modified
    with pytest.raises(BadRequest, match="message is not modified"):
        await bot.edit_message_reply_markup(CHAT, message_id, None)


async def test_only_the_bots_own_message_in_that_chat_can_be_edited(
    bot: BotApiClient, fake: FakeBotApi
) -> None:
    message_id = await bot.send_message(CHAT, "mine")
    with pytest.raises(BadRequest, match="message to edit not found"):
        await bot.edit_message_text(CHAT + 1, message_id, "not there")
    with pytest.raises(BadRequest, match="message to edit not found"):
        await bot.edit_message_reply_markup(CHAT, message_id + 50, yes_no())
    theirs = fake.push_message(CHAT, "a person's words")["message"]["message_id"]
    with pytest.raises(BadRequest, match="message can't be edited"):
        await bot.edit_message_text(CHAT, theirs, "rewritten")
    with pytest.raises(BadRequest, match="can't parse entities"):
        await bot.edit_message_text(CHAT, message_id, "<b>unclosed", "HTML")
    assert fake.edits == [] and fake.message(CHAT, message_id).text == "mine"


async def test_the_command_menu_round_trips(bot: BotApiClient, fake: FakeBotApi) -> None:
    assert await bot.get_my_commands() == ()
    menu = [
        BotCommand("memory", "What I remember about you"),
        BotCommand("forget", "Forget a topic"),
    ]
    await bot.set_my_commands(menu)
    assert fake.menu() == [("memory", "What I remember about you"), ("forget", "Forget a topic")]
    assert await bot.get_my_commands() == tuple(menu)
    assert await bot.get_my_commands(language_code="de") == ()


# --- the fake's limits, past the types ---------------------------------------------------------


def button(**fields: Any) -> dict[str, Any]:
    return {"inline_keyboard": [[fields]]}


@pytest.mark.parametrize(
    ("markup", "error"),
    [
        (button(text="x", callback_data="d" * 65), "BUTTON_DATA_INVALID"),
        (button(text="x", callback_data="é" * 33), "BUTTON_DATA_INVALID"),
        (button(text="x", callback_data=""), "BUTTON_DATA_INVALID"),
        (button(text="x", callback_data=5), "BUTTON_DATA_INVALID"),
        (button(text="", callback_data="d"), "BUTTON_TEXT_INVALID"),
        (button(callback_data="d"), "Text must be a String"),
        (button(text="x"), "exactly one"),
        (button(text="x", callback_data="d", url="https://e.org"), "exactly one"),
        (button(text="x", callback_data="d", colour="red"), "unknown field"),
        ({"inline_keyboard": [{"text": "x", "callback_data": "d"}]}, "Array of Arrays"),
        ({"inline_keyboard": "x"}, "Array of Arrays"),
        ({"inline_keyboard": [], "keyboard": []}, "can't parse reply keyboard markup"),
        (
            {"inline_keyboard": [[{"text": "b", "callback_data": "d"}] * 101]},
            "REPLY_MARKUP_TOO_LONG",
        ),
    ],
)
async def test_the_fake_refuses_keyboards_telegram_refuses(
    bot: BotApiClient, fake: FakeBotApi, markup: Any, error: str
) -> None:
    with pytest.raises(BadRequest, match=error):
        await bot.call("sendMessage", {"chat_id": CHAT, "text": "hi", "reply_markup": markup})
    message_id = await bot.send_message(CHAT, "hi")
    with pytest.raises(BadRequest, match=error):
        await bot.call(
            "editMessageReplyMarkup",
            {"chat_id": CHAT, "message_id": message_id, "reply_markup": markup},
        )
    assert len(fake.sent[CHAT]) == 1 and fake.edits == []
    edge = {"inline_keyboard": [[{"text": "b", "callback_data": "é" * 32}] * 100]}
    await bot.call("sendMessage", {"chat_id": CHAT, "text": "ok", "reply_markup": edge})


@pytest.mark.parametrize(
    ("commands", "error"),
    [
        ([{"command": "Memory", "description": "x"}], "BOT_COMMAND_INVALID"),
        ([{"command": "/memory", "description": "x"}], "BOT_COMMAND_INVALID"),
        ([{"command": "m" * 33, "description": "x"}], "BOT_COMMAND_INVALID"),
        ([{"command": "", "description": "x"}], "BOT_COMMAND_INVALID"),
        ([{"command": "memory", "description": ""}], "BOT_COMMAND_DESCRIPTION_INVALID"),
        ([{"command": "memory", "description": "d" * 257}], "BOT_COMMAND_DESCRIPTION_INVALID"),
        ([{"command": "memory"}], "can't parse BotCommand"),
        ([{"command": f"c{i}", "description": "x"} for i in range(101)], "BOT_COMMANDS_TOO_MUCH"),
    ],
)
async def test_the_fake_refuses_commands_telegram_refuses(
    bot: BotApiClient, fake: FakeBotApi, commands: Any, error: str
) -> None:
    with pytest.raises(BadRequest, match=error):
        await bot.call("setMyCommands", {"commands": commands})
    assert fake.menu() == []


async def test_an_unknown_or_answered_callback_query_is_too_old(
    bot: BotApiClient, fake: FakeBotApi
) -> None:
    with pytest.raises(BadRequest, match="query is too old"):
        await bot.answer_callback_query("never-sent")
    message_id = await bot.send_message(CHAT, "Sure?", reply_markup=yes_no())
    query = parse_update(fake.tap(CHAT, message_id, "Yes")).callback_query
    assert query is not None
    await bot.answer_callback_query(query.id, "Done")
    with pytest.raises(BadRequest, match="query is too old"):
        await bot.answer_callback_query(query.id)
    assert fake.answered_callbacks[query.id]["text"] == "Done"
