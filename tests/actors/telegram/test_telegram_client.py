"""BotApiClient against the strict fake Bot API over real HTTP; error classification; updates."""

from __future__ import annotations

import errno
import json
import logging
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import trio
from fakes.bot_api import DEFAULT_TOKEN, Failure, FakeBotApi, run_fake_bot_api
from hypothesis import given
from hypothesis import strategies as st

from actors.telegram.chunking import html_to_text, split_html
from actors.telegram.client import BotApiClient
from actors.telegram.errors import (
    BadRequest,
    Conflict,
    FileTooLarge,
    Forbidden,
    MalformedUpdate,
    MaybeDeliveredError,
    NotFound,
    PreConnectError,
    RateLimited,
    ServerError,
    TelegramError,
    Unauthorized,
    classify_exception,
    is_transient,
)
from actors.telegram.types import dedupe_key, dedupe_keys, parse_update

TOKEN = DEFAULT_TOKEN
SECRET = TOKEN.split(":")[1]


@pytest.fixture
async def fake() -> AsyncIterator[FakeBotApi]:
    """The fake Bot API with this file's secret token (``bot`` from conftest uses it)."""
    async with run_fake_bot_api(token=TOKEN) as server:
        yield server


def assert_no_token(exc: BaseException) -> None:
    for text in (str(exc), repr(exc), repr(exc.args), str(getattr(exc, "detail", ""))):
        assert SECRET not in text
    assert exc.__cause__ is None and exc.__context__ is None


# --- methods -----------------------------------------------------------------------------------


async def test_get_me_ignores_unknown_fields(bot: BotApiClient, fake: FakeBotApi) -> None:
    me = await bot.get_me()
    assert me.id == fake.bot_id and me.is_bot and me.username == "engram_test_bot"
    assert SECRET not in repr(bot)


async def test_send_message_ids_increase_and_are_recorded(
    bot: BotApiClient, fake: FakeBotApi
) -> None:
    first = await bot.send_message(42, "<b>hello</b> &amp; welcome", parse_mode="HTML")
    second = await bot.send_message(42, "plain", reply_to_message_id=999, disable_link_preview=True)
    assert second > first
    assert fake.sent_texts(42) == ["<b>hello</b> &amp; welcome", "plain"]
    assert fake.sent[42][0].visible_text == "hello & welcome"
    assert fake.sent[42][1].reply_to_message_id == 999  # deleted target tolerated
    call = fake.calls_to("sendMessage")[1]
    assert call.params["reply_parameters"]["allow_sending_without_reply"] is True


async def test_malformed_html_is_a_parse_error_and_plain_fallback_works(
    bot: BotApiClient, fake: FakeBotApi
) -> None:
    text = "<b>bold <i>crossed</b></i>"
    with pytest.raises(BadRequest) as info:
        await bot.send_message(7, text, parse_mode="HTML")
    assert info.value.is_parse_error and info.value.status == 400
    await bot.send_message(7, html_to_text(text))
    assert fake.sent_texts(7) == ["bold crossed"]


async def test_long_html_chunks_are_all_accepted(bot: BotApiClient, fake: FakeBotApi) -> None:
    paragraph = "<b>Title</b>\n" + "word &amp; <i>emoji 😀 text</i> " * 40
    text = "\n\n".join([paragraph] * 30)
    with pytest.raises(BadRequest, match="too long"):
        await bot.send_message(5, text, parse_mode="HTML")
    chunks = split_html(text)
    assert len(chunks) > 1
    for chunk in chunks:
        await bot.send_message(5, chunk, parse_mode="HTML")
    assert len(fake.sent[5]) == len(chunks)


async def test_chat_action_and_strict_params(bot: BotApiClient, fake: FakeBotApi) -> None:
    await bot.send_chat_action(42)
    assert fake.calls_to("sendChatAction")[0].params == {"chat_id": 42, "action": "typing"}
    with pytest.raises(BadRequest, match="action"):
        await bot.send_chat_action(42, "dancing")
    with pytest.raises(BadRequest, match="unknown parameter"):
        await bot.call("sendMessage", {"chat_id": 1, "text": "x", "reply_to": 3})
    with pytest.raises(BadRequest, match="must be"):
        await bot.call("sendMessage", {"chat_id": 1.5, "text": "x"})
    with pytest.raises(BadRequest, match="empty"):
        await bot.send_message(1, "  ")
    with pytest.raises(BadRequest, match="parse_mode"):
        await bot.send_message(1, "x", parse_mode="html")
    with pytest.raises(NotFound):
        await bot.call("sendMessagee")


