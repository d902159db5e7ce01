"""``/export`` against the strict fake Bot API (multipart ``sendDocument``): the whole bot sends
the chat's snapshot, which imports back; the vault folder goes as a zip; a file over the upload
limit is not sent and the reply says how to get it; a refused upload loses nothing."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from chat_bot import CHAT, Bot, model_silent, running_bot
from fakes.anthropic_api import FakeAnthropic
from fakes.bot_api import FakeBotApi, run_fake_bot_api
from fakes.snapshot import fill_chat

from actors.chat.command_base import CommandCall
from actors.chat.export_command import ExportCommand
from actors.telegram.client import BotApiClient
from actors.telegram.errors import TelegramError
from memory.embeddings.providers import LocalEmbedder
from memory.export.importer import import_snapshot, parse
from runtime.db import Database

NOW = datetime(2026, 11, 26, 18, 0, tzinfo=UTC)


@pytest.fixture
async def whole_bot(
    db: Database, fake_claude: FakeAnthropic, local: LocalEmbedder
) -> AsyncIterator[Bot]:
    async with run_fake_bot_api() as fake, running_bot(db, fake, fake_claude, local) as running:
        yield running
    assert running.codes == [0]


async def test_export_in_the_chat_sends_the_snapshot(whole_bot: Bot, db: Database) -> None:
    await fill_chat(db, CHAT)
    [reply] = await whole_bot.say("/export")
    assert reply.startswith("Here is everything I remember about you: the snapshot")
    # the snapshot, and the vault's zip when the vault writer has written the chat's folder yet
    docs = whole_bot.fake.sent_documents(CHAT)
    [doc] = [d for d in docs if d.mime_type == "application/json"]
    assert len(docs) <= 2 and doc.file_name.startswith(f"engram-memory-{CHAT}-")
    snapshot = parse(doc.data)
    assert snapshot["chat_id"] == CHAT and len(snapshot["patterns"]) == 3
    # what the person got restores: into another chat, everything is added
    report = await import_snapshot(db, snapshot, chat_id=CHAT + 77)
    assert report.added["patterns"] == 3 and report.added["messages"] == len(snapshot["messages"])
    await model_silent(whole_bot)


def command(db: Database, client: BotApiClient, root: Path, **kw: int) -> ExportCommand:
    return ExportCommand(db, client, root, "test", embedding_model=None, **kw)


def call(chat: int) -> CommandCall:
    return CommandCall(chat_id=chat, name="export", args="", now=NOW)


async def test_the_vault_folder_goes_as_a_zip(
    db: Database, fake: FakeBotApi, bot: BotApiClient, tmp_path: Path
) -> None:
    await fill_chat(db, CHAT)
    folder = tmp_path / str(CHAT)
    (folder / "patterns").mkdir(parents=True)
    (folder / "MEMORY.md").write_text("# Memory\n- runs 5 km\n", "utf-8")
    (folder / "patterns" / "1-runs.md").write_text("---\nid: 1\n---\nRuns\n", "utf-8")
    (tmp_path / "999").mkdir()  # another chat's vault: not sent
    (tmp_path / "999" / "MEMORY.md").write_text("other", "utf-8")
    reply = await command(db, bot, tmp_path).run(call(CHAT))
    assert reply.text.startswith("Here is everything I remember about you: the snapshot and your")
    snapshot, vault = fake.sent_documents(CHAT)
    assert snapshot.file_name == f"engram-memory-{CHAT}-2026-11-26.json"
    assert vault.file_name == f"engram-vault-{CHAT}-2026-11-26.zip"
    assert vault.mime_type == "application/zip"
    with zipfile.ZipFile(io.BytesIO(vault.data)) as archive:
        names = archive.namelist()
        assert names == [
            f"engram-vault-{CHAT}/MEMORY.md",
            f"engram-vault-{CHAT}/patterns/1-runs.md",
        ]
        assert archive.read(names[0]) == b"# Memory\n- runs 5 km\n"
    # a chat without a vault folder gets the snapshot alone
    reply = await command(db, bot, tmp_path).run(call(CHAT + 1))
    assert len(fake.sent_documents(CHAT + 1)) == 1 and "the snapshot." in reply.text


async def test_over_the_limit_the_reply_says_how_to_get_it(
    db: Database, fake: FakeBotApi, bot: BotApiClient, tmp_path: Path
) -> None:
    await fill_chat(db, CHAT)
    (tmp_path / str(CHAT)).mkdir()
    (tmp_path / str(CHAT) / "MEMORY.md").write_text("small", "utf-8")
    reply = await command(db, bot, tmp_path, max_bytes=1000).run(call(CHAT))
    [sent] = fake.sent_documents(CHAT)
    assert sent.file_name.endswith(".zip")  # the small vault went; the snapshot did not
    assert "The snapshot is 0.0 MB, over Telegram's 50 MB limit" in reply.text
    assert f"engram memory export --chat {CHAT} -o memory.json" in reply.text
    assert f"VAULT_DIR/{CHAT}" in reply.text


async def test_a_refused_upload_is_one_clear_line(
    db: Database, fake: FakeBotApi, bot: BotApiClient, tmp_path: Path
) -> None:
    await fill_chat(db, CHAT)
    fake.max_upload_bytes = 100  # the fake's Telegram refuses it: 413
    reply = await command(db, bot, tmp_path).run(call(CHAT))
    assert (
        reply.text.startswith("I couldn't send the files (") and "try /export again" in reply.text
    )
    assert fake.sent_documents(CHAT) == []
    [refused] = fake.calls_to("sendDocument")
    assert refused.status == 413


async def test_fake_send_document_is_strict(fake: FakeBotApi, bot: BotApiClient) -> None:
    with pytest.raises(TelegramError, match="file must be non-empty"):
        await bot.send_document(CHAT, "empty.json", b"")
    with pytest.raises(TelegramError, match="caption is too long"):
        upload = {"document": ("a.json", b"{}", "application/json")}
        await bot.call("sendDocument", {"chat_id": CHAT, "caption": "x" * 1025}, files=upload)
    with pytest.raises(TelegramError, match="unknown parameter"):
        await bot.call("sendDocument", {"chat_id": CHAT, "document": "x", "colour": "red"})
    with pytest.raises(TelegramError, match="wrong file identifier"):
        await bot.call("sendDocument", {"chat_id": CHAT, "document": "not-a-file-id"})
    message_id = await bot.send_document(CHAT, "a.json", b'{"a": 1}', mime_type="application/json")
    [doc] = fake.sent_documents(CHAT)
    assert (doc.message_id, doc.file_name, doc.data) == (message_id, "a.json", b'{"a": 1}')
    assert json.loads(doc.data) == {"a": 1}
