"""A strict fake OpenAI API: quart-trio served by hypercorn on 127.0.0.1, a free port.

    async with run_fake_openai(api_key=KEY) as fake:
        client = openai.AsyncOpenAI(api_key=KEY, base_url=fake.base_url, max_retries=0)
        fake.queue_transcript("hello there", duration=3.5)
        fake.fail_next(TRANSCRIPTIONS, Failure.rate_limited(retry_after=1))
        ...
        assert fake.calls_to(TRANSCRIPTIONS)[0].model == "whisper-1"

Served today: ``POST /v1/audio/transcriptions``, validated the way the real API does —
Bearer key (401 otherwise), multipart/form-data, ``file`` (an upload with a supported
extension whose bytes look like that container; at most 25 MB, 413 beyond), ``model``
(whisper-1, gpt-4o-transcribe, gpt-4o-mini-transcribe), ``response_format`` (json, text, srt,
verbose_json, vtt; only json/text for the gpt-4o models), ``language`` (ISO-639-1), ``prompt``,
``temperature`` (0..1). UNKNOWN FIELDS ARE REJECTED (stricter than OpenAI, to catch our bugs).
Errors have OpenAI's shape ``{"error": {"message", "type", "param", "code"}}``.

Extending (chat completions, embeddings): write ``async def _x(self, call) -> Response`` that
validates, then ``await self.scripted(ENDPOINT, call)``, and register it with
``self._route(path, ENDPOINT, self._x)`` in ``_build_app``; auth, recording, scripted failures
and error rendering are shared.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import secrets
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager, suppress
from functools import partial
from typing import Any

import attrs
import hypercorn.trio
import openai
import trio
from hypercorn.config import Config
from quart import Response, request
from quart_trio import QuartTrio
from werkzeug.datastructures import FileStorage
from werkzeug.exceptions import HTTPException

DEFAULT_API_KEY = "sk-test-fakeopenai-0123456789abcdefghijklmnopqrstuvwxyz"
TRANSCRIPTIONS = "audio.transcriptions"
MAX_UPLOAD_BYTES = 25 * 1024 * 1024  # 26214400, the API's request limit
AUDIO_EXTENSIONS = ("flac", "m4a", "mp3", "mp4", "mpeg", "mpga", "oga", "ogg", "wav", "webm")
TRANSCRIPTION_MODELS = frozenset({"whisper-1", "gpt-4o-transcribe", "gpt-4o-mini-transcribe"})
RESPONSE_FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
_TRANSCRIPTION_FIELDS = frozenset(
    {
        "model",
        "language",
        "prompt",
        "response_format",
        "temperature",
        "timestamp_granularities[]",
        "include[]",
        "stream",
    }
)
_NO_KEY = (
    "You didn't provide an API key. You need to provide your API key in an Authorization "
    "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or as the password field "
    "(with blank username) if you're accessing the API from your browser and are prompted for "
    "a username. You can obtain an API key from https://platform.openai.com/account/api-keys."
)


class OpenAIHttpError(Exception):
    """An error answer; raised inside handlers, rendered in OpenAI's error shape."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type = status, message, type
        self.param, self.code, self.headers = param, code, dict(headers or {})


def _missing(field: str) -> OpenAIHttpError:
    return OpenAIHttpError(
        400,
        f"1 validation error for Request\nbody -> {field}\n  field required "
        "(type=value_error.missing)",
    )


def error_response(err: OpenAIHttpError) -> Response:
    """``err`` as the API renders it (JSON body, status, extra headers)."""
    body = {
        "error": {"message": err.message, "type": err.type, "param": err.param, "code": err.code}
    }
    response = Response(json.dumps(body), status=err.status, content_type="application/json")
    for name, value in err.headers.items():
        response.headers[name] = value
    return response


def _from_http_exception(exc: HTTPException) -> OpenAIHttpError:
    status = exc.code or 500
    if status in (404, 405):
        message = f"Invalid URL ({request.method} {request.path})"
    elif status == 413:
        message = f"Maximum content size limit ({MAX_UPLOAD_BYTES}) exceeded"
    else:
        message = exc.description or "Bad request"
    return OpenAIHttpError(
        status, message, type="server_error" if status == 413 else "invalid_request_error"
    )


