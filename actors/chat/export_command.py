"""``/export``: the person takes their memory away, from the chat.

Sends two documents (``sendDocument``): the chat's snapshot (the same JSON document as
``engram memory export``, without vectors; ``engram memory import`` reads it back) and, when the
chat has one, a zip of its markdown vault folder (``chat_folder(VAULT_DIR, chat)``). A file over
Telegram's 50 MB limit for bots is not sent: the reply says how to get it from the operator.
The reply itself goes through the outbox like any command's; the documents go first.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Protocol

import attrs
import trio

from actors.agent.turn import TurnReply
from actors.chat.command_base import Command, CommandCall
from actors.telegram.client import MAX_UPLOAD_BYTES
from actors.telegram.errors import TelegramError
from memory.export.document import build_snapshot, dump
from memory.vault.settings import chat_folder
from runtime.db import Queries
from runtime.logs import get_logger

log = get_logger(__name__)

SENT = (
    "Here is everything I remember about you: {what}. Keep it safe; the operator can restore the "
    "snapshot with `engram memory import`."
)
TOO_BIG = (
    "{name} is {size}, over Telegram's 50 MB limit for files from bots, so I can't send it here. "
    "Ask the operator of this bot for it: `engram memory export --chat {chat} -o memory.json`"
    "{vault}."
)
FAILED = "I couldn't send the files ({reason}). Nothing was lost; try /export again later."


class DocumentSender(Protocol):
    """The Bot API call /export needs (:class:`actors.telegram.client.BotApiClient`)."""

    async def send_document(
        self, chat_id: int | str, name: str, data: bytes, *, mime_type: str = ...
    ) -> int: ...


def zip_folder(folder: Path, top: str) -> bytes:
    """Every file under ``folder`` in a zip, under ``top/`` (sorted: the same vault, the same
    order)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            archive.write(path, f"{top}/{path.relative_to(folder).as_posix()}")
    return buffer.getvalue()


def _size(n: int) -> str:
    return f"{n / 1_000_000:.1f} MB"


@attrs.frozen
class ExportCommand:
    """``/export`` (see the module doc)."""

    db: Queries
    bot: DocumentSender
    vault_root: Path
    engram_version: str
    embedding_model: str | None = None
    max_bytes: int = MAX_UPLOAD_BYTES

    def commands(self) -> list[Command]:
        return [Command("export", "everything I remember about you, as files to keep", self.run)]

    async def _files(self, call: CommandCall) -> list[tuple[str, str, bytes, str]]:
        """(what, file name, bytes, MIME type) of each document to send."""
        day = call.now.date().isoformat()
        doc = await build_snapshot(
            self.db,
            call.chat_id,
            engram_version=self.engram_version,
            embedding_model=self.embedding_model,
            now=call.now,
        )
        files = [
            (
                "the snapshot",
                f"engram-memory-{call.chat_id}-{day}.json",
                dump(doc),
                "application/json",
            )
        ]
        folder = chat_folder(self.vault_root, call.chat_id)
        if await trio.Path(folder).is_dir():
            top = f"engram-vault-{call.chat_id}"
            data = await trio.to_thread.run_sync(zip_folder, folder, top)
            files.append(("your vault", f"{top}-{day}.zip", data, "application/zip"))
        return files

    async def run(self, call: CommandCall) -> TurnReply:
        files = await self._files(call)
        sent: list[str] = []
        too_big: list[tuple[str, str, int]] = []
        for what, name, data, mime in files:
            if len(data) > self.max_bytes:
                too_big.append((what, name, len(data)))
                continue
            try:
                await self.bot.send_document(call.chat_id, name, data, mime_type=mime)
            except TelegramError as exc:
                log.warning("export.send_failed", chat_id=call.chat_id, error=str(exc))
                return TurnReply(FAILED.format(reason=type(exc).__name__))
            sent.append(what)
        log.info("export.sent", chat_id=call.chat_id, files=len(sent), too_big=len(too_big))
        lines = []
        if sent:
            lines.append(SENT.format(what=" and ".join(sent)))
        for what, _name, size in too_big:
            vault = f" and the vault folder VAULT_DIR/{call.chat_id}" if len(files) > 1 else ""
            name = what[0].upper() + what[1:]
            lines.append(
                TOO_BIG.format(name=name, size=_size(size), chat=call.chat_id, vault=vault)
            )
        return TurnReply("\n\n".join(lines))
