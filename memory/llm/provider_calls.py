"""What the providers share around a call: the wait a response asks for
(:func:`retry_after_seconds`), errors classified from a status, a transport failure or an SDK
exception, and :func:`call_and_record` (one call, its deadline and its ``api_usage`` row, also
when it fails or is cancelled). Used by :mod:`memory.llm.anthropic_provider` and
:mod:`memory.llm.openai_provider`; the types they translate are :mod:`memory.llm.protocol`'s.
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import attrs
import trio

from memory.errors import (
    LLMError,
    LLMInvalidResponse,
    LLMOverloaded,
    LLMRateLimited,
    LLMRequestError,
    LLMTimeout,
    LLMUnavailable,
)
from memory.llm.cost import RateTable
from memory.llm.protocol import (
    Completion,
    TokenUsage,
)
from memory.llm.streaming import StreamIncomplete
from memory.llm.usage import log_api_usage, scrub_error
from runtime.db import Queries
from runtime.logs import get_logger

log = get_logger(__name__)

#: seconds a cancelled call may still spend writing its usage row
CANCELLED_LOG_GRACE = 2.0


def retry_after_seconds(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """The wait a response asks for: ``retry-after-ms``, ``retry-after`` (seconds or date)."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        try:
            ms = float(raw_ms)
        except ValueError:
            ms = math.nan
        if math.isfinite(ms) and ms >= 0:
            return ms / 1000
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
        return max(0.0, seconds)
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


@attrs.frozen
class CallContext:
    """Who is calling what, for error messages and the usage row."""

    provider: str
    model: str
    secrets: tuple[str, ...]


def status_error(
    ctx: CallContext,
    status: int,
    *,
    error_type: str | None,
    message: str | None,
    request_id: str | None,
    headers: Mapping[str, str],
) -> LLMError:
    """The error for an HTTP error answer (429, 529, 408, 5xx, other 4xx)."""
    text = f"{ctx.provider} {ctx.model}: HTTP {status}"
    if error_type:
        text += f" {error_type}"
    if message:
        text += f": {message}"
    if request_id:
        text += f" (request {request_id})"
    kind: type[LLMError]
    if status == 429 and error_type != "insufficient_quota":
        kind = LLMRateLimited
    elif status == 529:
        kind = LLMOverloaded
    elif status == 408:
        kind = LLMTimeout
    elif status >= 500:
        kind = LLMUnavailable
    else:
        kind = LLMRequestError
    return kind(
        scrub_error(text, ctx.secrets),
        provider=ctx.provider,
        model=ctx.model,
        status=status,
        error_type=error_type,
        request_id=request_id,
        retry_after=retry_after_seconds(headers),
    )


def transport_error(ctx: CallContext, kind: type[LLMError], what: str) -> LLMError:
    """An error without an HTTP answer (timeout, connection failure), scrubbed."""
    return kind(
        scrub_error(f"{ctx.provider} {ctx.model}: {what}", ctx.secrets),
        provider=ctx.provider,
        model=ctx.model,
    )


def invalid_response(ctx: CallContext, what: str) -> LLMInvalidResponse:
    """The error for a 200 answer we cannot use."""
    return LLMInvalidResponse(
        scrub_error(f"{ctx.provider} {ctx.model}: invalid response: {what}", ctx.secrets),
        provider=ctx.provider,
        model=ctx.model,
    )


R = TypeVar("R")


