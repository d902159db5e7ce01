"""Issue 24 items 3 and 4 from outside: the person's ``/export`` to a real ``engram serve``
(webhook mode, the strict fake Bot API) sends the snapshot and the vault's zip as documents;
the operator's ``engram memory import`` (a subprocess) refuses a truncated copy in one line,
restores the real one into another chat, and, killed (SIGKILL) in the middle of its
transaction, leaves nothing of the chat behind."""

from __future__ import annotations

import copy
import io
import json
import signal
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from engram_outside import REPO, Engram, free_port, post_update, serve_env, update_body
from fakes.anthropic_api import run_fake_anthropic
from fakes.bot_api import run_fake_bot_api
from fakes.snapshot import fill_chat, normalized

from memory.export.document import build_snapshot, dump
from memory.export.sections import SECTIONS
from memory.patterns.canonical import canonical_hash
from runtime.db import Database

pytestmark = pytest.mark.slow

A, B, C = 4030001, 4030002, 4030003


async def chat_rows(db: Database, chat: int) -> int:
    """Rows of ``chat`` in every table a snapshot fills."""
    total = 0
    for section in SECTIONS:
        total += int(
            await db.fetchval(f"SELECT count(*) FROM {section.table} WHERE chat_id = $1", chat)
        )
    return total


def import_args(path: Path, chat: int) -> list[str]:
    return [
        sys.executable, "-m", "actors.cli", "memory", "import", str(path), "--chat", str(chat),
        "--embeddings", "none",
    ]  # fmt: skip


async def run_import(env: dict[str, str], path: Path, chat: int) -> tuple[int, str, str]:
    run = await trio.run_process(
        import_args(path, chat),
        env=env,
        cwd=REPO,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    return run.returncode, run.stdout.decode(), run.stderr.decode()


async def test_export_in_the_chat_then_restore_with_the_cli(
    tmp_path: Path, db: Database, database_url: str
) -> None:
    await fill_chat(db, A)
    vault = tmp_path / "vault" / str(A)  # ENGRAM_HOME/vault: the default VAULT_DIR
    vault.mkdir(parents=True)
    (vault / "MEMORY.md").write_text("# What I remember\n- Runs 5 km most mornings\n", "utf-8")
    async with (
        run_fake_bot_api() as bot,
        run_fake_anthropic() as model,
        httpx.AsyncClient(timeout=10) as client,
    ):
        env = serve_env(
            tmp_path,
            bot_api=bot.base_url,
            model=model.base_url,
            port=free_port(),
            chats=[A, B],
            DATABASE_URL=database_url,
        )
        engram = Engram(env, tmp_path / "engram.log")
        await engram.start()
        try:
            await engram.wait_ready()
            assert await post_update(client, engram.port, update_body(1000, chat=A, text="/export"))
            with trio.fail_after(60):
                while not bot.sent_texts(A):  # noqa: ASYNC110 (another process)
                    await trio.sleep(0.05)
        finally:
            assert await engram.stop() == 0, engram.tail()
    [reply] = bot.sent_texts(A)
    assert reply.startswith("Here is everything I remember about you: the snapshot and your vault")
    snapshot, vault_zip = bot.sent_documents(A)
    with zipfile.ZipFile(io.BytesIO(vault_zip.data)) as archive:
        assert archive.namelist() == [f"engram-vault-{A}/MEMORY.md"]
    assert not model.requests, "a command calls no model"

    sent = tmp_path / snapshot.file_name
    sent.write_bytes(snapshot.data)
    truncated = tmp_path / "truncated.json"
    truncated.write_bytes(snapshot.data[: len(snapshot.data) * 2 // 3])
    code, out, err = await run_import(env, truncated, B)
    assert code == 1 and out == ""
    [line] = err.strip().splitlines()
    assert line.startswith(f"engram: {truncated}: $: not JSON") and "truncated" in line
    assert await chat_rows(db, B) == 0

    code, out, err = await run_import(env, sent, B)
    assert code == 0, err
    assert f"chat {B}: imported" in out and "patterns: 3 added" in out
    restored = await build_snapshot(db, B, engram_version="x", embedding_model=None)
    given = without_dangling_messages(json.loads(snapshot.data))
    assert normalized({**restored, "chat_id": A, "engram_version": given["engram_version"]}) == (
        normalized({**given, "embedding_model": None})
    )


def without_dangling_messages(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` as an import reads it: references to messages it does not hold (the serve
    process had its way with the chat meanwhile) dropped."""
    ids = {m["id"] for m in doc["messages"]}
    for row in doc["observations"]:
        row["chat_message_ids"] = [i for i in row["chat_message_ids"] if i in ids]
    for row in doc["episodes"]:
        for key in ("first_message_id", "last_message_id"):
            row[key] = row[key] if row[key] in ids else None
    return doc


def big_snapshot(doc: dict[str, Any], patterns: int) -> dict[str, Any]:
    """``doc`` with ``patterns`` more patterns (and as many observations): a long transaction."""
    big = copy.deepcopy(doc)
    base = big["patterns"][0]
    for i in range(patterns):
        content = f"Pattern number {i} of a long import"
        big["patterns"].append(
            {**base, "id": 10**9 + i, "content": content, "canonical_hash": canonical_hash(content)}
        )
        big["observations"].append(
            {**big["observations"][0], "id": 10**9 + i, "pattern_id": 10**9 + i}
        )
    return big


async def test_a_killed_import_leaves_nothing(
    tmp_path: Path, db: Database, database_url: str
) -> None:
    await fill_chat(db, A)
    doc = await build_snapshot(db, A, engram_version="x", embedding_model=None)
    path = tmp_path / "big.json"
    path.write_bytes(dump(big_snapshot(doc, 60_000)))
    env = serve_env(tmp_path, bot_api="http://127.0.0.1:9", model="http://127.0.0.1:9", port=0,
                    chats=[A], DATABASE_URL=database_url)  # fmt: skip
    process = await trio.lowlevel.open_process(
        import_args(path, C), env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        with trio.fail_after(120):  # its transaction holds the chat's import lock: kill it then
            while not await db.fetchval(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
            ):
                assert process.returncode is None, "the import ended before it could be killed"
                await trio.sleep(0.01)
        await trio.sleep(0.2)  # some COPY under way
        process.send_signal(signal.SIGKILL)
        assert await process.wait() == -signal.SIGKILL
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    with trio.fail_after(30):  # the server notices the lost client and rolls back
        while await db.fetchval(  # noqa: ASYNC110 (another process)
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
        ):
            await trio.sleep(0.05)
    assert await chat_rows(db, C) == 0
    assert (
        await db.fetchval(
            "SELECT count(*) FROM chat_pattern_counts WHERE chat_id = $1 AND n > 0", C
        )
        == 0
    )
    # and the same file imports whole afterwards
    code, out, err = await run_import(env, path, C)
    assert code == 0, err
    assert "patterns: 60003 added" in out
    assert json.loads(path.read_text("utf-8"))["chat_id"] == A
