"""Issue 20, row 9, from outside: ``engram serve --webhook`` with no allowed chat (it opens
pairing and logs the code), strangers guessing over the real webhook cannot lock the owner out,
and their replies say nothing of whether pairing is open or how their code fared."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import trio
from engram_outside import Engram, free_port, post_update, run_echo_anthropic, serve_env
from engram_outside import update_body as message
from fakes.bot_api import FakeBotApi, run_fake_bot_api

pytestmark = pytest.mark.slow

OWNER = 5001
GUESSERS = (6001, 6002, 6003)
PAIRED = "Paired"


async def replies(bot: FakeBotApi, chat: int, count: int = 1) -> list[str]:
    """The texts sent to ``chat`` once there are ``count`` (another process sends them)."""
    with trio.fail_after(30):
        while len(bot.sent_texts(chat)) < count:  # noqa: ASYNC110
            await trio.sleep(0.05)
    return list(bot.sent_texts(chat))


def pairing_code(engram: Engram) -> str:
    codes = [e["code"] for e in engram.log_events() if e.get("event") == "pairing.open"]
    assert len(codes) == 1, engram.tail()
    return str(codes[0])


Send = Callable[[int, str], Awaitable[None]]


@asynccontextmanager
async def unpaired_engram(
    tmp_path: Path, database_url: str
) -> AsyncIterator[tuple[Engram, FakeBotApi, str, Send]]:
    """``engram serve --webhook`` with no chat allowed: it, the fake Bot API, the pairing code
    (from its log) and a way to post a text message of a chat to its webhook."""
    async with (
        run_fake_bot_api() as bot,
        run_echo_anthropic() as model,
        httpx.AsyncClient(timeout=10) as client,
    ):
        port = free_port()
        env = serve_env(
            tmp_path,
            bot_api=bot.base_url,
            model=model.base_url,
            port=port,
            chats=[],
            DATABASE_URL=database_url,
        )
        engram = Engram(env, tmp_path / "engram.log")
        await engram.start()
        uid = iter(range(1, 10_000))

        async def send(chat: int, text: str) -> None:
            status = await post_update(client, port, message(next(uid), chat=chat, text=text))
            assert status == 200, engram.tail()

        try:
            await engram.wait_ready()
            yield engram, bot, pairing_code(engram), send
            await trio.sleep(1.0)  # nothing more is coming
            assert engram.running
        finally:
            await engram.stop()


async def test_strangers_guessing_wrong_codes_cannot_lock_out_the_owner(
    tmp_path: Path, database_url: str
) -> None:
    async with unpaired_engram(tmp_path, database_url) as (engram, bot, code, send):
        for chat in GUESSERS:
            for guess in range(6):  # one more than a chat's five
                await send(chat, f"/start WRONG{guess}X")
        await send(OWNER, f"/start {code}")
        # after eighteen wrong codes from three chats, the owner's right code still pairs
        assert any(t.startswith(PAIRED) for t in await replies(bot, OWNER)), engram.tail()
    answers = {c: bot.sent_texts(c) for c in GUESSERS}
    assert all(texts == answers[GUESSERS[0]] for texts in answers.values()), answers
    assert len(answers[GUESSERS[0]]) == 1  # one notice for six tries


async def test_a_stranger_cannot_tell_whether_pairing_is_open_or_its_code_was_wrong(
    tmp_path: Path, database_url: str
) -> None:
    async with unpaired_engram(tmp_path, database_url) as (_engram, bot, code, send):
        await send(7001, "hello?")  # pairing open: no code...
        await send(7002, "/start WRONGCODE1")  # ...and a wrong one
        await replies(bot, 7001), await replies(bot, 7002)
        await send(OWNER, f"/start {code}")
        await replies(bot, OWNER)
        await send(7003, "hello?")  # pairing closed: no code, and the spent code
        await send(7004, f"/start {code}")
        await replies(bot, 7003), await replies(bot, 7004)
    answers = {c: bot.sent_texts(c) for c in (7001, 7002, 7003, 7004)}
    assert all(len(texts) == 1 for texts in answers.values()), answers
    assert len({texts[0] for texts in answers.values()}) == 1, answers  # the same words
    assert code not in str(answers)