async def test_callback_query_flow(bot: BotApiClient, fake: FakeBotApi) -> None:
    markup = {"inline_keyboard": [[{"text": "Yes", "callback_data": "y"}]]}
    message_id = await bot.send_message(42, "Sure?", reply_markup=markup)
    pushed = fake.push_callback(42, "y", message_id=message_id)
    batch = await bot.get_updates()
    query = batch.updates[0].callback_query
    assert query is not None and query.data == "y" and query.message_id == message_id
    assert batch.updates[0].chat_id == 42
    await bot.answer_callback_query(query.id, "ok")
    assert fake.answered_callbacks[pushed["callback_query"]["id"]]["text"] == "ok"
    with pytest.raises(BadRequest, match="query is too old"):
        await bot.answer_callback_query(query.id)


async def test_get_updates_offsets_and_kinds(bot: BotApiClient, fake: FakeBotApi) -> None:
    fake.push_message(42, "one")
    fake.push_update({"channel_post": {"message_id": 1, "chat": {"id": -5, "type": "channel"}}})
    fake.push_update({"message": {"message_id": "not an int"}})
    fake.push_update({"update_id": "broken", "message": {}})
    fake.push_update({"poll": {"id": "p"}})  # not in allowed_updates: never delivered
    batch = await bot.get_updates(allowed_updates=["message", "channel_post"])
    assert [u.kind for u in batch.updates] == ["message", "unknown"]
    assert batch.updates[1].unknown_kind == "channel_post"
    assert [m.update_id for m in batch.malformed] == [3, None]
    assert batch.next_offset == 4
    again = await bot.get_updates(offset=batch.next_offset)
    assert again.updates == () and again.next_offset is None
    assert fake.pending_updates == []


@pytest.mark.slow
async def test_long_poll_waits_for_a_push(bot: BotApiClient, fake: FakeBotApi) -> None:
    async def push_later() -> None:
        await trio.sleep(0.2)
        fake.push_message(42, "late")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(push_later)
        start = trio.current_time()
        batch = await bot.get_updates(timeout=5)
    assert 0.1 < trio.current_time() - start < 4
    message = batch.updates[0].message
    assert message is not None and message.text == "late"
    start = trio.current_time()
    assert (await bot.get_updates(offset=batch.next_offset, timeout=1)).updates == ()
    assert trio.current_time() - start >= 0.9


async def test_second_get_updates_terminates_the_first(bot: BotApiClient, fake: FakeBotApi) -> None:
    errors: list[BaseException] = []

    async def first() -> None:
        try:
            await bot.get_updates(timeout=5)
        except Conflict as exc:
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(first)
        await trio.sleep(0.2)
        await bot.get_updates(timeout=0)
    assert len(errors) == 1 and "terminated by other getUpdates" in str(errors[0])


async def test_files_and_size_refusal(bot: BotApiClient, fake: FakeBotApi) -> None:
    update = fake.push_voice(42, b"OggS" + b"x" * 2000)
    voice = parse_update(update).message.voice  # type: ignore[union-attr]
    assert voice is not None and voice.duration == 2
    info = await bot.get_file(voice.file_id)
    assert info.file_size == 2004 and info.file_path is not None
    assert await bot.download_file(info.file_path, max_bytes=10_000) == b"OggS" + b"x" * 2000
    with pytest.raises(FileTooLarge) as too_big:
        await bot.download_file(info.file_path, max_bytes=1000)
    assert too_big.value.size == 2004
    chunked = fake.add_file(b"y" * 300_000, send_length=False)
    with pytest.raises(FileTooLarge) as streamed:
        await bot.download_file(chunked.file_path, max_bytes=100_000)
    assert streamed.value.size is None
    assert await bot.download_file(chunked.file_path, max_bytes=300_000) == b"y" * 300_000
    with pytest.raises(NotFound) as missing:
        await bot.download_file("voice/none.oga", max_bytes=10)
    assert_no_token(missing.value)
    with pytest.raises(ValueError, match="suspicious"):
        await bot.download_file("../etc/passwd", max_bytes=10)
    huge = fake.add_file(b"z", declared_size=30 * 1024 * 1024)
    with pytest.raises(BadRequest, match="too big"):
        await bot.get_file(huge.file_id)
    with pytest.raises(BadRequest, match="invalid file_id"):
        await bot.get_file("nope")


