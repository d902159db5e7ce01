"""Voice messages -> text (seed 000, "Voice message transcription" and ``voice.ts``).

``transcribe_voice``: getFile -> refuse anything over 20 MB (the voice's declared size, then
getFile's, then a capped download) -> download -> OpenAI ``audio/transcriptions`` through the
openai SDK (which runs under trio: it uses anyio) -> one ``api_usage`` row per attempt
(purpose ``transcription``, priced by audio duration) -> :class:`Transcript`.

Every failure is a :class:`VoiceError` whose ``str()`` is a reply fit for the user; the
technical reason is in ``detail`` (scrubbed of the API key). ``TranscriptionFailed.retryable``
tells the caller whether keeping the message and trying later may help. One retry is made on
429/5xx/connection errors, honouring ``retry-after`` up to ``max_retry_wait`` seconds.

OpenAI exceptions are not chained onto ours: they hold the request, whose headers carry the
API key.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial

import attrs
import trio
from openai import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    AsyncOpenAI,
    OpenAIError,
    omit,
)
from openai.types.audio import Transcription, TranscriptionVerbose
from openai.types.audio.transcription import UsageDuration, UsageTokens

from actors.telegram.errors import (
    DownloadFailed,
    FileTooLarge,
    TranscriptionFailed,
    VoiceTooLarge,
)
from actors.telegram.files import TelegramFiles, fetch_file
from actors.telegram.types import Voice
from memory.llm.cost import DEFAULT_RATES, RateTable
from memory.llm.usage import log_api_usage, scrub_error
from runtime.db import Queries
from runtime.logs import get_logger

log = get_logger(__name__)

MAX_VOICE_BYTES = 20 * 1024 * 1024  # Telegram's getFile limit for bots
DEFAULT_MODEL = "whisper-1"
PURPOSE = "transcription"
#: extensions the transcription endpoint accepts
AUDIO_EXTENSIONS = frozenset(
    {"flac", "m4a", "mp3", "mp4", "mpeg", "mpga", "oga", "ogg", "wav", "webm"}
)
_MIME_EXTENSIONS = {
    "audio/ogg": "ogg",
    "audio/opus": "ogg",
    "audio/x-opus+ogg": "ogg",
    "audio/mpeg": "mp3",
    "audio/mp4": "m4a",
    "audio/x-m4a": "m4a",
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/webm": "webm",
    "audio/flac": "flac",
}

DOWNLOAD_FAILED = (
    "I couldn't download that voice message from Telegram. Please try sending it again."
)
GENERIC_FAILED = (
    "Sorry, I couldn't transcribe that voice message right now. Please try again in a moment, "
    "or send it as text."
)
BUSY = (
    "The transcription service is busy right now. Please try again in a minute, or send it as text."
)
TIMED_OUT = (
    "Transcribing that voice message took too long. Please try again, or send a shorter one."
)
UNAVAILABLE = (
    "Voice transcription isn't working right now (a problem on my side). Could you send it as text?"
)
REJECTED = "The transcription service couldn't process that audio. Could you send it as text?"
NO_SPEECH = "I couldn't hear any words in that voice message."


# --- errors ------------------------------------------------------------------------------------


class NoSpeech(TranscriptionFailed):
    """The audio was transcribed (and billed) but contained no words."""


# --- download ----------------------------------------------------------------------------------


VoiceFiles = TelegramFiles


@attrs.frozen
class Audio:
    """Downloaded audio ready for upload: bytes, a filename with a supported extension, type."""

    data: bytes
    filename: str
    content_type: str


def _extension(file_path: str, mime_type: str | None) -> str:
    ext = file_path.rsplit(".", 1)[-1].lower() if "." in file_path.rsplit("/", 1)[-1] else ""
    if ext in AUDIO_EXTENSIONS:
        return ext
    return _MIME_EXTENSIONS.get((mime_type or "").lower(), "ogg")


async def download_voice(
    bot: VoiceFiles, voice: Voice, *, max_bytes: int = MAX_VOICE_BYTES
) -> Audio:
    """The voice's bytes; ``VoiceTooLarge`` before any download when a size is known to be over.

    Telegram failures become ``TranscriptionFailed`` (``retryable`` for network/429/5xx).
    """
    try:
        file_path, data = await fetch_file(bot, voice.file_id, max_bytes, voice.file_size)
    except FileTooLarge as exc:
        raise VoiceTooLarge(exc.size, max_bytes) from exc
    except DownloadFailed as exc:
        raise TranscriptionFailed(
            DOWNLOAD_FAILED, detail=exc.detail, status=exc.status, retryable=exc.retryable
        ) from exc
    ext = _extension(file_path, voice.mime_type)
    return Audio(data, f"voice.{ext}", voice.mime_type or "audio/ogg")


# --- transcription -----------------------------------------------------------------------------


@attrs.frozen
class Transcript:
    """The text of a voice message, the billed audio duration and what it cost."""

    text: str
    duration_seconds: float
    cost_usd: float = 0.0


def _retry_after(exc: APIStatusError) -> float | None:
    headers = exc.response.headers
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            continue
        if seconds >= 0 and seconds == seconds:  # not NaN
            return seconds
    return None


def _classify(
    exc: OpenAIError, *, model: str, secrets: tuple[str, ...], retry_delay: float, max_wait: float
) -> tuple[TranscriptionFailed, float | None]:
    """Our error for ``exc`` and the wait before one more attempt (None: don't retry)."""
    if isinstance(exc, APIStatusError):
        status = exc.status_code
        body = exc.body
        message = body.get("message") if isinstance(body, dict) else None
        detail = f"{model}: HTTP {status} {exc.code or exc.type or ''}: {message or exc.message}"
        if exc.request_id:
            detail += f" (request {exc.request_id})"
        detail = scrub_error(detail, secrets)
        if status == 429 and exc.code == "insufficient_quota":
            return TranscriptionFailed(UNAVAILABLE, detail=detail, status=status), None
        if status == 429 or status >= 500:
            after = _retry_after(exc)
            wait = retry_delay if after is None else after
            user = BUSY if status == 429 else GENERIC_FAILED
            failed = TranscriptionFailed(user, detail=detail, status=status, retryable=True)
            return failed, (wait if wait <= max_wait else None)
        user = UNAVAILABLE if status in (401, 403, 404) else REJECTED
        return TranscriptionFailed(user, detail=detail, status=status), None
    detail = scrub_error(f"{model}: {type(exc).__name__}: {exc}", secrets)
    if isinstance(exc, APITimeoutError):
        return TranscriptionFailed(TIMED_OUT, detail=detail, retryable=True), None
    if isinstance(exc, APIConnectionError):
        failed = TranscriptionFailed(GENERIC_FAILED, detail=detail, retryable=True)
        return failed, retry_delay
    return TranscriptionFailed(GENERIC_FAILED, detail=detail), None


async def _request(
    client: AsyncOpenAI, audio: Audio, model: str, language: str | None, request_timeout: float
) -> Transcription | TranscriptionVerbose:
    file = (audio.filename, audio.data, audio.content_type)
    lang = language if language else omit
    if model == "whisper-1":  # verbose_json carries the billed duration
        return await client.audio.transcriptions.create(
            model=model,
            file=file,
            response_format="verbose_json",
            language=lang,
            timeout=request_timeout,
        )
    return await client.audio.transcriptions.create(
        model=model, file=file, response_format="json", language=lang, timeout=request_timeout
    )


async def transcribe_audio(
    *,
    openai: AsyncOpenAI,
    db: Queries,
    chat_id: int | None,
    audio: Audio,
    audio_seconds: float | None = None,
    model: str = DEFAULT_MODEL,
    language: str | None = None,
    request_timeout: float = 120.0,
    retry_delay: float = 1.0,
    max_retry_wait: float = 5.0,
    rates: RateTable = DEFAULT_RATES,
) -> Transcript:
    """Transcribe ``audio`` (at most one retry), logging every attempt to ``api_usage``.

    ``audio_seconds`` (Telegram's duration) is used for pricing when the API reports none.
    """
    client = openai.with_options(max_retries=0)  # our own retry policy, below
    secrets = (openai.api_key,) if isinstance(openai.api_key, str) else ()
    record = partial(
        log_api_usage,
        db,
        provider="openai",
        model=model,
        purpose=PURPOSE,
        chat_id=chat_id,
        rates=rates,
        secrets=secrets,
    )
    for attempt in (1, 2):
        started = trio.current_time()
        failure: TranscriptionFailed | None = None
        wait: float | None = None
        try:
            result = await _request(client, audio, model, language, request_timeout)
        except OpenAIError as exc:
            failure, wait = _classify(
                exc, model=model, secrets=secrets, retry_delay=retry_delay, max_wait=max_retry_wait
            )
        latency_ms = (trio.current_time() - started) * 1000
        if failure is None:
            return await _succeeded(record, chat_id, model, result, audio_seconds, latency_ms)
        await record(
            duration_seconds=audio_seconds, latency_ms=latency_ms, ok=False, error=failure.detail
        )
        retrying = attempt == 1 and wait is not None
        log.warning(
            "voice.transcription_failed",
            chat_id=chat_id,
            attempt=attempt,
            status=failure.status,
            detail=failure.detail,
            retry_in=wait if retrying else None,
        )
        if not retrying or wait is None:
            raise failure
        await trio.sleep(wait)
    raise AssertionError("unreachable")  # pragma: no cover


async def _succeeded(
    record: Callable[..., Awaitable[float]],
    chat_id: int | None,
    model: str,
    result: Transcription | TranscriptionVerbose,
    audio_seconds: float | None,
    latency_ms: float,
) -> Transcript:
    """Log the billed usage of a successful call and build the Transcript (or NoSpeech)."""
    duration = audio_seconds
    input_tokens = output_tokens = 0
    usage = result.usage
    if isinstance(result, TranscriptionVerbose):
        duration = result.duration
    elif isinstance(usage, UsageDuration):
        duration = usage.seconds
    if isinstance(usage, UsageTokens):
        input_tokens, output_tokens = usage.input_tokens, usage.output_tokens
    cost = await record(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        duration_seconds=duration,
        latency_ms=latency_ms,
    )
    text = result.text.strip()
    log.info(
        "voice.transcribed",
        chat_id=chat_id,
        model=model,
        seconds=duration,
        chars=len(text),
        latency_ms=round(latency_ms),
        cost_usd=cost,
    )
    if not text:
        raise NoSpeech(NO_SPEECH, detail=f"{model} returned no text")
    return Transcript(text, float(duration or 0.0), cost)


async def transcribe_voice(
    *,
    bot: VoiceFiles,
    openai: AsyncOpenAI,
    db: Queries,
    chat_id: int | None,
    voice: Voice,
    model: str = DEFAULT_MODEL,
    max_bytes: int = MAX_VOICE_BYTES,
    language: str | None = None,
    request_timeout: float = 120.0,
    retry_delay: float = 1.0,
    max_retry_wait: float = 5.0,
    rates: RateTable = DEFAULT_RATES,
) -> Transcript:
    """Download ``voice`` from Telegram and transcribe it; raises a ``VoiceError`` on failure.

    ``VoiceTooLarge`` (nothing sent to OpenAI), ``TranscriptionFailed`` (``NoSpeech`` for an
    empty result); ``str(exc)`` is the reply to send the user.
    """
    audio = await download_voice(bot, voice, max_bytes=max_bytes)
    return await transcribe_audio(
        openai=openai,
        db=db,
        chat_id=chat_id,
        audio=audio,
        audio_seconds=float(voice.duration),
        model=model,
        language=language,
        request_timeout=request_timeout,
        retry_delay=retry_delay,
        max_retry_wait=max_retry_wait,
        rates=rates,
    )
