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

``POST /v1/chat/completions`` (JSON; unknown fields rejected, as OpenAI does): ``model`` (any,
unless ``chat_models`` is given), ``messages`` (non-empty; roles system/developer/user/
assistant/tool; an assistant's ``tool_calls`` answered by ``tool`` messages with matching
``tool_call_id`` right after it, and every ``tool`` message answering such a call), ``tools``
(non-empty, ``type: function``, names ``^[a-zA-Z0-9_-]{1,64}$``, ``parameters`` an object
schema), ``max_tokens``/``max_completion_tokens`` (not both, >= 1), ``n`` 1, image parts
(:mod:`fakes.images`; ``fake.images.supported = False`` plays a text-only model). Scripted
replies (text and/or tool calls, finish reason, usage) play in order, then
``default_chat_text``; a scripted call of a tool the request did not offer is answered 500.
``stream: true`` answers ``chat.completion.chunk`` server-sent events as the real API does
(:mod:`fakes.openai_stream`; ``stream_options`` checked, the usage chunk only with
``include_usage``); ``fake.timing`` (:class:`fakes.sse.StreamTiming`) paces every chat answer,
and ``Failure.stream_error``/``Failure.dropped`` break a stream mid-way. A streamed call
records the chunks sent (``call.events``) and how the stream ended (``call.stream_end``).

``POST /v1/embeddings``: ``model`` (``embedding_models``: name -> dimensions, 404 otherwise),
``input`` (a non-empty string or 1..2048 of them, each at most 8192 tokens by a 4 chars/token
estimate), ``dimensions`` (text-embedding-3 only), ``encoding_format`` float/base64. Vectors
are deterministic unit vectors: a sum of per-word pseudo-random vectors, so texts sharing
words are similar (``embedding_vector`` computes the same vector; ``set_embedding`` pins one).

Extending: write ``async def _x(self, call) -> Response`` that validates, then
``await self.scripted(ENDPOINT, call)``, and register it with ``self._route(path, ENDPOINT,
self._x)`` in ``_build_app``; auth, recording, scripted failures and error rendering are shared.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import math
import random
import re
import secrets
import struct
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
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

from fakes.images import ImageRejected, ImageRules
from fakes.openai_stream import stream_body
from fakes.sse import StreamFault, StreamTiming, pieces_in, send_stream

DEFAULT_API_KEY = "sk-test-fakeopenai-0123456789abcdefghijklmnopqrstuvwxyz"
TRANSCRIPTIONS = "audio.transcriptions"
CHAT_COMPLETIONS = "chat.completions"
EMBEDDINGS = "embeddings"
#: embedding model -> native dimensions
EMBEDDING_MODELS: Mapping[str, int] = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
MAX_EMBEDDING_INPUTS = 2048
MAX_EMBEDDING_TOKENS = 8192
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

    kind: str  # "status" | "slow" | "stream"
    status: int = 0
    message: str = ""
    type: str = "server_error"
    code: str | None = None
    retry_after: float | None = None
    delay: float = 0.0
    fault: StreamFault | None = None

    @classmethod
    def stream_error(
        cls,
        after: int = 0,
        type: str = "server_error",
        message: str = "The server had an error while processing your request. Sorry about that!",
    ) -> Failure:
        """A streamed chat answer that sends an error chunk after ``after`` content pieces."""
        return cls("stream", fault=StreamFault("error", after, type, message))

    @classmethod
    def dropped(cls, after: int = 0) -> Failure:
        """A streamed chat answer whose connection drops after ``after`` content pieces."""
        return cls("stream", fault=StreamFault("drop", after))

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
    #: a streamed answer: the chunks sent (``chunk``, ``usage``, ``done``, ``error``) and how
    #: it ended (complete, error, drop, client_gone)
    events: list[str] = attrs.Factory(list)
    stream_end: str | None = None


@attrs.frozen
class ScriptedTranscript:
    text: str
    duration: float | None = None
    language: str = "english"


@attrs.frozen
class ScriptedToolCall:
    id: str
    name: str
    arguments: str  # sent verbatim