async def test_webhook_lifecycle(bot: BotApiClient, fake: FakeBotApi) -> None:
    assert (await bot.get_webhook_info()).url == ""
    fake.push_message(1, "pending")
    await bot.set_webhook(
        "https://bot.example.org/api/telegram",
        "s3cret_-X",
        ["message", "callback_query"],
        drop_pending_updates=True,
    )
    info = await bot.get_webhook_info()
    assert info.url.endswith("/api/telegram") and info.pending_update_count == 0
    assert info.allowed_updates == ("message", "callback_query")
    assert fake.webhook["secret_token"] == "s3cret_-X"
    with pytest.raises(Conflict, match="webhook is active"):
        await bot.get_updates()
    for url, secret, kinds in [
        ("http://bot.example.org/hook", "ok", None),
        ("https://bot.example.org:8080/hook", "ok", None),
        ("https://bot.example.org/hook", "bad secret!", None),
        ("https://bot.example.org/hook", "ok", ["messages"]),
    ]:
        with pytest.raises(BadRequest):
            await bot.set_webhook(url, secret, kinds)
    await bot.delete_webhook(drop_pending_updates=True)
    assert (await bot.get_updates()).updates == ()


# --- error mapping -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("failure", "error", "status"),
    [
        (Failure.rate_limited(3), RateLimited, 429),
        (Failure.parse_error(), BadRequest, 400),
        (Failure.blocked(), Forbidden, 403),
        (Failure.server_error(), ServerError, 500),
        (Failure.server_error(502, "Bad Gateway"), ServerError, 502),
        (Failure.conflict(), Conflict, 409),
    ],
)
async def test_api_failures_map_to_classes(
    bot: BotApiClient, fake: FakeBotApi, failure: Failure, error: type[Exception], status: int
) -> None:
    fake.fail_next("sendMessage", failure)
    with pytest.raises(error) as info:
        await bot.send_message(42, "hi")
    exc = info.value
    assert isinstance(exc, TelegramError) and getattr(exc, "status", None) == status
    assert_no_token(exc)
    if isinstance(exc, RateLimited):
        assert exc.retry_after == 3.0 and is_transient(exc)
    if isinstance(exc, BadRequest):
        assert exc.is_parse_error
    assert await bot.send_message(42, "hi") > 0  # only the next call failed
    assert fake.sent_texts(42) == ["hi"]


async def test_a_standing_failure_lasts_until_stopped(bot: BotApiClient, fake: FakeBotApi) -> None:
    fake.fail_while("sendMessage", Failure.rate_limited(2))
    for _ in range(3):
        with pytest.raises(RateLimited):
            await bot.send_message(42, "wait")
    fake.fail_next("sendMessage", Failure.server_error(502))  # a scripted one comes first
    fake.fail_while("sendMessage", Failure.server_error(503))
    statuses = []
    for _ in range(2):
        with pytest.raises(ServerError) as info:
            await bot.send_message(42, "down")
        statuses.append(info.value.status)
    assert statuses == [502, 503]
    await bot.send_chat_action(42)  # other methods are not affected
    fake.stop_failing("sendMessage")
    assert await bot.send_message(42, "back") > 0
    assert fake.sent_texts(42) == ["back"]


async def test_blocked_chat_is_forbidden(bot: BotApiClient, fake: FakeBotApi) -> None:
    fake.block_chat(9)
    with pytest.raises(Forbidden, match="blocked by the user"):
        await bot.send_message(9, "hello?")
    fake.known_chats_only = True
    with pytest.raises(BadRequest, match="chat not found"):
        await bot.send_message(10, "who?")
    fake.push_message(10, "hi")
    fake.fail_next("sendMessage", Failure.bad_request("message thread not found"), times=2)
    for _ in range(2):
        with pytest.raises(BadRequest, match="thread") as info:
            await bot.send_message(10, "x")
        assert not info.value.is_parse_error and not is_transient(info.value)
    assert await bot.send_message(10, "finally") == 2


@pytest.mark.parametrize("kind", ["reset", "close"])
async def test_dropped_connection_is_maybe_delivered(
    bot: BotApiClient, fake: FakeBotApi, kind: str
) -> None:
    fake.fail_next(
        "sendMessage", Failure.reset(deliver=True) if kind == "reset" else Failure.close()
    )
    with pytest.raises(MaybeDeliveredError) as info:
        await bot.send_message(42, "maybe")
    exc = info.value
    assert exc.may_have_been_delivered and exc.method == "sendMessage"
    assert_no_token(exc)
    assert classify_exception(exc) is MaybeDeliveredError and is_transient(exc)
    assert fake.sent_texts(42) == (["maybe"] if kind == "reset" else [])
    assert fake.calls_to("sendMessage")[0].status == 0
    await bot.send_message(42, "after")  # the pool recovers


