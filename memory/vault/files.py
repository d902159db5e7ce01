"""Writing a chat's vault folder: atomic file writes, only what changed, and what is no longer
rendered removed (blocking file I/O: run it in a worker thread).

:func:`atomic_write` writes a temporary file beside the target, fsyncs it, renames it over the
target (``os.replace``: atomic on POSIX) and fsyncs the folder, so a reader or a crash sees the
old file or the new one, never a part. :func:`sync_folder` brings a folder to a rendered set of
files: a file whose bytes are unchanged is not touched, a managed file (``MEMORY.md``,
``daily/*.md``, ``patterns/*.md``) no longer rendered is deleted (a forgotten pattern's page),
and temporary files a crash left are removed. Files are made ``0600`` and folders ``0700`` (a
person's memory). Anything else in the folder (the person's own
notes, ``.obsidian/``) is left alone.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import attrs

#: the folders whose ``*.md`` files the vault owns (besides ``MEMORY.md``)
MANAGED_DIRS = ("daily", "patterns")
TEMP_MARK = ".tmp-"
#: more files to write than this are written by :data:`WRITERS` threads (each file is fsynced)
PARALLEL_FROM = 32
WRITERS = 8
#: a person's memory: readable by the bot's own user only
FILE_MODE, FOLDER_MODE = 0o600, 0o700


@attrs.define
class SyncStats:
    """What :func:`sync_folder` did."""

    written: int = 0
    unchanged: int = 0
    deleted: int = 0
    bytes: int = 0


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, sync_dir: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically (temp file, fsync, rename, folder fsync)."""
    temp = path.with_name(f".{path.name}{TEMP_MARK}{secrets.token_hex(4)}")
    try:
        with os.fdopen(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE), "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    if sync_dir:
        _fsync_dir(path.parent)


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def _managed(folder: Path) -> dict[str, Path]:
    """The vault-owned files now in ``folder``, by relative path."""
    out: dict[str, Path] = {}
    if (folder / "MEMORY.md").is_file():
        out["MEMORY.md"] = folder / "MEMORY.md"
    for sub in MANAGED_DIRS:
        d = folder / sub
        if d.is_dir():
            for p in d.iterdir():
                if p.suffix == ".md" and not p.name.startswith("."):
                    out[f"{sub}/{p.name}"] = p
    return out


def _clear_temps(folder: Path) -> None:
    for d in (folder, *(folder / sub for sub in MANAGED_DIRS)):
        if d.is_dir():
            for p in d.iterdir():
                if p.name.startswith(".") and TEMP_MARK in p.name:
                    p.unlink(missing_ok=True)


def sync_folder(
    folder: Path,
    files: Mapping[str, str],
    *,
    force: bool = False,
    known: dict[str, bytes] | None = None,
    advance: Callable[[int], object] | None = None,
) -> SyncStats:
    """Make ``folder``'s vault files exactly ``files`` (relative path -> text).

    ``force``: rewrite every file (a rebuild). ``known``: a digest of what was last written
    per path, kept by the caller between calls, so unchanged files are not read back; updated
    in place. ``advance(1)`` is called after each file (a progress bar)."""
    stats = SyncStats()
    folder.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
    for sub in MANAGED_DIRS:
        (folder / sub).mkdir(mode=FOLDER_MODE, exist_ok=True)
    _clear_temps(folder)
    present = _managed(folder)
    touched: set[Path] = set()
    todo: list[tuple[str, Path, bytes, bytes]] = []
    for rel, text in sorted(files.items()):
        data = text.encode("utf-8")
        stats.bytes += len(data)
        path = folder / rel
        digest = _digest(data)
        if not force and rel in present:
            before = known.get(rel) if known is not None else None
            if before is None:
                before = _digest(path.read_bytes())
            if before == digest:
                stats.unchanged += 1
                if known is not None:
                    known[rel] = digest
                if advance is not None:
                    advance(1)
                continue
        todo.append((rel, path, data, digest))

    def write(item: tuple[str, Path, bytes, bytes]) -> None:
        atomic_write(item[1], item[2], sync_dir=False)
        if advance is not None:
            advance(1)

    if len(todo) > PARALLEL_FROM:  # a rebuild: the fsyncs overlap
        with ThreadPoolExecutor(WRITERS) as pool:
            list(pool.map(write, todo))
    else:
        for item in todo:
            write(item)
    for rel, path, _, digest in todo:
        touched.add(path.parent)
        stats.written += 1
        if known is not None:
            known[rel] = digest
    for rel, path in present.items():
        if rel not in files:
            path.unlink(missing_ok=True)
            touched.add(path.parent)
            stats.deleted += 1
            if known is not None:
                known.pop(rel, None)
    for d in sorted(touched):
        _fsync_dir(d)
    return stats


def write_files(
    folder: Path, files: Mapping[str, str], known: dict[str, bytes], remove: Iterable[str] = ()
) -> SyncStats:
    """Write only ``files`` (relative path -> text) into ``folder``, each atomically, skipping
    those whose digest in ``known`` (updated in place) is unchanged, and delete the vault files
    ``remove`` names; nothing else in the folder is read or removed (an incremental write:
    :mod:`memory.vault.incremental`)."""
    stats = SyncStats()
    touched: set[Path] = set()
    for rel in sorted(set(remove) - set(files)):
        path = folder / rel
        if path.exists():
            path.unlink()
            touched.add(path.parent)
            stats.deleted += 1
        known.pop(rel, None)
    for rel, text in sorted(files.items()):
        data = text.encode("utf-8")
        stats.bytes += len(data)
        digest = _digest(data)
        path = folder / rel
        if known.get(rel) == digest and path.is_file():
            stats.unchanged += 1
            continue
        path.parent.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
        atomic_write(path, data, sync_dir=False)
        known[rel] = digest
        touched.add(path.parent)
        stats.written += 1
    for d in sorted(touched):
        _fsync_dir(d)
    return stats