@attrs.frozen
class ChatReply:
    """A scripted chat answer; None token counts are estimated from request and reply."""

    text: str | None = None
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    finish_reason: str = "stop"
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    #: reported as ``usage.prompt_tokens_details.cached_tokens`` (None: no details)
    cached_tokens: int | None = None


# --- chat completions and embeddings validation (pure; raises OpenAIHttpError) -----------------

_CHAT_FIELDS = frozenset(
    {
        "model",
        "messages",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "n",
        "stream",
        "stream_options",
        "stop",
        "seed",
        "user",
        "response_format",
        "frequency_penalty",
        "presence_penalty",
        "logprobs",
        "top_logprobs",
        "metadata",
        "store",
        "reasoning_effort",
        "service_tier",
    }
)
_MESSAGE_FIELDS: Mapping[str, frozenset[str]] = {
    "system": frozenset({"role", "content", "name"}),
    "developer": frozenset({"role", "content", "name"}),
    "user": frozenset({"role", "content", "name"}),
    "assistant": frozenset({"role", "content", "name", "tool_calls", "refusal"}),
    "tool": frozenset({"role", "content", "tool_call_id"}),
}
_ROLES_TEXT = "'system', 'assistant', 'user', 'function', 'tool', and 'developer'"
_FUNCTION_NAME = re.compile(r"^[a-zA-Z0-9_-]+$")
_EMBEDDING_FIELDS = frozenset({"model", "input", "encoding_format", "dimensions", "user"})


def _param_error(message: str, param: str, code: str | None = None) -> OpenAIHttpError:
    return OpenAIHttpError(400, message, param=param, code=code)


def _required(obj: Mapping[str, Any], field: str, where: str) -> Any:
    if field not in obj:
        name = f"{where}.{field}" if where else field
        raise _param_error(
            f"Missing required parameter: '{name}'.", name, "missing_required_parameter"
        )
    return obj[field]


def _type_error(name: str, expected: str, value: Any) -> OpenAIHttpError:
    got = {
        dict: "an object",
        list: "an array",
        str: "a string",
        bool: "a boolean",
        type(None): "null",
    }.get(type(value), "a number")
    return _param_error(
        f"Invalid type for '{name}': expected {expected}, but got {got} instead.",
        name,
        "invalid_type",
    )


def _check_unknown(obj: Mapping[str, Any], allowed: Collection[str], where: str = "") -> None:
    for key in obj:
        if key not in allowed:
            if not where:
                raise _param_error(f"Unrecognized request argument supplied: {key}", key)
            raise _param_error(
                f"Invalid '{where}': Additional properties are not allowed ('{key}' was "
                "unexpected).",
                where,
            )


def _check_content(message: Mapping[str, Any], where: str, *, nullable: bool) -> None:
    content = message.get("content")
    if content is None:
        if nullable:
            return
        raise _param_error(
            "Invalid value for 'content': expected a string, got null.", f"{where}.content"
        )
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise _type_error(f"{where}.content", "one of a string or array of objects", content)
    allowed = (
        ("text",) if message["role"] != "user" else ("text", "image_url", "input_audio", "file")
    )
    for k, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in allowed:
            raise _param_error(
                f"Invalid value for '{where}.content[{k}].type': expected one of "
                f"{', '.join(repr(a) for a in allowed)}.",
                f"{where}.content[{k}].type",
                "invalid_value",
            )
        if part["type"] == "text":
            text = _required(part, "text", f"{where}.content[{k}]")
            if not isinstance(text, str):
                raise _type_error(f"{where}.content[{k}].text", "a string", text)