async def test_refused_port_is_pre_connect() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with BotApiClient(TOKEN, base_url=f"http://127.0.0.1:{port}") as bot:
        with pytest.raises(PreConnectError) as info:
            await bot.send_message(1, "x")
    assert not info.value.may_have_been_delivered
    assert_no_token(info.value)


async def test_wrong_token_and_token_hygiene(
    fake: FakeBotApi, caplog: pytest.LogCaptureFixture
) -> None:
    other = "987654:" + "Q" * 35
    async with BotApiClient(other, base_url=fake.base_url) as bad:
        with pytest.raises(Unauthorized) as info:
            await bad.get_me()
    assert "Q" * 35 not in str(info.value)
    with pytest.raises(ValueError) as invalid:
        BotApiClient("not-a-token-" + SECRET)
    assert SECRET not in str(invalid.value)
    caplog.set_level(logging.DEBUG)
    async with BotApiClient(TOKEN, base_url=fake.base_url) as bot:
        await bot.get_me()
        fake.fail_next("getMe", Failure.reset())
        with pytest.raises(MaybeDeliveredError):
            await bot.get_me()
    assert "getMe" in caplog.text and SECRET not in caplog.text


# --- classification of constructed exceptions -------------------------------------------------


def _chain(outer: BaseException, cause: BaseException) -> BaseException:
    outer.__cause__ = cause
    return outer


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (httpx.ConnectError("refused"), PreConnectError),
        (httpx.ConnectTimeout("slow"), PreConnectError),
        (httpx.PoolTimeout("pool"), PreConnectError),
        (socket.gaierror(socket.EAI_NONAME, "no such host"), PreConnectError),
        (ConnectionRefusedError(errno.ECONNREFUSED, "refused"), PreConnectError),
        (OSError(errno.ENETUNREACH, "unreachable"), PreConnectError),
        (httpx.ReadTimeout("read"), MaybeDeliveredError),
        (httpx.WriteTimeout("write"), MaybeDeliveredError),
        (httpx.ReadError("read"), MaybeDeliveredError),
        (httpx.RemoteProtocolError("Server disconnected"), MaybeDeliveredError),
        (ConnectionResetError(errno.ECONNRESET, "reset"), MaybeDeliveredError),
        (BrokenPipeError(errno.EPIPE, "pipe"), MaybeDeliveredError),
        (trio.BrokenResourceError(), MaybeDeliveredError),
        (ValueError("nope"), None),
        (OSError("no errno"), None),
        # wrapped: cause, context, groups, trio's happy-eyeballs OSError
        (_chain(RuntimeError("send failed"), httpx.ReadTimeout("t")), MaybeDeliveredError),
        (_chain(httpx.ConnectError("c"), ConnectionResetError()), PreConnectError),
        (
            _chain(
                OSError("all attempts to connect failed"),
                ExceptionGroup("all", [ConnectionRefusedError(), OSError(errno.EHOSTUNREACH, "h")]),
            ),
            PreConnectError,
        ),
        (ExceptionGroup("g", [ValueError(), httpx.ConnectError("c")]), PreConnectError),
        (ExceptionGroup("g", [httpx.ConnectError("c"), httpx.ReadError("r")]), MaybeDeliveredError),
        (
            BaseExceptionGroup(
                "g", [KeyboardInterrupt(), ExceptionGroup("h", [ConnectionResetError()])]
            ),
            MaybeDeliveredError,
        ),
        (ExceptionGroup("g", [PreConnectError("sendMessage", "x")]), PreConnectError),
    ],
)
def test_classify_exception(exc: BaseException, expected: type | None) -> None:
    assert classify_exception(exc) is expected


def test_classify_context_cycles_and_suppression() -> None:
    try:
        try:
            raise httpx.ReadError("boom")
        except httpx.ReadError:
            raise KeyError("handling") from None
    except KeyError as suppressed:
        assert classify_exception(suppressed) is None
    try:
        try:
            raise ConnectionResetError()
        except ConnectionResetError:
            raise RuntimeError("while handling")  # noqa: B904
    except RuntimeError as implicit:
        assert classify_exception(implicit) is MaybeDeliveredError
    a, b = ValueError("a"), ValueError("b")
    a.__context__, b.__context__ = b, a
    assert classify_exception(a) is None
    deep: BaseException = httpx.ConnectTimeout("deep")
    for i in range(300):
        deep = _chain(RuntimeError(str(i)), deep)
    assert classify_exception(deep) is PreConnectError


def test_is_transient() -> None:
    assert is_transient(ServerError("m", 502, 502, "Bad Gateway"))
    assert not is_transient(Forbidden("m", 403, 403, "Forbidden: bot was blocked by the user"))
    assert not is_transient(BadRequest("m", 400, 400, "Bad Request: chat not found"))


