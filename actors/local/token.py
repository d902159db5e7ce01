"""The local token: who may use ``/ws/chat``, a secret file in ``ENGRAM_HOME``.

Created on first use by whichever side needs it first (``engram serve`` at a client's first
handshake, or ``engram chat``), mode 0600, atomically (written to a temporary file, then
linked into place: a reader never sees half a token, and two creators agree on one). A token
file that others may read is refused: remove it (a new one is made) or ``chmod 600`` it.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
import stat
from pathlib import Path

from actors.local.errors import TokenProblem

TOKEN_FILE = "chat_token"


def token_path(home: Path) -> Path:
    return home / TOKEN_FILE


def _read(path: Path) -> str:
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise TokenProblem(
            f"{path} may be read by others (mode {stat.S_IMODE(mode):o}): chmod 600 it, or "
            "delete it for a new token"
        )
    token = path.read_text(encoding="ascii", errors="replace").strip()
    if len(token) < 32:
        raise TokenProblem(f"{path} holds no token: delete it for a new one")
    return token


def load_or_create(home: Path) -> str:
    """The local token, created (mode 0600) when there is none yet."""
    path = token_path(home)
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    home.mkdir(parents=True, exist_ok=True)
    temp = home / f".{TOKEN_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(secrets.token_urlsafe(32) + "\n")
            out.flush()
            os.fsync(out.fileno())
        with contextlib.suppress(FileExistsError):  # another process made it first: theirs wins
            os.link(temp, path)
    finally:
        temp.unlink(missing_ok=True)
    return _read(path)


def matches(expected: str, presented: str) -> bool:
    """Constant-time comparison of a presented token with the stored one."""
    return hmac.compare_digest(expected.encode(), presented.encode())