def _check_tool_calls(calls: Any, where: str) -> list[str]:
    if not isinstance(calls, list):
        raise _type_error(f"{where}.tool_calls", "an array", calls)
    if not calls:
        raise _param_error(
            f"Invalid '{where}.tool_calls': empty array. Expected an array with minimum length "
            "1, but got an empty array instead.",
            f"{where}.tool_calls",
            "empty_array",
        )
    ids = []
    for k, call in enumerate(calls):
        at = f"{where}.tool_calls[{k}]"
        if not isinstance(call, dict):
            raise _type_error(at, "an object", call)
        _check_unknown(call, ("id", "type", "function"), at)
        call_id = _required(call, "id", at)
        if _required(call, "type", at) != "function":
            raise _param_error(
                f"Invalid value: '{call['type']}'. Supported values are: 'function' and 'custom'.",
                f"{at}.type",
                "invalid_value",
            )
        function = _required(call, "function", at)
        if not isinstance(function, dict):
            raise _type_error(f"{at}.function", "an object", function)
        _check_unknown(function, ("name", "arguments"), f"{at}.function")
        if not isinstance(_required(function, "name", f"{at}.function"), str):
            raise _type_error(f"{at}.function.name", "a string", function["name"])
        arguments = _required(function, "arguments", f"{at}.function")
        if not isinstance(arguments, str):
            raise _type_error(f"{at}.function.arguments", "a string", arguments)
        if not isinstance(call_id, str):
            raise _type_error(f"{at}.id", "a string", call_id)
        ids.append(call_id)
    return ids


def check_chat_messages(messages: Any) -> None:
    """Roles, content, and assistant tool_calls answered by the tool messages right after."""
    if not isinstance(messages, list):
        raise _type_error("messages", "an array", messages)
    if not messages:
        raise _param_error(
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but got "
            "an empty array instead.",
            "messages",
            "empty_array",
        )
    pending: list[str] = []  # tool_call ids of the last assistant message not yet answered
    open_index = -1
    answerable: set[str] = set()
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise _type_error(where, "an object", message)
        role = _required(message, "role", where)
        if role not in _MESSAGE_FIELDS:
            raise _param_error(
                f"Invalid value: '{role}'. Supported values are: {_ROLES_TEXT}.",
                f"{where}.role",
                "invalid_value",
            )
        _check_unknown(message, _MESSAGE_FIELDS[role], where)
        if role != "tool" and pending:
            raise _param_error(
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(pending)}",
                f"messages.[{open_index}].role",
            )
        if role == "tool":
            tool_call_id = _required(message, "tool_call_id", where)
            _required(message, "content", where)
            _check_content(message, where, nullable=False)
            if tool_call_id not in answerable:
                raise _param_error(
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'.",
                    f"messages.[{i}].role",
                )
            answerable.discard(tool_call_id)
            if tool_call_id in pending:
                pending.remove(tool_call_id)
            continue
        answerable = set()
        if role == "assistant":
            calls = message.get("tool_calls")
            if calls is not None:
                pending = _check_tool_calls(calls, where)
                answerable, open_index = set(pending), i
            _check_content(message, where, nullable=bool(pending))
        else:
            _required(message, "content", where)
            _check_content(message, where, nullable=False)
    if pending:
        raise _param_error(
            "An assistant message with 'tool_calls' must be followed by tool messages "
            "responding to each 'tool_call_id'. The following tool_call_ids did not have "
            f"response messages: {', '.join(pending)}",
            f"messages.[{open_index}].role",
        )


