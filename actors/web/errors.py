"""The JSON API's errors: each has an HTTP status and a stable ``code`` clients branch on
(``{"error": {"code": ..., "message": ...}}``); the message is for people and may change."""

from __future__ import annotations

from runtime.errors import EngramError

#: every code the API answers with, and its status (the OpenAPI document lists them)
CODES: dict[str, int] = {
    "bad_request": 400,
    "unauthorized": 401,
    "chat_forbidden": 403,
    "not_found": 404,
    "method_not_allowed": 405,
    "too_many_failures": 429,
    "internal": 500,
    "unavailable": 503,
}


class ApiError(EngramError):
    """An answer of the API other than success."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.status = CODES[code]
        self.message = message
