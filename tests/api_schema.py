"""Check a JSON API answer against /api/v1/openapi.json (the operation's declared response)."""

from __future__ import annotations

import re
from typing import Any

from jsonschema import Draft202012Validator


def operation_schema(doc: dict[str, Any], path: str, status: int) -> dict[str, Any]:
    """The response schema of ``GET path`` (a concrete path under /api/v1) for ``status``."""
    for template, item in doc["paths"].items():
        pattern = "^/api/v1" + re.sub(r"\{[^}]+\}", "[^/]+", template) + "$"
        if re.match(pattern, path):
            response = item["get"]["responses"][str(status)]
            return dict(response["content"]["application/json"]["schema"])
    raise AssertionError(f"{path} is not in the OpenAPI document")


def check_response(doc: dict[str, Any], path: str, status: int, body: Any) -> None:
    """Raise when ``body`` is not what the document promises for ``GET path`` -> ``status``."""
    schema = {**operation_schema(doc, path.split("?")[0], status), "components": doc["components"]}
    Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER).validate(body)