def check_function_tools(tools: Any) -> list[str]:
    """The function names, after validating each tool."""
    if not isinstance(tools, list):
        raise _type_error("tools", "an array", tools)
    if not tools:
        raise _param_error(
            "Invalid 'tools': empty array. Expected an array with minimum length 1, but got an "
            "empty array instead.",
            "tools",
            "empty_array",
        )
    names = []
    for k, tool in enumerate(tools):
        at = f"tools[{k}]"
        if not isinstance(tool, dict):
            raise _type_error(at, "an object", tool)
        _check_unknown(tool, ("type", "function"), at)
        if _required(tool, "type", at) != "function":
            raise _param_error(
                f"Invalid value: '{tool['type']}'. Supported values are: 'function' and 'custom'.",
                f"{at}.type",
                "invalid_value",
            )
        function = _required(tool, "function", at)
        if not isinstance(function, dict):
            raise _type_error(f"{at}.function", "an object", function)
        _check_unknown(function, ("name", "description", "parameters", "strict"), f"{at}.function")
        name = _required(function, "name", f"{at}.function")
        if not isinstance(name, str):
            raise _type_error(f"{at}.function.name", "a string", name)
        if len(name) > 64:
            raise _param_error(
                f"Invalid '{at}.function.name': string too long. Expected a string with maximum "
                f"length 64, but got a string with length {len(name)} instead.",
                f"{at}.function.name",
                "string_above_max_length",
            )
        if not _FUNCTION_NAME.match(name):
            raise _param_error(
                f"Invalid '{at}.function.name': string does not match pattern. Expected a "
                "string that matches the pattern '^[a-zA-Z0-9_-]+$'.",
                f"{at}.function.name",
                "invalid_value",
            )
        if "description" in function and not isinstance(function["description"], str):
            raise _type_error(f"{at}.function.description", "a string", function["description"])
        parameters = function.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(parameters, dict) or parameters.get("type") != "object":
            got = parameters.get("type") if isinstance(parameters, dict) else parameters
            raise _param_error(
                f"Invalid schema for function '{name}': schema must be a JSON Schema of "
                f"'type: \"object\"', got 'type: \"{got}\"'.",
                f"{at}.function.parameters",
                "invalid_function_parameters",
            )
        names.append(name)
    return names


