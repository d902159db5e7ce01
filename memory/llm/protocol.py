"""A provider-neutral chat interface for the tool-using agent (what the providers share around a
call is :mod:`memory.llm.provider_calls`).

The agent and the compactor speak :class:`Message`/:class:`ToolSpec`/:class:`Completion` to
an :class:`LLM`; :mod:`memory.llm.anthropic_provider` (Claude, Messages API) and
:mod:`memory.llm.openai_provider` (any OpenAI-compatible chat completions endpoint) translate.

Prompt caching: a system block (:class:`TextBlock`), a :class:`ToolSpec` or a :class:`Message`
may carry ``cache="5m"`` or ``cache="1h"``, a breakpoint after it: the request's prefix up to
there is to be cached for that long (Anthropic: a ``cache_control`` breakpoint, at most 4 a
request, 1-hour ones before 5-minute ones; OpenAI-compatible servers cache prefixes by
themselves and ignore the marks). ``system`` is a string or a sequence of text blocks.

Every call, ok or failed (or cancelled), is one ``api_usage`` row (seed 000, "API cost
tracking"): provider, the configured model, purpose, tokens, latency. Failures are
:mod:`memory.errors` classes; providers make no retries of their own (the SDKs' are off), so
the caller decides (guardrails, backoff, a reply to the user).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, Protocol

import attrs

Role = Literal["user", "assistant"]
StopReason = Literal["end_turn", "tool_use", "max_tokens"]
#: a prompt-cache breakpoint's lifetime (see the module docstring); None: no breakpoint
CacheTTL = Literal["5m", "1h"]

# --- neutral types ---------------------------------------------------------------------------


def _object(value: Mapping[str, Any]) -> dict[str, Any]:
    return dict(value)


def _cache_ttl(_: object, __: object, value: CacheTTL | None) -> None:
    if value not in (None, "5m", "1h"):
        raise ValueError(f"cache must be None, '5m' or '1h', got {value!r}")


@attrs.frozen
class TextBlock:
    """Plain text from the user or the model (or a part of the system prompt); ``cache``: a
    prompt-cache breakpoint after it."""

    text: str
    cache: CacheTTL | None = attrs.field(default=None, kw_only=True, validator=_cache_ttl)


@attrs.frozen
class ToolUseBlock:
    """The model asks for tool ``name`` with arguments ``input`` (a JSON object)."""

    id: str
    name: str
    input: Mapping[str, Any] = attrs.field(converter=_object)


@attrs.frozen
class ToolResultBlock:
    """Our answer to the tool call ``tool_use_id`` (sent in the next user message)."""

    tool_use_id: str
    content: str
    is_error: bool = False


@attrs.frozen
class ImageBlock:
    """An image the person sent (in a user message): its bytes and MIME type
    (``image/jpeg``, ``image/png``, ``image/gif`` or ``image/webp``)."""

    media_type: str
    data: bytes = attrs.field(repr=lambda data: f"<{len(data)} bytes>")


Block = TextBlock | ToolUseBlock | ToolResultBlock | ImageBlock


def _blocks(value: Iterable[Block | str]) -> tuple[Block, ...]:
    return tuple(TextBlock(b) if isinstance(b, str) else b for b in value)


@attrs.frozen
class Message:
    """One conversation turn; strings given as blocks become :class:`TextBlock`."""

    role: Role = attrs.field(validator=attrs.validators.in_(("user", "assistant")))
    blocks: tuple[Block, ...] = attrs.field(converter=_blocks)
    #: a prompt-cache breakpoint after the message's last block
    cache: CacheTTL | None = attrs.field(default=None, kw_only=True, validator=_cache_ttl)

    @classmethod
    def user(cls, *blocks: Block | str, cache: CacheTTL | None = None) -> Message:
        return cls("user", blocks, cache=cache)

    @classmethod
    def assistant(cls, *blocks: Block | str, cache: CacheTTL | None = None) -> Message:
        return cls("assistant", blocks, cache=cache)

    @property
    def text(self) -> str:
        return "".join(b.text for b in self.blocks if isinstance(b, TextBlock))


@attrs.frozen
class ToolSpec:
    """A tool offered to the model; ``input_schema`` is a JSON Schema with type ``object``."""

    name: str
    description: str
    input_schema: Mapping[str, Any] = attrs.field(converter=_object)
    #: a prompt-cache breakpoint after this tool (tools come first in the prompt)
    cache: CacheTTL | None = attrs.field(default=None, kw_only=True, validator=_cache_ttl)


System = str | Sequence[TextBlock]


def system_text(system: System) -> str:
    """The system prompt as one string (blocks joined by blank lines)."""
    if isinstance(system, str):
        return system
    return "\n\n".join(b.text for b in system if b.text.strip())


@attrs.frozen
class TokenUsage:
    """A call's tokens: ``input_tokens`` counts every prompt token, of which
    ``cache_read_tokens`` were read from the prompt cache and ``cache_write_tokens`` written to
    it (``cache_write_1h_tokens`` of those with the 1-hour TTL)."""

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cache_write_1h_tokens: int = 0


@attrs.frozen
class Completion:
    """The model's answer (always role assistant) and what it cost. ``input_tokens`` counts the
    whole prompt; ``cache_read_tokens``/``cache_write_tokens`` are the parts of it read from
    and written to the prompt cache."""

    blocks: tuple[Block, ...] = attrs.field(converter=_blocks)
    stop_reason: StopReason
    input_tokens: int
    output_tokens: int
    #: the model the provider says answered (may carry a date suffix)
    model: str
    cost_usd: float = 0.0
    latency_ms: float = 0.0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def text(self) -> str:
        return "".join(b.text for b in self.blocks if isinstance(b, TextBlock))

    @property
    def tool_uses(self) -> tuple[ToolUseBlock, ...]:
        return tuple(b for b in self.blocks if isinstance(b, ToolUseBlock))

    def as_message(self) -> Message:
        """The answer as the assistant turn to append to the conversation."""
        return Message("assistant", self.blocks)


# --- streaming --------------------------------------------------------------------------------


@attrs.frozen
class TextDelta:
    """A piece of the answer's text, as the model writes it."""

    text: str


@attrs.frozen
class ToolStarted:
    """The model began a call of tool ``name`` (its arguments follow)."""

    name: str


StreamEvent = TextDelta | ToolStarted
#: called (synchronously, never blocking) for each :data:`StreamEvent` of a streamed call
OnEvent = Callable[[StreamEvent], None]


class LLM(Protocol):
    """A chat model that can call tools."""

    async def complete(
        self,
        *,
        system: System,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        max_tokens: int,
        purpose: str,
        chat_id: int | None,
        on_event: OnEvent | None = None,
    ) -> Completion:
        """One model call; raises a :class:`memory.errors.LLMError` subclass on failure.
        ``on_event``: stream the answer, calling it for each :data:`StreamEvent`; the
        :class:`Completion` returned is the same as without it."""
        ...
