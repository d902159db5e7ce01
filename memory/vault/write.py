"""One chat's vault written from the database: read (:func:`memory.vault.data.load_chat`, one
read-only snapshot), render (:func:`memory.vault.render.render_vault`) and sync the folder
(:func:`memory.vault.files.sync_folder`), the last two in a worker thread. The writer actor
(after commits) and ``engram vault rebuild`` both call :func:`write_chat`, so what they write is
the same bytes.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import trio

from memory.vault.data import ChatData, load_chat
from memory.vault.files import SyncStats, sync_folder
from memory.vault.render import LineMemo, render_vault
from memory.vault.settings import chat_folder
from runtime.db import Database


async def read_chat(db: Database, chat_id: int, timezone: str) -> ChatData:
    """The chat's vault data from one consistent, read-only snapshot."""
    async with db.transaction() as conn:
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        return await load_chat(conn, chat_id, timezone)


def render_and_sync(
    data: ChatData,
    folder: Path,
    *,
    force: bool = False,
    known: dict[str, bytes] | None = None,
    memo: LineMemo | None = None,
) -> SyncStats:
    """Render ``data`` and bring ``folder`` to it (blocking: call in a thread). A chat with
    nothing to show gets no folder (an erased chat's is not made again)."""
    files = render_vault(data, memo)
    if not files and not folder.exists():
        return SyncStats()
    return sync_folder(folder, files, force=force, known=known)


async def write_chat(
    db: Database,
    root: Path,
    chat_id: int,
    timezone: str,
    *,
    force: bool = False,
    known: dict[str, bytes] | None = None,
) -> SyncStats:
    """Write the chat's vault folder under ``root`` from the database (see the module doc)."""
    data = await read_chat(db, chat_id, timezone)
    folder = chat_folder(root, chat_id)
    job = partial(render_and_sync, data, folder, force=force, known=known)
    return await trio.to_thread.run_sync(job)