# --- update parsing ----------------------------------------------------------------------------

MESSAGE: dict[str, Any] = {
    "update_id": 10,
    "message": {
        "message_id": 5,
        "date": 1700000000,
        "chat": {"id": 42, "type": "private", "x": 1},
        "from": {"id": 42, "is_bot": False},
        "text": "hi",
        "media_group_id": "g1",
        "photo": [{"file_id": "p", "file_unique_id": "up", "width": 90, "height": 60}],
        "new_field": {"a": [1]},
    },
}


def test_parse_message_update_and_keys() -> None:
    update = parse_update(MESSAGE)
    assert update.kind == "message" and update.chat_id == 42
    assert update.message is not None and update.message.has_photo
    assert update.message.media_group_id == "g1" and update.message.from_user_id == 42
    assert dedupe_key(update) == "update:10"
    assert dedupe_keys(update) == ("update:10", "message:42:5")
    edited = parse_update(
        {"update_id": 11, "edited_message": {**MESSAGE["message"], "edit_date": 9}}
    )
    assert dedupe_keys(edited) == ("update:11", "edit:42:5:9")
    callback = parse_update(
        {"update_id": 12, "callback_query": {"id": "c1", "from": {"id": 3}, "data": "d"}}
    )
    assert callback.chat_id is None and dedupe_keys(callback) == ("update:12", "callback:c1")
    poll = parse_update({"update_id": 13, "poll": {"id": "p"}})
    assert poll.kind == "unknown" and poll.unknown_kind == "poll" and poll.chat_id is None


@pytest.mark.parametrize(
    "value",
    [
        None,
        [],
        "x",
        1,
        {"update_id": True},
        {"update_id": 1.0},
        {"update_id": "1"},
        {"update_id": 1, "message": {"message_id": 1, "date": 1, "chat": {"id": "4", "type": "p"}}},
        {"update_id": 1, "message": MESSAGE["message"], "callback_query": {"id": "c"}},
        {"update_id": 1, "callback_query": {"id": 5, "from": {"id": 1}}},
        {"update_id": 1, "message": {**MESSAGE["message"], "voice": {"file_id": "f"}}},
    ],
)
def test_parse_update_rejects(value: object) -> None:
    with pytest.raises(MalformedUpdate):
        parse_update(value)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)
KEYS = st.sampled_from(
    [
        "update_id",
        "message",
        "edited_message",
        "callback_query",
        "chat",
        "id",
        "type",
        "from",
        "date",
        "message_id",
        "text",
        "voice",
        "file_id",
        "file_unique_id",
        "duration",
        "photo",
        "data",
        "caption",
        "media_group_id",
        "edit_date",
        "poll",
    ]
)
NEAR = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: st.dictionaries(KEYS, inner, max_size=6) | st.lists(inner, max_size=2),
    max_leaves=30,
)


@given(st.one_of(JSON, NEAR, st.builds(lambda body: {**MESSAGE, "message": body}, NEAR)))
def test_parse_update_fuzz_raises_only_malformed(value: object) -> None:
    try:
        update = parse_update(value)
    except MalformedUpdate as exc:
        assert "malformed update" in str(exc)
    else:
        assert isinstance(update.update_id, int) and not isinstance(update.update_id, bool)
        assert dedupe_keys(update)[0] == f"update:{update.update_id}"
        json.dumps(str(update))


async def test_lone_surrogate_and_unicode_reach_the_server(
    bot: BotApiClient, fake: FakeBotApi
) -> None:
    await bot.send_message(3, "naïve 😀 你好 \ud800 end")
    assert fake.sent_texts(3) == ["naïve 😀 你好 \ud800 end"]


async def test_the_client_records_its_last_answered_and_failed_call(
    bot: BotApiClient, fake: FakeBotApi
) -> None:
    assert (bot.last_ok, bot.last_failure) == (None, None)
    await bot.get_me()
    answered = bot.last_ok
    assert answered is not None and bot.last_failure is None
    fake.fail_next("getMe", Failure.server_error(502, "Bad Gateway"))
    with pytest.raises(TelegramError):
        await bot.get_me()
    assert bot.last_failure is not None and bot.last_ok == answered  # Telegram failing
    failed = bot.last_failure
    fake.fail_next("sendMessage", Failure.blocked())
    with pytest.raises(TelegramError):
        await bot.send_message(5, "hi")
    # a refusal about one chat is an answer: Telegram is up
    assert bot.last_failure == failed and bot.last_ok is not None and bot.last_ok >= failed
