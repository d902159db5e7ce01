"""``engram chat`` from outside (issue 25 item 1): a real ``engram serve`` subprocess (webhook
mode, the strict fake Bot API, a fake model) and the chat client (:class:`ChatClient`, the one
``engram chat`` runs) on its ``/ws/chat``; and ``engram chat --standalone`` as a subprocess with
only a (fake) model.

* a conversation: replies arrive once each, in order; Telegram is never called for the chat;
* a command with its buttons as numbered choices: /forget offers, a choice forgets (database);
* the server SIGKILLed mid-reply (the model answering), restarted: the reply arrives once;
* the server SIGKILLed after delivering a reply the client had not acknowledged: sent again
  after the restart, shown once;
* a wrong token or a browser (Origin) is refused; a bad frame gets an error and the
  connection stays;
* ``--standalone``: a conversation through stdin/stdout, no Telegram token.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import httpx
import pytest
import trio
from engram_outside import EchoAnthropic, Engram, free_port, run_echo_anthropic, serve_env
from fakes.bot_api import FakeBotApi, run_fake_bot_api
from trio_websocket import ConnectionClosed, ConnectionRejected, open_websocket_url

from actors.local.client import ChatClient, Refused
from actors.local.frames import Delivery, ServerFrame
from actors.local.ids import LOCAL_CHAT_ID
from actors.local.token import load_or_create, token_path
from runtime.db import Database

pytestmark = pytest.mark.slow

TOPIC = "Zephyrine"


async def wait_for(predicate: Callable[[], object], limit: float = 30.0) -> None:
    with trio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110 - another process's doing
            await trio.sleep(0.05)


@attrs.define
class Outside:
    engram: Engram
    bot: FakeBotApi
    model: EchoAnthropic
    client: ChatClient
    shown: list[ServerFrame]

    @property
    def messages(self) -> list[Delivery]:
        return [f for f in self.shown if isinstance(f, Delivery) and f.kind == "message"]

    async def say(self, text: str) -> Delivery:
        """Send ``text``; the next message shown."""
        before = len(self.messages)
        await self.client.say(text)
        await wait_for(lambda: len(self.messages) > before)
        return self.messages[before]


@asynccontextmanager
async def outside(tmp_path: Path, database_url: str) -> AsyncIterator[Outside]:
    async with run_fake_bot_api() as bot, run_echo_anthropic() as model:
        port = free_port()
        env = serve_env(
            tmp_path,
            bot_api=bot.base_url,
            model=model.base_url,
            port=port,
            chats=[1],
            DATABASE_URL=database_url,
        )
        engram = Engram(env, tmp_path / "engram.log")
        await engram.start()
        shown: list[ServerFrame] = []
        client = ChatClient(
            f"ws://127.0.0.1:{port}/ws/chat", load_or_create(tmp_path), shown.append
        )
        try:
            await engram.wait_ready()
            async with trio.open_nursery() as nursery:
                with trio.fail_after(30):  # the socket answers (a server without it: never)
                    await nursery.start(client.run)
                yield Outside(engram, bot, model, client, shown)
                nursery.cancel_scope.cancel()
        finally:
            if engram.running:
                assert await engram.stop() == 0, engram.tail()


def local_calls(bot: FakeBotApi) -> list[object]:
    """Bot API calls that name the local chat (there must be none)."""
    return [c for c in bot.calls if str(LOCAL_CHAT_ID) in repr(c)]


async def test_a_conversation_and_a_command_with_numbered_choices(
    tmp_path: Path, db: Database, database_url: str
) -> None:
    pid = await db.fetchval(
        "INSERT INTO patterns (chat_id, content, kind, canonical_hash, first_seen, last_seen, "
        "confidence) VALUES ($1, $2, 'belief', md5($2), now(), now(), 0.9) RETURNING id",
        LOCAL_CHAT_ID,
        f"User finds {TOPIC} login flows confusing",
    )
    async with outside(tmp_path, database_url) as o:
        assert (await o.say("hello, msg 101")).text == "re 101"
        assert (await o.say("and msg 102")).text == "re 102"
        # the model saw the conversation as one chat: the first exchange in the second request
        assert b"re 101" in o.model.requests[-1].raw

        memory = await o.say("/memory")
        assert memory.text is not None and TOPIC in memory.text
        asked = await o.say(f"/forget {TOPIC}")
        assert asked.text is not None and asked.text.startswith(f"Memories about “{TOPIC}”:")
        labels = [c.label for c in asked.choices]
        assert labels == ["Forget", "Keep"]
        assert [c.n for c in asked.choices] == [1, 2]
        [forget_all] = [c for c in asked.choices if c.label == "Forget"]
        assert forget_all.data is not None
        edits = len(o.shown)
        await o.client.choose(asked.message_id, forget_all.data)
        await wait_for(
            lambda: any(
                isinstance(f, Delivery) and f.kind == "edit" and f.message_id == asked.message_id
                for f in o.shown[edits:]
            )
        )
        assert local_calls(o.bot) == []  # no sendMessage, sendChatAction, answerCallbackQuery
        # every delivery shown once
        keys = [f.delivery for f in o.shown if isinstance(f, Delivery)]
        assert len(keys) == len(set(keys))
    assert await db.fetchval("SELECT count(*) FROM patterns WHERE id = $1", pid) == 0
    rows = await db.fetch("SELECT status FROM outbox WHERE chat_id = $1 ORDER BY id", LOCAL_CHAT_ID)
    assert rows and {r["status"] for r in rows} == {"sent"}
    users = await db.fetch(
        "SELECT content FROM chat_messages WHERE chat_id = $1 AND role = 'user' ORDER BY id",
        LOCAL_CHAT_ID,
    )
    assert [r["content"] for r in users] == ["hello, msg 101", "and msg 102"]  # commands aren't


async def test_killed_mid_reply_the_reply_arrives_once_after_restart(
    tmp_path: Path, db: Database, database_url: str
) -> None:
    async with outside(tmp_path, database_url) as o:
        assert (await o.say("msg 1")).text == "re 1"
        o.model.delay = 3.0  # the model is writing when the server dies
        before = len(o.model.requests)
        await o.client.say("msg 2")
        await wait_for(lambda: len(o.model.requests) > before)
        o.engram.kill()
        await o.engram.wait()
        o.model.delay = 0.0
        await o.engram.start()
        await o.engram.wait_ready()
        await wait_for(lambda: any(m.text == "re 2" for m in o.messages))
        await trio.sleep(1.0)  # a duplicate would come now
        assert [m.text for m in o.messages] == ["re 1", "re 2"]
        assert o.client.connections >= 2


async def test_an_unacknowledged_reply_is_sent_again_after_restart_and_shown_once(
    tmp_path: Path, db: Database, database_url: str
) -> None:
    async with outside(tmp_path, database_url) as o:
        o.client.hold_acks = True  # the reply reaches the client, the acknowledgement never
        await o.client.say("msg 5")
        await wait_for(lambda: any(m.text == "re 5" for m in o.messages))
        row = await db.fetchrow(
            "SELECT id, status, chunk_in_flight FROM outbox WHERE chat_id = $1", LOCAL_CHAT_ID
        )
        assert row is not None
        assert row["status"] == "sending" and row["chunk_in_flight"] == 0
        row_id = row["id"]
        o.engram.kill()
        await o.engram.wait()
        o.client.hold_acks = False
        await o.engram.start()
        await o.engram.wait_ready()
        await wait_for(lambda: o.client.connections >= 2)

        async def status() -> str:
            return str(await db.fetchval("SELECT status FROM outbox WHERE id = $1", row_id))

        with trio.fail_after(30):
            while await status() != "sent":  # noqa: ASYNC110 - another process's doing
                await trio.sleep(0.1)
        assert [m.text for m in o.messages] == ["re 5"]  # delivered twice, shown once
        error = await db.fetchval("SELECT last_error FROM outbox WHERE id = $1", row_id)
        assert error is None  # sent: the recovery's note is cleared


async def test_wrong_token_browser_and_bad_frames_are_refused(
    tmp_path: Path, db: Database, database_url: str
) -> None:
    async with outside(tmp_path, database_url) as o:
        port = o.engram.port
        url = f"ws://127.0.0.1:{port}/ws/chat"
        assert token_path(tmp_path).stat().st_mode & 0o777 == 0o600
        with pytest.raises(ConnectionRejected) as rejected:
            async with open_websocket_url(
                url, extra_headers=[(b"authorization", b"Bearer " + b"x" * 43)]
            ):
                pass
        assert rejected.value.status_code == 401
        good = f"Bearer {load_or_create(tmp_path)}".encode()
        with pytest.raises(ConnectionRejected) as rejected:
            async with open_websocket_url(
                url, extra_headers=[(b"authorization", good), (b"origin", b"https://evil.test")]
            ):
                pass
        assert rejected.value.status_code == 403
        stranger = ChatClient(url, "y" * 43, lambda frame: None)
        with pytest.raises(Refused):
            await stranger.run()
        # a bad frame: a clear error, the connection (a second client, replacing the first) stays
        async with open_websocket_url(url, extra_headers=[(b"authorization", good)]) as ws:
            assert '"hello"' in await ws.get_message()
            await ws.send_message('{"type": "send", "id": "a b", "text": "x"}')
            assert '"bad_field"' in await ws.get_message()
            await ws.send_message('{"type": "send", "id": "ok1", "text": "' + "z" * 5000 + '"}')
            assert '"too_long"' in await ws.get_message()
            await ws.send_message("not json")
            assert '"not_json"' in await ws.get_message()
            await ws.send_message('{"type": "send", "id": "ok2", "text": "msg 9"}')
            assert '"stored"' in await ws.get_message()
        async with open_websocket_url(url, extra_headers=[(b"authorization", good)]) as ws:
            assert '"hello"' in await ws.get_message()
            await ws.send_message("x" * 100_000)  # past the server's message limit: closed
            with pytest.raises(ConnectionClosed) as closed, trio.fail_after(30):
                while True:  # frames for "msg 9" (its drafts, its reply) may come first
                    await ws.get_message()
            assert closed.value.reason is not None and closed.value.reason.code == 1009
        async with httpx.AsyncClient() as http:  # the server is unharmed
            assert (await http.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200
    assert (
        await db.fetchval(
            "SELECT count(*) FROM inbox WHERE chat_id = $1 AND update_key LIKE 'local:%'",
            LOCAL_CHAT_ID,
        )
        == 1
    )


async def test_standalone_needs_only_a_model(tmp_path: Path, database_url: str) -> None:
    async with run_echo_anthropic() as model:
        env = serve_env(
            tmp_path, bot_api="http://127.0.0.1:9", model=model.base_url, port=0, chats=[]
        )
        for name in (
            "TELEGRAM_BOT_TOKEN",
            "TELEGRAM_SECRET_TOKEN",
            "TELEGRAM_API_BASE_URL",
            "TELEGRAM_ALLOWED_CHAT_IDS",
            "ENGRAM_PORT",
        ):
            env.pop(name)
        env["DATABASE_URL"] = database_url
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-m", "actors.cli", "chat", "--standalone"],
            env=env,
            cwd=tmp_path,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdin is not None and proc.stdout is not None
        out = b""

        async def read_until(marker: bytes) -> None:
            nonlocal out
            with trio.fail_after(60):
                while marker not in out:
                    chunk = await proc.stdout.receive_some()  # type: ignore[union-attr]
                    if not chunk:
                        raise AssertionError(out.decode())
                    out += chunk

        try:
            await read_until(b"Connected to engram")
            await proc.stdin.send_all(b"hi there, msg 42\n")
            await read_until(b"re 42")
            await proc.stdin.send_all(b"/quit\n")
            with trio.fail_after(30):
                assert await proc.wait() == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert out.count(b"re 42") == 1
        assert (tmp_path / "chat.log").exists()
        assert model.requests and b"msg 42" in model.requests[-1].raw
