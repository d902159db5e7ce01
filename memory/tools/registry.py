"""The agent's tool framework: typed inputs, derived JSON Schema, validation, dispatch.

Each tool declares one ``@attrs.frozen`` input class. Field types (``str``, ``int``,
``float``, ``bool``, ``list[X]``/``tuple[X, ...]``, ``Literal[...]``, ``X | None``) and the
constraints in each field's metadata (built with :func:`spec`) are the single source of both
the JSON Schema sent to the model and the validation of what the model sends back::

    @attrs.frozen
    class LogWeightInput:
        weight_kg: float = attrs.field(metadata=spec(exclusive_minimum=0, description="kg"))
        date: str | None = attrs.field(default=None, metadata=date_spec("YYYY-MM-DD"))

:meth:`ToolRegistry.call` never raises for anything the model can get wrong: an unknown tool,
invalid input, a :class:`ToolError` raised by the handler or an unexpected exception all
become a :class:`ToolOutcome` with ``is_error=True`` and a JSON ``{"error": ..., "field": ...}``
body the model can read and correct. Cancellation still propagates.
"""

from __future__ import annotations

import inspect
import json
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Generic, Protocol, TypeAlias, TypeVar
from uuid import UUID
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs
import numpy as np
import numpy.typing as npt

from memory.errors import ToolError
from memory.tools.schema import (
    json_schema,
    parse_input,
)
from runtime.db import Queries
from runtime.logs import get_logger

log = get_logger(__name__)

__all__ = [
    "Confirmations",
    "QueryEmbedder",
    "Tool",
    "ToolContext",
    "ToolOutcome",
    "ToolRegistry",
    "to_json",
    "tool",
]

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

# --- context ---------------------------------------------------------------------------------


class Confirmations(Protocol):
    """Asks the person to confirm what the model may not do on its own (issue 20, row 6): the
    person gets the buttons of ``/forget`` (or a supersede's [Confirm]/[Keep]) and only a tap
    acts. Implemented by the chat (:mod:`actors.chat.model_asks`); the tool only asks."""

    async def ask_forget(self, ids: Sequence[int]) -> None: ...

    async def ask_supersede(self, old: int, new: int) -> None: ...


class Reminders(Protocol):
    """Creates the one-shot reminders the model promises (``schedule_reminder``): implemented
    by the scheduler (:class:`actors.chat.proactive_commands.ChatReminders`, same code as
    ``/remind``). ``when`` in the person's words; the result carries the confirmed local time.
    Raises :class:`~memory.errors.ToolError` when ``when`` is no time in the future."""

    async def schedule(self, when: str, what: str, now: datetime) -> Mapping[str, str]: ...


class QueryEmbedder(Protocol):
    """What the tools need of ``memory.embeddings.providers.Embedder`` (unit-normalised vectors)."""

    @property
    def model(self) -> str: ...

    @property
    def dims(self) -> int: ...

    async def embed(
        self, texts: list[str], *, purpose: str, chat_id: int | None = None
    ) -> Sequence[npt.NDArray[Any]]: ...


def _valid_timezone(_: object, __: object, value: str) -> None:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown time zone {value!r}") from exc


def _aware(_: object, __: object, value: datetime) -> None:
    if value.tzinfo is None:
        raise ValueError("ToolContext.now must be timezone-aware")


@attrs.frozen(kw_only=True)
class ToolContext:
    """Everything a tool handler may use; ``now`` is injected so tools are deterministic."""

    db: Queries
    embedder: QueryEmbedder | None
    chat_id: int
    timezone: str = attrs.field(validator=_valid_timezone)
    now: datetime = attrs.field(validator=_aware)
    #: how the model asks the person before forgetting or superseding (None: it cannot)
    confirm: Confirmations | None = None
    #: how the model sets a reminder it promised (None: it cannot)
    reminders: Reminders | None = None

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    @property
    def today(self) -> date:
        """Today's date in the context time zone."""
        return self.now.astimezone(self.tz).date()