def check_chat_body(body: Any, models: Collection[str] | None) -> list[str] | None:
    """Validate a chat completions body; the offered function names (None without tools)."""
    if not isinstance(body, dict):
        raise OpenAIHttpError(400, "The request body must be a JSON object.")
    _check_unknown(body, _CHAT_FIELDS)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise OpenAIHttpError(400, "you must provide a model parameter")
    check_chat_messages(_required(body, "messages", ""))
    names = check_function_tools(body["tools"]) if "tools" in body else None
    if "max_tokens" in body and "max_completion_tokens" in body:
        raise _param_error(
            "Setting 'max_tokens' and 'max_completion_tokens' at the same time is not supported.",
            "max_tokens",
        )
    for field in ("max_tokens", "max_completion_tokens"):
        value = body.get(field)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise _type_error(field, "an integer", value)
        if value < 1:
            raise _param_error(
                f"Invalid '{field}': integer below minimum value. Expected a value >= 1, but "
                f"got {value} instead.",
                field,
                "integer_below_min_value",
            )
    if body.get("n", 1) != 1:
        raise _param_error("the fake supports only n=1", "n")
    if not isinstance(body.get("stream", False), bool):
        raise _type_error("stream", "a boolean", body["stream"])
    options = body.get("stream_options")
    if options is not None:
        if body.get("stream") is not True:
            raise _param_error(
                "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                "stream_options",
            )
        if not isinstance(options, dict):
            raise _type_error("stream_options", "an object", options)
        _check_unknown(options, ("include_usage", "include_obfuscation"), "stream_options")
        for key, value in options.items():
            if not isinstance(value, bool):
                raise _type_error(f"stream_options.{key}", "a boolean", value)
    choice = body.get("tool_choice")
    if choice is not None and names is None:
        raise _param_error(
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are "
            "specified.",
            "tool_choice",
        )
    if models is not None and model not in models:
        raise OpenAIHttpError(
            404,
            f"The model `{model}` does not exist or you do not have access to it.",
            code="model_not_found",
        )
    return names


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


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

    def __init__(
        self,
        api_key: str = DEFAULT_API_KEY,
        *,
        chat_models: Collection[str] | None = None,
        embedding_models: Mapping[str, int] = EMBEDDING_MODELS,
    ) -> None:
        self.api_key = api_key
        self.base_url = ""  # http://127.0.0.1:<port>/v1 once serving
        self.calls: list[Call] = []
        self.default_transcript = ScriptedTranscript("hello from the fake", 2.0)
        self._transcripts: deque[ScriptedTranscript] = deque()
        self.chat_models = None if chat_models is None else frozenset(chat_models)
        self.embedding_models = dict(embedding_models)
        self.default_chat_text = "Hello from the fake chat model."
        self._chat_replies: deque[ChatReply] = deque()
        self._pinned: dict[tuple[str, str], tuple[float, ...]] = {}
        self._word_vectors: dict[tuple[int, str], tuple[float, ...]] = {}
        self._failures: dict[str, deque[Failure]] = {}
        self._request_ids = itertools.count(1)
        #: pacing of chat answers (streamed or not); the latency bench sets 0.8 s and 60/s
        self.timing = StreamTiming()
        #: what images the chat model takes (``images.supported = False``: text-only)
        self.images = ImageRules()
        #: play a server that ignores ``stream_options.include_usage`` (no usage chunk)
        self.ignore_include_usage = False
        #: play a server that knows no ``stream_options`` (older vLLM and llama.cpp builds):
        #: a request carrying it is a 400 naming the field
        self.rejects_stream_options = False
        #: play a server that puts the usage on its last choice chunk, asked or not (llama.cpp)
        self.usage_on_finish = False
        self.app = self._build_app()

    # --- scripting and inspection --------------------------------------------------------------

    def queue_transcript(
        self, text: str, *, duration: float | None = None, language: str = "english"
    ) -> None:
        """The next successful transcription returns ``text`` (FIFO; then the default)."""
        self._transcripts.append(ScriptedTranscript(text, duration, language))

    def queue_chat_reply(self, reply: ChatReply) -> None:
        """The next successful chat completion answers ``reply`` (FIFO; then default text)."""
        self._chat_replies.append(reply)

    def queue_chat_text(
        self,
        text: str,
        *,
        finish_reason: str = "stop",
        prompt_tokens: int | None = None,
        completion_tokens: int | None = None,
    ) -> None:
        """A plain text chat answer."""
        self.queue_chat_reply(ChatReply(text, (), finish_reason, prompt_tokens, completion_tokens))

    def queue_tool_calls(
        self,
        calls: Sequence[tuple[str, Mapping[str, Any] | str]],
        *,
        text: str | None = None,
        finish_reason: str = "tool_calls",
        prompt_tokens: int | None = None,
        completion_tokens: int | None = None,
    ) -> list[str]:
        """An answer calling ``calls`` ((name, arguments) pairs; a str is sent verbatim as the
        arguments, e.g. broken JSON); the tool_call ids."""
        scripted = tuple(
            ScriptedToolCall(
                "call_" + secrets.token_hex(12),
                name,
                args if isinstance(args, str) else json.dumps(dict(args)),
            )
            for name, args in calls
        )
        reply = ChatReply(text, scripted, finish_reason, prompt_tokens, completion_tokens)
        self.queue_chat_reply(reply)
        return [c.id for c in scripted]

    def set_embedding(self, model: str, text: str, vector: Sequence[float]) -> None:
        """Pin the vector ``model`` returns for ``text`` (its length must be the model's)."""
        if len(vector) != self.embedding_models[model]:
            raise ValueError(f"{model} vectors have {self.embedding_models[model]} dimensions")
        self._pinned[(model, text)] = tuple(float(x) for x in vector)

    def embedding_vector(self, model: str, text: str, dimensions: int | None = None) -> list[float]:
        """The vector the fake returns for ``text`` (what a test can compare against)."""
        native = self.embedding_models[model]
        full = self._pinned.get((model, text)) or self._bag_of_words(native, text)
        vector = list(full[: dimensions or native])
        norm = math.sqrt(sum(x * x for x in vector)) or 1.0
        return [x / norm for x in vector]

    def _bag_of_words(self, dims: int, text: str) -> tuple[float, ...]:
        words = re.findall(r"\w+", text.lower()) or [text]
        total = [0.0] * dims
        for word in words:
            key = (dims, word)
            if key not in self._word_vectors:
                seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "big")
                rng = random.Random(seed)
                self._word_vectors[key] = tuple(rng.gauss(0.0, 1.0) for _ in range(dims))
            for i, x in enumerate(self._word_vectors[key]):
                total[i] += x
        return tuple(total)

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
        self._route(app, "/v1/chat/completions", CHAT_COMPLETIONS, self._chat_completions)
        self._route(app, "/v1/embeddings", EMBEDDINGS, self._embeddings)

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

    async def scripted(self, endpoint: str, call: Call) -> StreamFault | None:
        """Apply the next scripted failure of ``endpoint`` (raise it, or sleep for a slow one);
        a stream fault is returned for the endpoint to play."""
        queue = self._failures.get(endpoint)
        failure = queue.popleft() if queue else None
        if failure is None:
            return None
        if failure.kind == "stream":
            return failure.fault
        if failure.kind == "slow":
            await trio.sleep(failure.delay)
            return None
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

    # --- JSON endpoints ------------------------------------------------------------------------

    @staticmethod
    def json_body(call: Call) -> Any:
        """The request's JSON body (400 unless ``application/json`` and valid JSON)."""
        ctype = request.headers.get("content-type", "")
        if not ctype.lower().startswith("application/json"):
            raise OpenAIHttpError(
                400,
                f"Invalid Content-Type header ({ctype or 'none'}), expected application/json.",
            )
        try:
            return json.loads(call.data)
        except ValueError:
            raise OpenAIHttpError(
                400,
                "We could not parse the JSON body of your request. (HINT: This likely means "
                "you aren't using your HTTP library correctly. The OpenAI API expects a JSON "
                "payload, but what was sent was not valid JSON.)",
            ) from None

    def _record_json(self, call: Call, body: Any) -> None:
        if isinstance(body, dict):
            call.params = {k: v for k, v in body.items() if k != "model"}
            model = body.get("model")
            call.model = model if isinstance(model, str) else None

    # --- POST /v1/chat/completions -------------------------------------------------------------

    async def _chat_completions(self, call: Call) -> Response:
        call.data = await request.get_data(True, False, False)
        body = self.json_body(call)
        self._record_json(call, body)
        if self.rejects_stream_options and isinstance(body, dict) and "stream_options" in body:
            raise OpenAIHttpError(
                400,
                "[{'type': 'extra_forbidden', 'loc': ('body', 'stream_options'), 'msg': "
                "'Extra inputs are not permitted', 'input': " + repr(body["stream_options"]) + "}]",
                type="BadRequestError",
            )
        names = check_chat_body(body, self.chat_models)
        try:
            self.images.check_openai(body["messages"])
        except ImageRejected as exc:
            raise _param_error(exc.message, exc.param or "messages", exc.code) from None
        streamed = body.get("stream") is True
        fault = await self.scripted(CHAT_COMPLETIONS, call)
        if fault is not None and not streamed:
            raise OpenAIHttpError(500, "fake: a stream failure for a request without stream")
        reply = self._chat_replies.popleft() if self._chat_replies else None
        if reply is None:
            reply = ChatReply(self.default_chat_text)
        for tool_call in reply.tool_calls:
            if tool_call.name not in (names or ()):
                raise OpenAIHttpError(
                    500,
                    f"fake: scripted tool call {tool_call.name!r} is not among the request's "
                    f"tools {names}",
                    type="server_error",
                )
        message: dict[str, Any] = {
            "role": "assistant",
            "content": reply.text,
            "refusal": None,
            "annotations": [],
        }
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in reply.tool_calls
            ]
        prompt = reply.prompt_tokens
        if prompt is None:
            prompt = _tokens(json.dumps([body["messages"], body.get("tools")]))
        completion = reply.completion_tokens
        if completion is None:
            completion = _tokens(json.dumps(message))
        payload = {
            "id": "chatcmpl-" + secrets.token_urlsafe(21),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": reply.finish_reason,
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
                **(
                    {}
                    if reply.cached_tokens is None
                    else {"prompt_tokens_details": {"cached_tokens": reply.cached_tokens}}
                ),
            },
            "service_tier": "default",
            "system_fingerprint": "fp_fake0000",
        }
        options = dict(body.get("stream_options") or {})
        if self.ignore_include_usage:
            options.pop("include_usage", None)
        items = stream_body(payload, options, fault, usage_on_finish=self.usage_on_finish)
        if streamed:
            return Response(
                send_stream(call, items, self.timing),
                content_type="text/event-stream; charset=utf-8",
            )
        await trio.sleep_until(self.timing.at(call.time, pieces_in(items)))
        return Response(json.dumps(payload), content_type="application/json")

    # --- POST /v1/embeddings -------------------------------------------------------------------

    async def _embeddings(self, call: Call) -> Response:
        call.data = await request.get_data(True, False, False)
        body = self.json_body(call)
        self._record_json(call, body)
        if not isinstance(body, dict):
            raise OpenAIHttpError(400, "The request body must be a JSON object.")
        _check_unknown(body, _EMBEDDING_FIELDS)
        texts = self._check_input(_required(body, "input", ""))
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise OpenAIHttpError(400, "you must provide a model parameter")
        if model not in self.embedding_models:
            raise OpenAIHttpError(
                404,
                f"The model `{model}` does not exist or you do not have access to it.",
                code="model_not_found",
            )
        dimensions = self._check_dimensions(model, body.get("dimensions"))
        fmt = body.get("encoding_format", "float")
        if fmt not in ("float", "base64"):
            raise _param_error(
                f"Invalid value: '{fmt}'. Supported values are: 'float' and 'base64'.",
                "encoding_format",
                "invalid_value",
            )
        await self.scripted(EMBEDDINGS, call)
        data = []
        for index, text in enumerate(texts):
            vector = self.embedding_vector(model, text, dimensions)
            encoded: Any = vector
            if fmt == "base64":
                encoded = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        tokens = sum(_tokens(t) for t in texts)
        payload = {
            "object": "list",
            "data": data,
            "model": model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        return Response(json.dumps(payload), content_type="application/json")

    @staticmethod
    def _check_input(value: Any) -> list[str]:
        invalid = OpenAIHttpError(
            400,
            "'$.input' is invalid. Please check the API reference: "
            "https://platform.openai.com/docs/api-reference.",
        )
        texts = [value] if isinstance(value, str) else value
        if not isinstance(texts, list) or not texts:
            raise invalid
        if len(texts) > MAX_EMBEDDING_INPUTS:
            raise _param_error(
                f"Invalid 'input': array too long. Expected an array with maximum length "
                f"{MAX_EMBEDDING_INPUTS}, but got an array with length {len(texts)} instead.",
                "input",
                "array_above_max_length",
            )
        for text in texts:
            if not isinstance(text, str) or not text:
                raise invalid
            if _tokens(text) > MAX_EMBEDDING_TOKENS:
                raise OpenAIHttpError(
                    400,
                    f"This model's maximum context length is {MAX_EMBEDDING_TOKENS} tokens, "
                    f"however you requested {_tokens(text)} tokens ({_tokens(text)} in your "
                    "prompt; 0 for the completion). Please reduce your prompt; or completion "
                    "length.",
                )
        return texts

    def _check_dimensions(self, model: str, value: Any) -> int | None:
        if value is None:
            return None
        if not model.startswith("text-embedding-3"):
            raise _param_error("This model does not support specifying dimensions.", "dimensions")
        if not isinstance(value, int) or isinstance(value, bool):
            raise _type_error("dimensions", "an integer", value)
        native = self.embedding_models[model]
        if not 1 <= value <= native:
            raise _param_error(
                f"Invalid 'dimensions': expected a value between 1 and {native}, got {value}.",
                "dimensions",
                "invalid_value",
            )
        return value


@asynccontextmanager
async def run_fake_openai(
    api_key: str = DEFAULT_API_KEY,
    *,
    chat_models: Collection[str] | None = None,
    embedding_models: Mapping[str, int] = EMBEDDING_MODELS,
) -> AsyncIterator[FakeOpenAI]:
    """Serve a fresh FakeOpenAI on 127.0.0.1 (free port) for the duration of the block."""
    fake = FakeOpenAI(api_key, chat_models=chat_models, embedding_models=embedding_models)
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
