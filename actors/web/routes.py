"""The web blueprints the settings turn on (the composition root adds them to the app)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from quart import Blueprint

from actors.chat.memory_commands import MemoryServices
from actors.web.api import ApiDeps, api_blueprint
from actors.web.metrics import metrics_blueprint
from actors.web.settings import WebSettings


def web_blueprints(
    settings: WebSettings,
    services: MemoryServices,
    health: Callable[[], Mapping[str, Any]] = dict,
    allowed_chat_ids: Iterable[int] = (),
) -> list[Blueprint]:
    """``/metrics`` unless METRICS=off; ``/api/v1/`` when DASHBOARD_TOKEN is set
    (``allowed_chat_ids``: the allowlist setting's chats, listed by ``/api/v1/chats``)."""
    out = []
    if settings.metrics == "on":
        out.append(metrics_blueprint(services.db, settings.metrics_token.reveal()))
    if settings.dashboard_token:
        deps = ApiDeps(
            services,
            settings.dashboard_token.reveal(),
            sorted(allowed_chat_ids),
            health,
        )
        out.append(api_blueprint(deps))
    return out
