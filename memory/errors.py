"""Errors raised by the memory package (LLM providers, and the memory domain's own failures).

LLM errors never chain the SDK exception (``__cause__``/``__context__`` are None): SDK errors
hold the HTTP request, whose headers carry the API key. Their messages are scrubbed of the key.
"""

from __future__ import annotations

from typing import Any, ClassVar

from runtime.errors import EngramError

# --- LLM providers ------------------------------------------------------------------------------


class LLMError(EngramError):
    """A chat-completion call failed; ``retryable`` says whether trying again later may help.

    ``status`` is the HTTP status (None for timeouts and connection failures), ``error_type``
    the provider's error type (``rate_limit_error``, ``overloaded_error``...), ``retry_after``
    the server's requested wait in seconds, if any.
    """

    retryable: ClassVar[bool] = False

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        model: str,
        status: int | None = None,
        error_type: str | None = None,
        request_id: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.provider = provider
        self.model = model
        self.status = status
        self.error_type = error_type
        self.request_id = request_id
        self.retry_after = retry_after


class LLMRateLimited(LLMError):
    """HTTP 429: too many requests or tokens; wait ``retry_after`` seconds (when given)."""

    retryable = True


class LLMOverloaded(LLMError):
    """HTTP 529: the provider is overloaded (Anthropic's ``overloaded_error``)."""

    retryable = True


class LLMTimeout(LLMError):
    """No answer within the request timeout (or HTTP 408)."""

    retryable = True


class LLMUnavailable(LLMError):
    """HTTP 5xx, or the endpoint could not be reached (connection refused, reset, DNS)."""

    retryable = True


class LLMRequestError(LLMError):
    """HTTP 4xx other than 408/429: our request (or key, or quota) is wrong; retrying won't help."""


class LLMInvalidResponse(LLMError):
    """The provider answered 200 with something unusable (no choices, tool arguments not JSON).

    The call was billed and logged as ok; a retry may well produce a usable answer.
    """

    retryable = True


class ExtractionInvalid(EngramError):
    """The model's answer is not a valid extraction; ``reason`` says where and why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class EmbeddingError(EngramError):
    """Texts could not be embedded; ``retryable`` when trying again later may succeed."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class ToolError(Exception):
    """An error the model should see (bad input, entry not found, ...)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def payload(self) -> dict[str, Any]:
        body: dict[str, Any] = {"error": self.message}
        if self.field is not None:
            body["field"] = self.field
        return body


class JournalFormatError(EngramError):
    """The file cannot be read, or is not a Day One JSON export."""


class MalformedEntry(ValueError):
    """One entry cannot be imported; the message says why."""


class SnapshotError(EngramError):
    """A memory snapshot cannot be imported: ``path`` is the JSON path of the first problem
    (``$.patterns[3].confidence``), ``problem`` what is wrong there."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem
