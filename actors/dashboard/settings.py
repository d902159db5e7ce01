"""The dashboard's settings section (DASHBOARD_TOKEN)."""

from __future__ import annotations

import re
from typing import ClassVar

import attrs

from runtime.parsers import Secret
from runtime.settings import Field, SettingsSection

MIN_TOKEN_CHARS = 16


def dashboard_token(raw: str) -> Secret:
    """Empty (the dashboard is off), or 16-256 characters of A-Z, a-z, 0-9, _ and -."""
    value = raw.strip()
    if value and not re.fullmatch(r"[A-Za-z0-9_-]{16,256}", value):
        raise ValueError(
            f"must be {MIN_TOKEN_CHARS}-256 characters of A-Z, a-z, 0-9, _ and - "
            "(e.g. `openssl rand -hex 24`)"
        )
    return Secret(value)


@attrs.frozen(kw_only=True, slots=False)
class DashboardSettings(SettingsSection):
    """Who may open the dashboard."""

    fields: ClassVar[tuple[Field, ...]] = (
        Field(
            "DASHBOARD_TOKEN",
            "dashboard_token",
            "",
            dashboard_token,
            "Token of the operator's dashboard login (and the JSON API's bearer token); empty: "
            "/dashboard/ is off (404).",
            secret=True,
        ),
    )

    dashboard_token: Secret