def mask_key(key: str) -> str:
    """The key the way the API echoes a wrong one: ``sk-te********************wxyz``."""
    return key[:5] + "*" * max(0, len(key) - 9) + key[-4:] if len(key) > 12 else "*" * len(key)


@attrs.frozen
class Failure:
    """A scripted answer for ``fake.fail_next``: an error status, or a delay before answering."""

    kind: str  # "status" | "slow"
    status: int = 0
    message: str = ""
    type: str = "server_error"
    code: str | None = None
    retry_after: float | None = None
    delay: float = 0.0

    @classmethod
    def rate_limited(
        cls, retry_after: float | None = 1, code: str = "rate_limit_exceeded"
    ) -> Failure:
        return cls(
            "status",
            429,
            "Rate limit reached for requests. Please try again later.",
            "requests",
            code,
            retry_after,
        )

    @classmethod
    def insufficient_quota(cls) -> Failure:
        return cls(
            "status",
            429,
            "You exceeded your current quota, please check your plan and billing details.",
            "insufficient_quota",
            "insufficient_quota",
        )

    @classmethod
    def server_error(cls, status: int = 500, retry_after: float | None = None) -> Failure:
        return cls(
            "status",
            status,
            "The server had an error while processing your request. Sorry about that!",
            "server_error",
            None,
            retry_after,
        )

    @classmethod
    def overloaded(cls) -> Failure:
        return cls(
            "status",
            503,
            "The engine is currently overloaded, please try again later.",
            "server_error",
        )

    @classmethod
    def slow(cls, seconds: float) -> Failure:
        """Answer normally, but only after ``seconds``."""
        return cls("slow", delay=seconds)


@attrs.define
class Call:
    """One request as received; ``status`` is None while it runs."""

    endpoint: str
    method: str
    path: str
    time: float
    authorized: bool = False
    status: int | None = None
    model: str | None = None
    params: dict[str, Any] = attrs.Factory(dict)
    filename: str | None = None
    content_type: str | None = None
    data: bytes = b""
    error: str | None = None


@attrs.frozen
class ScriptedTranscript:
    text: str
    duration: float | None = None
    language: str = "english"


_MAGIC: dict[str, Callable[[bytes], bool]] = {
    "ogg": lambda d: d.startswith(b"OggS"),
    "oga": lambda d: d.startswith(b"OggS"),
    "flac": lambda d: d.startswith(b"fLaC"),
    "wav": lambda d: d.startswith(b"RIFF") and d[8:12] == b"WAVE",
    "webm": lambda d: d.startswith(b"\x1a\x45\xdf\xa3"),
    "mp4": lambda d: d[4:8] == b"ftyp",
    "m4a": lambda d: d[4:8] == b"ftyp",
}
for _ext in ("mp3", "mpeg", "mpga"):
    _MAGIC[_ext] = lambda d: (
        d.startswith(b"ID3") or (len(d) > 1 and d[0] == 0xFF and d[1] & 0xE0 == 0xE0)
    )


def _timestamp(seconds: float, sep: str) -> str:
    ms = round(seconds * 1000)
    return (
        f"{ms // 3_600_000:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d}{sep}{ms % 1000:03d}"
    )


