"""``engram memory erase --chat ID`` through ``actors.cli.main.main`` against a test database:
with ``--yes`` every row of the chat goes (in every table with ``chat_id``) and its vault
folder, another chat keeps everything; without ``--yes`` and without a terminal nothing is
erased; the typed confirmation must be the chat id."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from erase_fill import fill

from actors.cli.erase import confirmed
from actors.cli.main import main
from memory.erase.chat import chat_tables, count_chat_rows
from runtime.db import Database

CHAT, OTHER = 6601, 6602


@pytest.fixture
def cli_env(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restore_logging: None
) -> Path:
    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setenv("ENGRAM_HOME", str(tmp_path))
    monkeypatch.delenv("VAULT_DIR", raising=False)
    monkeypatch.setenv("EMBEDDING_PROVIDER", "local")
    return tmp_path / "vault"


async def run(*argv: str) -> int:
    return await trio.to_thread.run_sync(main, list(argv))


async def test_erase_with_yes_leaves_nothing_of_the_chat(
    db: Database, cli_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await fill(db, CHAT)
    await fill(db, OTHER)
    other = await count_chat_rows(db, OTHER)
    for chat in (CHAT, OTHER):
        (cli_env / str(chat) / "daily").mkdir(parents=True)
        (cli_env / str(chat) / "MEMORY.md").write_text("Lisbon")
    assert await run("memory", "erase", "--chat", str(CHAT), "--yes") == 0
    out = capsys.readouterr().out
    assert f"chat {CHAT} erased: " in out and "vault folder removed" in out
    assert await count_chat_rows(db, CHAT) == {}
    for table in await chat_tables(db):
        assert await db.fetchval(f'SELECT count(*) FROM "{table}" WHERE chat_id = $1', CHAT) == 0
    assert await count_chat_rows(db, OTHER) == other
    assert not (cli_env / str(CHAT)).exists()
    assert (cli_env / str(OTHER) / "MEMORY.md").exists()
    assert await run("memory", "erase", "--chat", str(CHAT), "--yes") == 0
    assert "nothing to erase" in capsys.readouterr().out


async def test_without_yes_and_without_a_terminal_nothing_is_erased(
    db: Database, cli_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await fill(db, CHAT)
    before = await count_chat_rows(db, CHAT)
    assert await run("memory", "erase", "--chat", str(CHAT)) == 2  # pytest's stdin: no tty
    assert "--yes" in capsys.readouterr().err
    assert await count_chat_rows(db, CHAT) == before


def test_the_question_wants_the_chat_id_typed_back() -> None:
    assert confirmed(42, lambda prompt: " 42\n")
    assert not confirmed(42, lambda prompt: "yes")

    def closed(prompt: str) -> str:
        raise EOFError

    assert not confirmed(42, closed)
