"""Structured logging: JSON lines when stderr is not a TTY, a console renderer otherwise.

Every record goes through structlog's processors, those of the libraries using stdlib logging
included (see :func:`configure_logging`).

Secrets are scrubbed from every event by a processor that knows the configured secret values,
so a token that slips into an exception message or a URL still never reaches the output.
Actors bind ``chat_id`` with ``structlog.contextvars.bound_contextvars``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, MutableMapping
from typing import Any, TextIO

import structlog
import structlog.stdlib

from runtime.progress import write_line

REDACTED = "[REDACTED]"


class SecretScrubber:
    """structlog processor replacing every known secret value inside the event with REDACTED."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets = sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True)

    def scrub(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def _clean(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.scrub(value)
        if isinstance(value, dict):
            return {k: self._clean(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self._clean(v) for v in value)
        return value

    def __call__(
        self, logger: Any, method: str, event: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        if not self._secrets:
            return event
        return {k: self._clean(v) for k, v in event.items()}


def configure_logging(
    level: str = "INFO",
    fmt: str = "auto",
    secrets: Iterable[str] = (),
    stream: TextIO | None = None,
) -> None:
    """Configure structlog, and route every stdlib logging record through the same processors.

    Records of libraries that log with :mod:`logging` (httpx, hypercorn, asyncpg, the SDKs)
    and Python warnings are rendered by structlog's ``ProcessorFormatter``: with JSON output
    every line of stderr is a JSON object, with the logger's name under ``logger``. Lines are
    written through :func:`runtime.progress.write_line`, so a progress bar being drawn on the
    same terminal is cleared first and redrawn after. Chatty libraries (one INFO line per
    request) stay at WARNING unless ``level`` is DEBUG.
    """
    out = stream if stream is not None else sys.stderr
    json_lines = fmt == "json" or (fmt == "auto" and not _isatty(out))
    scrubber = SecretScrubber(secrets)
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if json_lines
        else structlog.dev.ConsoleRenderer(colors=_isatty(out))
    )
    numeric = logging.getLevelName(level)
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, scrubber, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=LineLoggerFactory(out),
        cache_logger_on_first_use=False,
    )
    handler = LineHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                scrubber,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(numeric, logging.INFO))  # libraries' DEBUG records are never wanted
    for noisy in NOISY_LOGGERS:
        logging.getLogger(noisy).setLevel(logging.INFO if level == "DEBUG" else logging.WARNING)
    logging.captureWarnings(True)  # warnings.warn(...) becomes a record like any other


#: Libraries that log every request at INFO: quiet unless LOG_LEVEL=DEBUG.
NOISY_LOGGERS = ("httpx", "httpcore", "hpack", "openai", "anthropic")


class LineLogger:
    """structlog's output: one rendered event per line, through :func:`write_line`."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def msg(self, message: str) -> None:
        write_line(self._stream, message)

    log = debug = info = warn = warning = err = error = critical = exception = fatal = msg


class LineLoggerFactory:
    """Builds the :class:`LineLogger` of every structlog logger (one stream for all)."""

    def __init__(self, stream: TextIO) -> None:
        self._logger = LineLogger(stream)

    def __call__(self, *args: Any) -> LineLogger:
        return self._logger


class LineHandler(logging.Handler):
    """The stdlib handler: formats a record (ProcessorFormatter) and writes its line."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.stream = stream

    def emit(self, record: logging.LogRecord) -> None:
        try:
            write_line(self.stream, self.format(record))
        except Exception:  # logging must never take the process down
            self.handleError(record)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def get_logger(name: str | None = None) -> Any:
    """A structlog logger (bound lazily, so configure_logging may run later)."""
    return structlog.get_logger(name)


def log_this_one(count: int) -> bool:
    """Whether the ``count``-th occurrence (from 1) of a repeated event is logged: 1, 2, 4,
    8...; a flood of one event (a peer's doing) costs log lines logarithmic in its size."""
    return count > 0 and count & (count - 1) == 0
