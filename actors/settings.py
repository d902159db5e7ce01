"""The one ``Settings`` of the bot: every package's section combined.

:class:`~runtime.process_settings.ProcessSettings` (database, HTTP server, logging, actor kernel),
:class:`~actors.telegram.settings.TelegramSettings`, :class:`~memory.llm.settings.LLMSettings`,
:class:`~memory.settings.MemorySettings`, :class:`~actors.chat.settings.ChatSettings`,
:class:`~actors.scheduler.settings.ProactiveSettings`,
:class:`~actors.scheduler.routine_settings.RoutineSettings`,
:class:`~actors.scheduler.heartbeat_settings.HeartbeatSettings`,
:class:`~memory.vault.settings.VaultSettings` and :class:`~actors.web.settings.WebSettings`, in the
README configuration table's order. Code that needs only one section takes that section's
type; a ``Settings`` is all of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

import attrs

from actors.chat.settings import ChatSettings
from actors.scheduler.heartbeat_settings import HeartbeatSettings
from actors.scheduler.routine_settings import RoutineSettings
from actors.scheduler.settings import ProactiveSettings
from actors.telegram.settings import TelegramSettings
from actors.web.settings import WebSettings
from memory.llm.settings import LLMSettings
from memory.settings import MemorySettings
from memory.vault.settings import VaultSettings
from runtime.process_settings import ProcessSettings
from runtime.settings import Field
from runtime.settings import load_settings as load_section


# attrs orders inherited attributes from the last base to the first: the bases are listed in
# reverse so the repr starts with the process settings, like ``fields``.
@attrs.frozen(kw_only=True, slots=False)
class Settings(
    WebSettings,
    VaultSettings,
    HeartbeatSettings,
    RoutineSettings,
    ProactiveSettings,
    ChatSettings,
    MemorySettings,
    LLMSettings,
    TelegramSettings,
    ProcessSettings,
):
    """Validated configuration of the whole bot. Build it with :func:`load_settings`."""

    fields: ClassVar[tuple[Field, ...]] = (
        *ProcessSettings.fields,
        *TelegramSettings.fields,
        *LLMSettings.fields,
        *MemorySettings.fields,
        *ChatSettings.fields,
        *ProactiveSettings.fields,
        *RoutineSettings.fields,
        *HeartbeatSettings.fields,
        *VaultSettings.fields,
        *WebSettings.fields,
    )


def load_settings(
    environ: Mapping[str, str] | None = None, *, dotenv: Path | None = Path(".env")
) -> Settings:
    """Build :class:`Settings` from ``environ`` (default ``os.environ``) over ``.env``.

    The process environment wins over the file. Raises SettingsError naming the first bad
    variable.
    """
    return load_section(Settings, environ, dotenv=dotenv)