async def call_and_record(
    db: Queries,
    ctx: CallContext,
    *,
    purpose: str,
    chat_id: int | None,
    rates: RateTable,
    send: Callable[[], Awaitable[R]],
    classify: Callable[[Exception], LLMError | None],
    usage: Callable[[R], TokenUsage | tuple[int, int]],
    parse: Callable[[R], Completion],
    partial: Callable[[], TokenUsage | None] | None = None,
) -> Completion:
    """Run one provider call and write its ``api_usage`` row, whatever the outcome.

    ``usage`` reads the tokens of an answer (a :class:`TokenUsage`, or ``(input, output)``
    without prompt caching); the completion carries its cache counts. ``classify`` turns an
    SDK exception into our error (None: not an SDK error, re-raised); ``parse`` may raise
    :class:`LLMInvalidResponse` (logged as ok: the call was billed). Our errors are raised
    outside the ``except`` block, so they carry no SDK exception.

    ``partial`` (streamed calls) gives the tokens used so far, or None before the server began
    answering. A call cancelled mid-stream is billed: its row is ok with error ``cancelled``
    and those tokens (priced); one that failed mid-stream records them unpriced (ok False).
    """

    async def record(**fields: Any) -> float:
        return await log_api_usage(
            db,
            provider=ctx.provider,
            model=ctx.model,
            purpose=purpose,
            chat_id=chat_id,
            rates=rates,
            secrets=ctx.secrets,
            **fields,
        )

    call_log = log.bind(provider=ctx.provider, model=ctx.model, purpose=purpose, chat_id=chat_id)
    started = trio.current_time()
    failure: LLMError | None = None
    try:
        raw = await send()
    except trio.Cancelled:
        so_far = partial() if partial is not None else None
        with trio.move_on_after(CANCELLED_LOG_GRACE, shield=True):
            await record(
                latency_ms=(trio.current_time() - started) * 1000,
                ok=so_far is not None,
                error="cancelled",
                **_token_fields(so_far),
            )
        if so_far is not None:
            call_log.info(
                "llm.call_cancelled",
                input_tokens=so_far.input_tokens,
                output_tokens=so_far.output_tokens,
            )
        raise
    except Exception as exc:
        failure = classify(exc)
        if failure is None:
            raise
    latency_ms = (trio.current_time() - started) * 1000
    if failure is not None:
        so_far = partial() if partial is not None else None
        await record(
            latency_ms=latency_ms, ok=False, error=failure.message, **_token_fields(so_far)
        )
        call_log.warning(
            "llm.call_failed",
            status=failure.status,
            error=failure.message,
            retry_after=failure.retry_after,
            latency_ms=round(latency_ms),
        )
        raise failure
    counted = usage(raw)
    tokens = counted if isinstance(counted, TokenUsage) else TokenUsage(*counted)
    input_tokens, output_tokens = tokens.input_tokens, tokens.output_tokens
    invalid: LLMInvalidResponse | None = None
    try:
        completion = parse(raw)
    except LLMInvalidResponse as exc:
        invalid = exc
    cost = await record(
        **_token_fields(tokens),
        latency_ms=latency_ms,
        error=None if invalid is None else invalid.message,
    )
    if invalid is not None:
        call_log.warning(
            "llm.invalid_response",
            error=invalid.message,
        )
        raise invalid
    call_log.info(
        "llm.call",
        provider=ctx.provider,
        model=ctx.model,
        purpose=purpose,
        chat_id=chat_id,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read_tokens=tokens.cache_read_tokens,
        cache_write_tokens=tokens.cache_write_tokens,
        cost_usd=cost,
        latency_ms=round(latency_ms),
        stop_reason=completion.stop_reason,
        tool_uses=len(completion.tool_uses),
    )
    return attrs.evolve(
        completion,
        cost_usd=cost,
        latency_ms=latency_ms,
        cache_read_tokens=tokens.cache_read_tokens,
        cache_write_tokens=tokens.cache_write_tokens,
    )


def _token_fields(tokens: TokenUsage | None) -> dict[str, int]:
    if tokens is None:
        return {}
    return {
        "input_tokens": tokens.input_tokens,
        "output_tokens": tokens.output_tokens,
        "cache_read_tokens": tokens.cache_read_tokens,
        "cache_write_tokens": tokens.cache_write_tokens,
        "cache_write_1h_tokens": tokens.cache_write_1h_tokens,
    }


#: an error sent inside a stream (HTTP status 200) -> the status it has outside one
STREAM_ERROR_STATUS: Mapping[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "rate_limit_exceeded": 429,
    "api_error": 500,
    "server_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


def stream_error(
    ctx: CallContext, *, error_type: str | None, message: str | None, request_id: str | None
) -> LLMError:
    """The error for an error event inside a 200 stream: classified as the same error outside
    a stream would be (an unknown type as a server error); ``status`` is that equivalent."""
    status = STREAM_ERROR_STATUS.get(error_type or "", 500)
    return status_error(
        ctx,
        status,
        error_type=error_type,
        message=f"{message or 'error'} (mid-stream)",
        request_id=request_id,
        headers={},
    )


@attrs.frozen
class SdkErrors:
    """An SDK's exception classes below the HTTP status ones, for :func:`classify_sdk_error`
    (the timeout class must be checked before the connection class it derives from)."""

    timeout: type[Exception]
    connection: type[Exception]
    validation: type[Exception]
    base: type[Exception]
    #: the HTTP library's own exceptions that an SDK lets out of a stream unwrapped
    raw_timeout: tuple[type[Exception], ...] = ()
    raw_transport: tuple[type[Exception], ...] = ()


def classify_sdk_error(ctx: CallContext, exc: Exception, sdk: SdkErrors) -> LLMError | None:
    """The one rule for an SDK's non-status errors: a timeout is :class:`LLMTimeout`, a
    connection failure :class:`LLMUnavailable`, a response the SDK could not validate an
    invalid response, any other SDK error :class:`LLMRequestError`; None for anything else."""
    message = str(getattr(exc, "message", exc))
    if isinstance(exc, StreamIncomplete):
        return transport_error(ctx, LLMUnavailable, f"stream ended early: {exc}")
    if isinstance(exc, (sdk.timeout, *sdk.raw_timeout)):
        return transport_error(ctx, LLMTimeout, "request timed out")
    if isinstance(exc, (sdk.connection, *sdk.raw_transport)):
        return transport_error(ctx, LLMUnavailable, f"connection failed: {message}")
    if isinstance(exc, sdk.validation):
        return invalid_response(ctx, message)
    if isinstance(exc, sdk.base):
        return transport_error(ctx, LLMRequestError, f"{type(exc).__name__}: {exc}")
    return None
