"""Structured logging: JSON lines when stderr is not a TTY, a console renderer otherwise.

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
    """Configure structlog (and route stdlib logging through the same output)."""
    out = stream if stream is not None else sys.stderr
    json_lines = fmt == "json" or (fmt == "auto" and not out.isatty())
    scrubber = SecretScrubber(secrets)
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        scrubber,
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if json_lines
        else structlog.dev.ConsoleRenderer(colors=out.isatty())
    )
    structlog.configure(
        processors=[*processors, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level)),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
    # Libraries that use stdlib logging (hypercorn, asyncpg) go to the same stream, scrubbed.
    handler = logging.StreamHandler(out)
    handler.setFormatter(_ScrubbingFormatter(scrubber))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(logging.getLevelName(level), logging.INFO))
    for noisy in ("httpx", "httpcore", "hpack"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


class _ScrubbingFormatter(logging.Formatter):
    def __init__(self, scrubber: SecretScrubber) -> None:
        super().__init__("%(levelname)s %(name)s: %(message)s")
        self._scrubber = scrubber

    def format(self, record: logging.LogRecord) -> str:
        return self._scrubber.scrub(super().format(record))


def get_logger(name: str | None = None) -> Any:
    """A structlog logger (bound lazily, so configure_logging may run later)."""
    return structlog.get_logger(name)