# --- tools and registry -----------------------------------------------------------------------


In = TypeVar("In")

Handler: TypeAlias = Callable[[ToolContext, In], Awaitable[object]]


@attrs.frozen
class Tool(Generic[In]):
    """One tool: name, description for the model, typed input and handler."""

    name: str
    description: str
    input_type: type[In]
    handler: Handler[In]

    def __attrs_post_init__(self) -> None:
        if not TOOL_NAME.match(self.name):
            raise ValueError(f"invalid tool name {self.name!r}")
        json_schema(self.input_type)  # fail at definition time on unsupported types

    def spec(self) -> dict[str, Any]:
        """``{name, description, input_schema}`` as the Anthropic API expects it."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": json_schema(self.input_type),
        }


def tool(
    into: list[Tool[Any]], name: str, input_type: type[In]
) -> Callable[[Handler[In]], Handler[In]]:
    """Decorator: append the handler to ``into`` as a tool described by its docstring
    (lines of a paragraph joined)."""

    def register(handler: Handler[In]) -> Handler[In]:
        text = re.sub(r"(?<!\n)\n(?!\n)", " ", inspect.cleandoc(handler.__doc__ or ""))
        into.append(Tool(name, text, input_type, handler))
        return handler

    return register


@attrs.frozen
class ToolOutcome:
    """A tool result for the model: JSON text, and whether it is an error."""

    content: str
    is_error: bool = False


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, np.generic):
        return value.item()
    if attrs.has(type(value)):
        return attrs.asdict(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def to_json(value: object) -> str:
    """Compact JSON text (UTF-8 kept) of a tool result."""
    return json.dumps(value, ensure_ascii=False, default=_json_default, separators=(",", ":"))


def _error(payload: Mapping[str, Any]) -> ToolOutcome:
    return ToolOutcome(to_json(dict(payload)), is_error=True)


class ToolRegistry:
    """The tools offered to the model, by name."""

    def __init__(self, tools: Iterable[Tool[Any]]) -> None:
        self._specs: list[dict[str, Any]] | None = None
        self._tools: dict[str, Tool[Any]] = {}
        for t in tools:
            if t.name in self._tools:
                raise ValueError(f"duplicate tool name {t.name!r}")
            self._tools[t.name] = t

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def names(self) -> list[str]:
        return list(self._tools)

    def get(self, name: str) -> Tool[Any] | None:
        return self._tools.get(name)

    def specs(self) -> list[dict[str, Any]]:
        """The tool definitions for the model, in registration order (built once: every
        turn sends them; treat them as read-only)."""
        if self._specs is None:
            self._specs = [t.spec() for t in self._tools.values()]
        return list(self._specs)

    async def call(self, name: str, raw_input: object, ctx: ToolContext) -> ToolOutcome:
        """Validate and run one tool call; every failure becomes an error outcome."""
        found = self._tools.get(name)
        if found is None:
            log.info("tool.unknown", tool=name, chat_id=ctx.chat_id)
            return _error({"error": f"unknown tool {name!r}", "tools": self.names()})
        started = time.monotonic()
        try:
            parsed = parse_input(found.input_type, raw_input)
            result = await found.handler(ctx, parsed)
            content = to_json(result)
        except ToolError as exc:
            log.info("tool.error", tool=name, chat_id=ctx.chat_id, error=exc.message)
            return _error(exc.payload())
        except Exception as exc:
            log.exception("tool.failed", tool=name, chat_id=ctx.chat_id)
            return _error({"error": f"tool {name} failed ({type(exc).__name__}); try again later"})
        log.info(
            "tool.ok",
            tool=name,
            chat_id=ctx.chat_id,
            ms=round((time.monotonic() - started) * 1000, 1),
            chars=len(content),
        )
        return ToolOutcome(content)
