"""Voice transcription through the real clients: our Bot API client against the strict fake Bot
API, the openai SDK (under trio) against the strict fake OpenAI API, and the real database."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
import trio
from fakes.bot_api import Failure as BotFailure
from fakes.bot_api import FakeBotApi
from fakes.openai_api import (
    DEFAULT_API_KEY,
    MAX_UPLOAD_BYTES,
    TRANSCRIPTIONS,
    Failure,
    FakeOpenAI,
)

from actors.telegram.client import BotApiClient
from actors.telegram.errors import TranscriptionFailed, VoiceTooLarge
from actors.telegram.types import Voice
from actors.telegram.voice import (
    BUSY,
    DOWNLOAD_FAILED,
    NO_SPEECH,
    TIMED_OUT,
    UNAVAILABLE,
    NoSpeech,
    transcribe_voice,
)
from memory.llm.cost import Rate
from runtime.db import Database

OGG = b"OggS\x00\x02" + bytes(range(256)) * 8
CHAT = 4242
MB = 1024 * 1024


@pytest.fixture
async def oai(fake_openai: FakeOpenAI) -> AsyncIterator[openai.AsyncOpenAI]:
    client = openai.AsyncOpenAI(api_key=DEFAULT_API_KEY, base_url=fake_openai.base_url)
    try:
        yield client
    finally:
        await client.close()


def stored_voice(
    fake: FakeBotApi,
    data: bytes = OGG,
    *,
    duration: int = 7,
    file_size: int | None = -1,
    **file_options: Any,
) -> Voice:
    stored = fake.add_file(data, file_path="voice/file_7.oga", **file_options)
    size = len(data) if file_size == -1 else file_size
    return Voice(stored.file_id, stored.file_unique_id, duration, "audio/ogg", size)


async def usage_rows(db: Database) -> list[dict[str, Any]]:
    return [dict(r) for r in await db.fetch("SELECT * FROM api_usage ORDER BY id")]


async def transcribe(
    bot: BotApiClient, oai: openai.AsyncOpenAI, db: Database, voice: Voice, **options: Any
) -> Any:
    options.setdefault("retry_delay", 0.01)
    return await transcribe_voice(bot=bot, openai=oai, db=db, chat_id=CHAT, voice=voice, **options)


# --- success -----------------------------------------------------------------------------------


async def test_happy_path(
    bot: BotApiClient,
    fake: FakeBotApi,
    oai: openai.AsyncOpenAI,
    fake_openai: FakeOpenAI,
    db: Database,
) -> None:
    fake_openai.queue_transcript("  I walked 5 km today.  ", duration=7.3)
    result = await transcribe(bot, oai, db, stored_voice(fake))
    assert result.text == "I walked 5 km today."
    assert result.duration_seconds == 7.3
    assert result.cost_usd == pytest.approx(7.3 / 60 * 0.006)

    assert len(fake.calls_to("getFile")) == 1 and fake.downloads == ["voice/file_7.oga"]
    [call] = fake_openai.calls_to(TRANSCRIPTIONS)
    assert call.status == 200 and call.model == "whisper-1"
    assert call.filename == "voice.oga" and call.content_type == "audio/ogg"
    assert call.data == OGG and call.params == {"response_format": "verbose_json"}

    [row] = await usage_rows(db)
    assert row["purpose"] == "transcription" and row["provider"] == "openai"
    assert row["model"] == "whisper-1" and row["chat_id"] == CHAT and row["ok"] is True
    assert row["duration_seconds"] == 7.3
    assert row["cost_usd"] == pytest.approx(7.3 / 60 * 0.006)
    assert row["latency_ms"] is not None and row["latency_ms"] >= 0 and row["error"] is None


async def test_language_is_passed(
    bot: BotApiClient,
    fake: FakeBotApi,
    oai: openai.AsyncOpenAI,
    fake_openai: FakeOpenAI,
    db: Database,
) -> None:
    fake_openai.queue_transcript("hola", duration=1.0)
    result = await transcribe(bot, oai, db, stored_voice(fake), language="es")
    assert result.text == "hola"
    assert fake_openai.calls_to(TRANSCRIPTIONS)[0].params["language"] == "es"


async def test_token_billed_model_uses_json_and_tokens(
    bot: BotApiClient,
    fake: FakeBotApi,
    oai: openai.AsyncOpenAI,
    fake_openai: FakeOpenAI,
    db: Database,
) -> None:
    fake_openai.queue_transcript("two words", duration=3.0)
    rates = {"gpt-4o-mini-transcribe": Rate(1.25, 5.0)}
    result = await transcribe(
        bot,
        oai,
        db,
        stored_voice(fake, duration=3),
        model="gpt-4o-mini-transcribe",
        rates=rates,
    )
    assert result.text == "two words" and result.duration_seconds == 3.0
    assert fake_openai.calls_to(TRANSCRIPTIONS)[0].params == {"response_format": "json"}
    [row] = await usage_rows(db)
    assert (row["input_tokens"], row["output_tokens"]) == (30, 3)
    assert row["cost_usd"] == pytest.approx((30 * 1.25 + 3 * 5.0) / 1e6)


async def test_silence_is_no_speech_but_billed(
    bot: BotApiClient,
    fake: FakeBotApi,
    oai: openai.AsyncOpenAI,
    fake_openai: FakeOpenAI,
    db: Database,
) -> None:
    fake_openai.queue_transcript("  ", duration=4.0)
    with pytest.raises(NoSpeech) as info:
        await transcribe(bot, oai, db, stored_voice(fake))
    assert str(info.value) == NO_SPEECH and not info.value.retryable
    [row] = await usage_rows(db)
    assert row["ok"] is True and row["cost_usd"] == pytest.approx(4.0 / 60 * 0.006)


# --- size limits -------------------------------------------------------------------------------


async def test_too_large_by_declared_size_is_refused_before_any_call(
    bot: BotApiClient,
    fake: FakeBotApi,
    oai: openai.AsyncOpenAI,
    fake_openai: FakeOpenAI,
    db: Database,
) -> None:
    voice = stored_voice(fake, file_size=21 * MB)
    with pytest.raises(VoiceTooLarge) as info:
        await transcribe(bot, oai, db, voice)
    assert str(info.value) == "That voice message is too large for me to transcribe (over 20 MB)."
    assert info.value.size == 21 * MB and info.value.limit == 20 * MB
    assert fake.calls == [] and fake.downloads == []
    assert fake_openai.calls == [] and await usage_rows(db) == []


async def test_too_large_by_getfile_size_is_refused_without_download(
    bot: BotApiClient,
    fake: FakeBotApi,
    oai: openai.AsyncOpenAI,
    fake_openai: FakeOpenAI,
    db: Database,
) -> None:
    voice = stored_voice(fake, OGG * 2, file_size=None)
    with pytest.raises(VoiceTooLarge, match="over 1 KB"):
        await transcribe(bot, oai, db, voice, max_bytes=1024)
    assert len(fake.calls_to("getFile")) == 1
    assert fake.downloads == [] and fake_openai.calls == []


async def test_telegram_refusing_a_huge_file_is_too_large(
    bot: BotApiClient,
    fake: FakeBotApi,
    oai: openai.AsyncOpenAI,
    fake_openai: FakeOpenAI,
    db: Database,
) -> None:
    voice = stored_voice(fake, file_size=None, declared_size=30 * MB)
    with pytest.raises(VoiceTooLarge, match="over 20 MB"):
        await transcribe(bot, oai, db, voice)
    assert fake.downloads == [] and fake_openai.calls == []


async def test_lying_size_is_caught_by_the_capped_download(
    bot: BotApiClient,
    fake: FakeBotApi,
    oai: openai.AsyncOpenAI,
    fake_openai: FakeOpenAI,
    db: Database,
) -> None:
    voice = stored_voice(fake, OGG * 4, file_size=None, declared_size=500, send_length=False)
    with pytest.raises(VoiceTooLarge):
        await transcribe(bot, oai, db, voice, max_bytes=4096)
    assert fake.downloads == ["voice/file_7.oga"] and fake_openai.calls == []


async def test_telegram_failure_is_a_download_failure(
    bot: BotApiClient,
    fake: FakeBotApi,
    oai: openai.AsyncOpenAI,
    fake_openai: FakeOpenAI,
    db: Database,
) -> None:
    fake.fail_next("getFile", BotFailure.server_error(502, "Bad Gateway"))
    with pytest.raises(TranscriptionFailed) as info:
        await transcribe(bot, oai, db, stored_voice(fake))
    assert str(info.value) == DOWNLOAD_FAILED and info.value.retryable
    assert fake_openai.calls == []


# --- retries and failures ----------------------------------------------------------------------


async def test_server_error_then_success_is_retried(
    bot: BotApiClient,
    fake: FakeBotApi,
    oai: openai.AsyncOpenAI,
    fake_openai: FakeOpenAI,
    db: Database,
) -> None:
    fake_openai.fail_next(TRANSCRIPTIONS, Failure.server_error(500))
    fake_openai.queue_transcript("second time lucky", duration=5.0)
    result = await transcribe(bot, oai, db, stored_voice(fake))
    assert result.text == "second time lucky"
    assert [c.status for c in fake_openai.calls_to(TRANSCRIPTIONS)] == [500, 200]
    assert len(fake.calls_to("getFile")) == 1  # downloaded once
    failed, ok = await usage_rows(db)
    assert failed["ok"] is False and failed["cost_usd"] == 0.0
    assert "HTTP 500" in failed["error"] and "req_" in failed["error"]
    assert ok["ok"] is True and ok["cost_usd"] == pytest.approx(5.0 / 60 * 0.006)


@pytest.mark.slow
async def test_rate_limit_retry_after_is_honoured(
    bot: BotApiClient,
    fake: FakeBotApi,
    oai: openai.AsyncOpenAI,
    fake_openai: FakeOpenAI,
    db: Database,
) -> None:
    fake_openai.fail_next(TRANSCRIPTIONS, Failure.rate_limited(retry_after=1))
    start = trio.current_time()
    result = await transcribe(bot, oai, db, stored_voice(fake), retry_delay=5.0)
    assert result.text == "hello from the fake"
    first, second = fake_openai.calls_to(TRANSCRIPTIONS)
    assert (first.status, second.status) == (429, 200)
    assert 1.0 <= second.time - first.time < 4.0
    assert trio.current_time() - start >= 1.0


async def test_rate_limit_with_a_long_retry_after_is_not_waited_for(
    bot: BotApiClient,
    fake: FakeBotApi,
    oai: openai.AsyncOpenAI,
    fake_openai: FakeOpenAI,
    db: Database,
) -> None:
    fake_openai.fail_next(TRANSCRIPTIONS, Failure.rate_limited(retry_after=60))
    with pytest.raises(TranscriptionFailed) as info:
        await transcribe(bot, oai, db, stored_voice(fake), max_retry_wait=5.0)
    assert str(info.value) == BUSY and info.value.status == 429 and info.value.retryable
    assert len(fake_openai.calls_to(TRANSCRIPTIONS)) == 1


async def test_quota_exhausted_is_not_retried(
    bot: BotApiClient,
    fake: FakeBotApi,
    oai: openai.AsyncOpenAI,
    fake_openai: FakeOpenAI,
    db: Database,
) -> None:
    fake_openai.fail_next(TRANSCRIPTIONS, Failure.insufficient_quota())
    with pytest.raises(TranscriptionFailed) as info:
        await transcribe(bot, oai, db, stored_voice(fake))
    assert str(info.value) == UNAVAILABLE and not info.value.retryable
    assert len(fake_openai.calls_to(TRANSCRIPTIONS)) == 1


async def test_persistent_failure_raises_after_one_retry(
    bot: BotApiClient,
    fake: FakeBotApi,
    oai: openai.AsyncOpenAI,
    fake_openai: FakeOpenAI,
    db: Database,
) -> None:
    fake_openai.fail_next(TRANSCRIPTIONS, Failure.overloaded(), times=3)
    with pytest.raises(TranscriptionFailed) as info:
        await transcribe(bot, oai, db, stored_voice(fake))
    assert info.value.status == 503 and info.value.retryable
    assert "overloaded" in info.value.detail
    assert [c.status for c in fake_openai.calls_to(TRANSCRIPTIONS)] == [503, 503]
    assert [(r["ok"], r["cost_usd"]) for r in await usage_rows(db)] == [(False, 0.0)] * 2


async def test_wrong_api_key_fails_without_leaking_it(
    bot: BotApiClient, fake: FakeBotApi, fake_openai: FakeOpenAI, db: Database
) -> None:
    wrong_key = "sk-wrong-0123456789abcdefghijklmnopqrstuvwxyz"
    client = openai.AsyncOpenAI(api_key=wrong_key, base_url=fake_openai.base_url)
    try:
        with pytest.raises(TranscriptionFailed) as info:
            await transcribe(bot, client, db, stored_voice(fake))
    finally:
        await client.close()
    exc = info.value
    assert str(exc) == UNAVAILABLE and exc.status == 401 and not exc.retryable
    assert exc.__cause__ is None and exc.__context__ is None
    assert "invalid_api_key" in exc.detail and wrong_key not in exc.detail
    [call] = fake_openai.calls_to(TRANSCRIPTIONS)
    assert call.status == 401 and not call.authorized
    [row] = await usage_rows(db)
    assert row["ok"] is False and "401" in row["error"] and wrong_key not in row["error"]


async def test_slow_answer_times_out(
    bot: BotApiClient,
    fake: FakeBotApi,
    oai: openai.AsyncOpenAI,
    fake_openai: FakeOpenAI,
    db: Database,
) -> None:
    fake_openai.fail_next(TRANSCRIPTIONS, Failure.slow(3.0))
    with pytest.raises(TranscriptionFailed) as info:
        await transcribe(bot, oai, db, stored_voice(fake), request_timeout=0.3)
    assert str(info.value) == TIMED_OUT and info.value.retryable
    assert len(fake_openai.calls_to(TRANSCRIPTIONS)) == 1
    [row] = await usage_rows(db)
    assert row["ok"] is False and row["latency_ms"] >= 300


# --- the fake is strict --------------------------------------------------------------------------


def _form(**fields: str) -> dict[str, str]:
    return fields


def _multipart(**fields: str) -> dict[str, Any]:
    """A multipart/form-data body of text fields only (httpx would urlencode them)."""
    parts = [
        f'--XyZ\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'
        for k, v in fields.items()
    ]
    body = ("".join(parts) + "--XyZ--\r\n").encode()
    return {"content": body, "headers": {"Content-Type": "multipart/form-data; boundary=XyZ"}}


BAD_REQUESTS: list[tuple[str, dict[str, Any], int, str]] = [
    ("missing model", {"files": {"file": ("a.ogg", OGG)}}, 400, "body -> model"),
    ("missing file", _multipart(model="whisper-1"), 400, "body -> file"),
    ("urlencoded", {"data": _form(model="whisper-1")}, 400, "expected multipart/form-data"),
    ("file as text", _multipart(model="whisper-1", file="x"), 400, "Expected UploadFile"),
    (
        "bad extension",
        {"data": _form(model="whisper-1"), "files": {"file": ("a.txt", OGG)}},
        400,
        "Invalid file format",
    ),
    (
        "not ogg bytes",
        {"data": _form(model="whisper-1"), "files": {"file": ("a.ogg", b"RIFF")}},
        400,
        "corrupted",
    ),
    (
        "unknown model",
        {"data": _form(model="whisper-2"), "files": {"file": ("a.ogg", OGG)}},
        404,
        "does not exist",
    ),
    (
        "bad format",
        {
            "data": _form(model="whisper-1", response_format="xml"),
            "files": {"file": ("a.ogg", OGG)},
        },
        400,
        "response_format",
    ),
    (
        "verbose_json on gpt-4o",
        {
            "data": _form(model="gpt-4o-transcribe", response_format="verbose_json"),
            "files": {"file": ("a.ogg", OGG)},
        },
        400,
        "not compatible",
    ),
    (
        "bad language",
        {"data": _form(model="whisper-1", language="english"), "files": {"file": ("a.ogg", OGG)}},
        400,
        "ISO-639-1",
    ),
    (
        "bad temperature",
        {"data": _form(model="whisper-1", temperature="2"), "files": {"file": ("a.ogg", OGG)}},
        400,
        "temperature",
    ),
    (
        "unknown field",
        {"data": _form(model="whisper-1", colour="red"), "files": {"file": ("a.ogg", OGG)}},
        400,
        "Unrecognized request argument",
    ),
    ("json body", {"json": {"model": "whisper-1"}}, 400, "expected multipart/form-data"),
]


@pytest.mark.parametrize(("name", "request_kwargs", "status", "message"), BAD_REQUESTS)
async def test_fake_rejects_bad_requests(
    fake_openai: FakeOpenAI, name: str, request_kwargs: dict[str, Any], status: int, message: str
) -> None:
    headers = {"Authorization": f"Bearer {DEFAULT_API_KEY}"}
    request_kwargs = dict(request_kwargs)
    headers.update(request_kwargs.pop("headers", {}))
    async with httpx.AsyncClient(base_url=fake_openai.base_url, headers=headers) as http:
        response = await http.post("/audio/transcriptions", **request_kwargs)
    assert response.status_code == status, name
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert message in error["message"]
    assert fake_openai.calls[-1].status == status


async def test_fake_auth_and_routing(fake_openai: FakeOpenAI) -> None:
    files = {"file": ("a.ogg", OGG)}
    async with httpx.AsyncClient(base_url=fake_openai.base_url) as http:
        missing = await http.post("/audio/transcriptions", data={"model": "whisper-1"}, files=files)
        wrong = await http.post(
            "/audio/transcriptions",
            data={"model": "whisper-1"},
            files=files,
            headers={"Authorization": "Bearer sk-nope-1234567890abcdef"},
        )
        unknown = await http.post("/audio/translationz", headers={"Authorization": "Bearer x"})
    assert missing.status_code == 401 and "didn't provide an API key" in missing.text
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
    assert "sk-nope-1234567890abcdef" not in wrong.text and "cdef" in wrong.text
    assert unknown.status_code == 404 and "Invalid URL" in unknown.json()["error"]["message"]


async def test_fake_refuses_uploads_over_25_mb(fake_openai: FakeOpenAI) -> None:
    big = b"OggS" + bytes(MAX_UPLOAD_BYTES)
    headers = {"Authorization": f"Bearer {DEFAULT_API_KEY}"}
    async with httpx.AsyncClient(base_url=fake_openai.base_url, headers=headers) as http:
        response = await http.post(
            "/audio/transcriptions", data={"model": "whisper-1"}, files={"file": ("a.ogg", big)}
        )
    assert response.status_code == 413
    assert "Maximum content size limit (26214400)" in response.json()["error"]["message"]


@pytest.mark.parametrize("fmt", ["text", "srt", "vtt", "json"])
async def test_fake_text_formats_through_the_sdk(fake_openai: FakeOpenAI, fmt: str) -> None:
    fake_openai.queue_transcript("plain words", duration=2.5)
    oai = fake_openai.client()
    try:
        result: Any = await oai.audio.transcriptions.create(
            model="whisper-1",
            file=("v.ogg", OGG, "audio/ogg"),
            response_format=fmt,  # type: ignore[call-overload]
        )
    finally:
        await oai.close()
    text = result if isinstance(result, str) else result.text
    assert "plain words" in text
    if fmt == "vtt":
        assert text.startswith("WEBVTT") and "00:00:02.500" in text
    if fmt == "json":
        assert json.loads(result.model_dump_json())["usage"] == {"type": "duration", "seconds": 3}


async def test_connection_refused_is_retried_once_then_fails(
    bot: BotApiClient, fake: FakeBotApi, db: Database
) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = openai.AsyncOpenAI(api_key=DEFAULT_API_KEY, base_url=f"http://127.0.0.1:{port}/v1")
    try:
        with pytest.raises(TranscriptionFailed) as info:
            await transcribe(bot, client, db, stored_voice(fake))
    finally:
        await client.close()
    assert info.value.retryable and info.value.status is None
    assert "APIConnectionError" in info.value.detail
    assert [(r["ok"], r["cost_usd"]) for r in await usage_rows(db)] == [(False, 0.0)] * 2
