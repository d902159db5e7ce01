"""The vault's settings section (VAULT, VAULT_DIR, VAULT_DEBOUNCE) and where a chat's vault is."""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar

import attrs

from runtime.parsers import choice, float_range
from runtime.settings import Field, SettingsSection


def _dir(raw: str) -> Path | None:
    """VAULT_DIR: a path (``~`` expanded), or empty for ``ENGRAM_HOME/vault``."""
    raw = raw.strip()
    if not raw:
        return None
    path = Path(raw).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError(f"is not a directory: {str(path)!r}")
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"cannot be written: {str(existing)!r} is not a writable directory")
    return path


@attrs.frozen(kw_only=True, slots=False)
class VaultSettings(SettingsSection):
    """Where and whether the markdown vault is written."""

    fields: ClassVar[tuple[Field, ...]] = (
        Field(
            "VAULT",
            "vault",
            "on",
            choice("on", "off"),
            "on: keep a markdown copy of each chat's memory in VAULT_DIR (an Obsidian vault).",
        ),
        Field(
            "VAULT_DIR",
            "vault_dir",
            "",
            _dir,
            "Folder of the markdown vaults, one sub-folder per chat. Empty: ENGRAM_HOME/vault.",
        ),
        Field(
            "VAULT_DEBOUNCE",
            "vault_debounce",
            "2",
            float_range(0, 3600),
            "Seconds a chat's vault waits after a change before it is written (changes in "
            "between are written together).",
        ),
    )

    vault: str = "on"
    vault_dir: Path | None = None
    vault_debounce: float = 2.0


def vault_root(vault_dir: Path | None, home: Path) -> Path:
    """The folder holding every chat's vault (VAULT_DIR, else ``ENGRAM_HOME/vault``)."""
    return vault_dir if vault_dir is not None else home / "vault"


def chat_folder(root: Path, chat_id: int) -> Path:
    """The vault folder of one chat."""
    return root / str(chat_id)