class FakeOpenAI:
    """State and behaviour of the fake; build it with ``run_fake_openai``."""

    def __init__(self, api_key: str = DEFAULT_API_KEY) -> None:
        self.api_key = api_key
        self.base_url = ""  # http://127.0.0.1:<port>/v1 once serving
        self.calls: list[Call] = []
        self.default_transcript = ScriptedTranscript("hello from the fake", 2.0)
        self._transcripts: deque[ScriptedTranscript] = deque()
        self._failures: dict[str, deque[Failure]] = {}
        self._request_ids = itertools.count(1)
        self.app = self._build_app()

    # --- scripting and inspection --------------------------------------------------------------

    def queue_transcript(
        self, text: str, *, duration: float | None = None, language: str = "english"
    ) -> None:
        """The next successful transcription returns ``text`` (FIFO; then the default)."""
        self._transcripts.append(ScriptedTranscript(text, duration, language))

    def fail_next(self, endpoint: str, failure: Failure, times: int = 1) -> None:
        """The next ``times`` valid, authorized calls of ``endpoint`` get ``failure``."""
        self._failures.setdefault(endpoint, deque()).extend([failure] * times)

    def calls_to(self, endpoint: str) -> list[Call]:
        return [c for c in self.calls if c.endpoint == endpoint]

    def client(self, *, api_key: str | None = None, **options: Any) -> openai.AsyncOpenAI:
        """An SDK client for this fake (no SDK retries unless given); close it when done."""
        options.setdefault("max_retries", 0)
        return openai.AsyncOpenAI(
            api_key=api_key or self.api_key, base_url=self.base_url, **options
        )

    # --- shared machinery (reused by every endpoint) -------------------------------------------

    def _build_app(self) -> QuartTrio:
        app = QuartTrio("fake-openai")
        app.config["MAX_CONTENT_LENGTH"] = 64 * 1024 * 1024
        app.config["MAX_FORM_MEMORY_SIZE"] = 1024 * 1024
        self._route(app, "/v1/audio/transcriptions", TRANSCRIPTIONS, self._transcriptions)

        @app.errorhandler(HTTPException)
        async def http_error(exc: HTTPException) -> Response:
            with suppress(HTTPException):
                await request.get_data()  # drain, so the keep-alive connection stays usable
            return error_response(_from_http_exception(exc))

        return app

    def _route(
        self,
        app: QuartTrio,
        path: str,
        endpoint: str,
        handler: Callable[[Call], Awaitable[Response]],
    ) -> None:
        async def view() -> Response:
            call = Call(endpoint, request.method, request.path, trio.current_time())
            self.calls.append(call)
            try:
                # Read the whole body before answering: an early answer (401) with the body
                # unread stalls the client's keep-alive connection.
                await request.get_data()
                self.authorize(call)
                response = await handler(call)
            except HTTPException as exc:
                err = _from_http_exception(exc)
                call.error = err.message
                response = error_response(err)
            except OpenAIHttpError as err:
                call.error = err.message
                response = error_response(err)
            request_id = f"req_{next(self._request_ids):08d}{secrets.token_hex(8)}"
            response.headers["x-request-id"] = request_id
            response.headers["openai-version"] = "2020-10-01"
            call.status = response.status_code
            return response

        app.add_url_rule(path, endpoint, view, methods=["POST"])

    def authorize(self, call: Call) -> None:
        """401 unless ``Authorization: Bearer <the fake's key>``."""
        header = request.headers.get("authorization", "")
        scheme, _, key = header.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise OpenAIHttpError(401, _NO_KEY)
        if not secrets.compare_digest(key.strip().encode(), self.api_key.encode()):
            raise OpenAIHttpError(
                401,
                f"Incorrect API key provided: {mask_key(key.strip())}. You can find your API "
                "key at https://platform.openai.com/account/api-keys.",
                code="invalid_api_key",
            )
        call.authorized = True

    async def scripted(self, endpoint: str, call: Call) -> None:
        """Apply the next scripted failure of ``endpoint`` (raise it, or sleep for a slow one)."""
        queue = self._failures.get(endpoint)
        failure = queue.popleft() if queue else None
        if failure is None:
            return
        if failure.kind == "slow":
            await trio.sleep(failure.delay)
            return
        headers = {}
        if failure.retry_after is not None:
            headers["retry-after"] = f"{failure.retry_after:g}"
        raise OpenAIHttpError(
            failure.status, failure.message, type=failure.type, code=failure.code, headers=headers
        )

    @staticmethod
    async def multipart() -> tuple[dict[str, str | list[str]], dict[str, tuple[str, str, bytes]]]:
        """The form fields and uploads (name -> (filename, content type, bytes)) of the body."""
        ctype = request.headers.get("content-type", "")
        if not ctype.lower().startswith("multipart/form-data"):
            raise OpenAIHttpError(
                400,
                f"Invalid Content-Type header ({ctype or 'none'}), expected multipart/form-data. "
                "(HINT: If you're using curl, you can pass -H 'Content-Type: multipart/form-data')",
            )
        form, files = await request.form, await request.files
        uploads: dict[str, tuple[str, str, bytes]] = {}
        try:
            for name, storages in files.lists():
                if len(storages) > 1:
                    raise OpenAIHttpError(400, f"Duplicate parameter: '{name}'", param=name)
                storage: FileStorage = storages[0]
                uploads[name] = (storage.filename or "", storage.mimetype or "", storage.read())
        finally:
            for storage in files.values():
                storage.close()
        fields: dict[str, str | list[str]] = {}
        for name, values in form.lists():
            if name.endswith("[]"):
                fields[name] = list(values)
            elif len(values) > 1:
                raise OpenAIHttpError(400, f"Duplicate parameter: '{name}'", param=name)
            else:
                fields[name] = values[0]
        return fields, uploads

    def _request_size(self, uploads: Mapping[str, tuple[str, str, bytes]]) -> int:
        return request.content_length or sum(len(u[2]) for u in uploads.values())

    # --- POST /v1/audio/transcriptions ---------------------------------------------------------

    async def _transcriptions(self, call: Call) -> Response:
        fields, uploads = await self.multipart()
        size = self._request_size(uploads)
        if size > MAX_UPLOAD_BYTES:
            raise OpenAIHttpError(
                413,
                f"Maximum content size limit ({MAX_UPLOAD_BYTES}) exceeded ({size} bytes read)",
                type="server_error",
            )
        call.params = {k: v for k, v in fields.items() if k != "model"}
        if "file" in fields:
            raise OpenAIHttpError(400, "Expected UploadFile, received: <class 'str'>", param="file")
        for name in [*fields, *uploads]:
            if name not in _TRANSCRIPTION_FIELDS and not (name == "file" and name in uploads):
                raise OpenAIHttpError(
                    400, f"Unrecognized request argument supplied: {name}", param=name
                )
        if "file" not in uploads:
            raise _missing("file")
        call.filename, call.content_type, call.data = uploads["file"]
        model = fields.get("model")
        if not isinstance(model, str) or not model:
            raise _missing("model")
        call.model = model
        if model not in TRANSCRIPTION_MODELS:
            raise OpenAIHttpError(
                404,
                f"The model `{model}` does not exist or you do not have access to it.",
                code="model_not_found",
            )
        self._check_audio(call.filename or "", call.data)
        fmt = self._check_options(model, fields)
        await self.scripted(TRANSCRIPTIONS, call)
        script = self._transcripts.popleft() if self._transcripts else self.default_transcript
        return self._transcription_body(model, fmt, script)

    @staticmethod
    def _check_audio(filename: str, data: bytes) -> None:
        ext = filename.rsplit(".", 1)[-1].lower() if "." in filename else ""
        if ext not in AUDIO_EXTENSIONS:
            raise OpenAIHttpError(
                400,
                f"Invalid file format. Supported formats: {list(AUDIO_EXTENSIONS)}",
                param="file",
                code="invalid_value",
            )
        if not data:
            raise OpenAIHttpError(
                400,
                "Audio file is too short. Minimum audio length is 0.1 seconds.",
                param="file",
                code="audio_too_short",
            )
        if not _MAGIC[ext](data):
            raise OpenAIHttpError(
                400,
                "Audio file might be corrupted or unsupported",
                param="file",
                code="invalid_value",
            )

    @staticmethod
    def _check_options(model: str, fields: Mapping[str, str | list[str]]) -> str:
        fmt = fields.get("response_format", "json")
        if fmt not in RESPONSE_FORMATS:
            raise OpenAIHttpError(
                400,
                f"'{fmt}' is not one of {list(RESPONSE_FORMATS)} - 'response_format'",
                param="response_format",
            )
        assert isinstance(fmt, str)
        if model != "whisper-1" and fmt not in ("json", "text"):
            raise OpenAIHttpError(
                400,
                f"response_format '{fmt}' is not compatible with model '{model}'. Use "
                "'json' or 'text' instead.",
                param="response_format",
                code="unsupported_value",
            )
        language = fields.get("language")
        if language is not None and not (
            isinstance(language, str) and re.fullmatch(r"[a-z]{2,3}", language)
        ):
            raise OpenAIHttpError(
                400,
                f"Invalid language '{language}'. Language parameter must "
                "be specified in ISO-639-1 format.",
                param="language",
            )
        temperature = fields.get("temperature")
        if temperature is not None:
            try:
                number = float(str(temperature))
            except ValueError:
                number = math.nan
            if not 0.0 <= number <= 1.0:
                raise OpenAIHttpError(
                    400,
                    f"Invalid 'temperature': {temperature!r}. Expected a number between 0 and 1.",
                    param="temperature",
                )
        for value in fields.get("timestamp_granularities[]", []):
            if value not in ("word", "segment") or fmt != "verbose_json":
                raise OpenAIHttpError(
                    400,
                    "timestamp_granularities requires response_format "
                    "verbose_json and values word/segment",
                    param="timestamp_granularities",
                )
        if fields.get("stream") not in (None, "false"):
            raise OpenAIHttpError(400, "streaming is not supported by the fake", param="stream")
        return fmt

    @staticmethod
    def _transcription_body(model: str, fmt: str, script: ScriptedTranscript) -> Response:
        duration = 2.0 if script.duration is None else script.duration
        text = script.text
        usage: dict[str, Any]
        if model == "whisper-1":
            usage = {"type": "duration", "seconds": math.ceil(duration)}
        else:
            audio_tokens = max(1, math.ceil(duration * 10))
            output = len(text.split()) + 1
            usage = {
                "type": "tokens",
                "input_tokens": audio_tokens,
                "output_tokens": output,
                "total_tokens": audio_tokens + output,
                "input_token_details": {"text_tokens": 0, "audio_tokens": audio_tokens},
            }
        end_srt, end_vtt = _timestamp(duration, ","), _timestamp(duration, ".")
        if fmt == "text":
            return Response(text + "\n", content_type="text/plain; charset=utf-8")
        if fmt == "srt":
            body = f"1\n00:00:00,000 --> {end_srt}\n{text}\n\n"
            return Response(body, content_type="text/plain; charset=utf-8")
        if fmt == "vtt":
            body = f"WEBVTT\n\n00:00:00.000 --> {end_vtt}\n{text}\n\n"
            return Response(body, content_type="text/plain; charset=utf-8")
        payload: dict[str, Any] = {"text": text, "usage": usage}
        if fmt == "verbose_json":
            segment = {
                "id": 0,
                "seek": 0,
                "start": 0.0,
                "end": duration,
                "text": f" {text}",
                "tokens": [50364, 50414],
                "temperature": 0.0,
                "avg_logprob": -0.25,
                "compression_ratio": 1.0,
                "no_speech_prob": 0.01,
            }
            payload = {
                "task": "transcribe",
                "language": script.language,
                "duration": duration,
                "text": text,
                "segments": [segment] if text else [],
                "usage": usage,
            }
        return Response(json.dumps(payload), content_type="application/json")


@asynccontextmanager
async def run_fake_openai(api_key: str = DEFAULT_API_KEY) -> AsyncIterator[FakeOpenAI]:
    """Serve a fresh FakeOpenAI on 127.0.0.1 (free port) for the duration of the block."""
    fake = FakeOpenAI(api_key)
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 0.5
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(partial(hypercorn.trio.serve, fake.app, config))
        fake.base_url = f"{binds[0]}/v1"
        try:
            yield fake
        finally:
            nursery.cancel_scope.cancel()
