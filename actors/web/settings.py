"""The web section: METRICS, METRICS_TOKEN, DASHBOARD_TOKEN (the dashboard and the API)."""

from __future__ import annotations

import re
from typing import ClassVar

import attrs

from runtime.parsers import Secret, choice
from runtime.settings import Field, SettingsSection


def bearer_token(raw: str) -> Secret:
    """Empty, or 16-256 characters of A-Z, a-z, 0-9, ``_`` and ``-`` (guessing one must be
    hopeless; the error never quotes it)."""
    value = raw.strip()
    if value and not re.fullmatch(r"[A-Za-z0-9_-]{16,256}", value):
        raise ValueError("must be 16-256 characters of A-Z, a-z, 0-9, _ and - (or empty)")
    return Secret(value)


@attrs.frozen(kw_only=True, slots=False)
class WebSettings(SettingsSection):
    """What the HTTP server offers beside the webhook, and the tokens guarding it."""

    fields: ClassVar[tuple[Field, ...]] = (
        Field(
            "METRICS",
            "metrics",
            "on",
            choice("on", "off"),
            "on: GET /metrics in the Prometheus text format on ENGRAM_HOST:ENGRAM_PORT; off: 404.",
        ),
        Field(
            "METRICS_TOKEN",
            "metrics_token",
            "",
            bearer_token,
            "When set, /metrics requires `Authorization: Bearer <token>` (16-256 of A-Za-z0-9_-).",
            secret=True,
        ),
        Field(
            "DASHBOARD_TOKEN",
            "dashboard_token",
            "",
            bearer_token,
            "The operator's token: the dashboard's login at /dashboard/ and the JSON API's "
            "bearer token at /api/v1/ (every chat); empty: both are off (404). `engram "
            "api-token --chat ID` derives an API token that sees one chat.",
            secret=True,
        ),
    )

    metrics: str
    metrics_token: Secret
    dashboard_token: Secret
