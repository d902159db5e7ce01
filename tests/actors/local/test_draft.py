"""A local chat's streamed drafts: the turn's DraftStream (actors.chat.drafts) routed by
:class:`LocalOrTelegram` to the client as ``draft`` frames — the text as it grows, a tool call's
status line, at most one frame per interval, the latest text; no client, no frames (and no
error); other chats' drafts go to the Bot API."""

from __future__ import annotations

from itertools import pairwise

import attrs
import trio
import trio.testing

from actors.chat.drafts import TOOL_STATUS, Drafts
from actors.local import frames
from actors.local.draft import LocalOrTelegram
from actors.local.frames import Draft, ServerFrame
from actors.local.hub import DRAFT_INTERVAL, LocalHub, Session
from actors.local.ids import LOCAL_CHAT_ID
from memory.llm.protocol import TextDelta, ToolStarted


@attrs.define
class Telegram:
    drafts: list[tuple[int, str]] = attrs.field(factory=list)

    async def draft(self, chat_id: int, draft_id: int, text: str) -> None:
        self.drafts.append((chat_id, text))

    async def send(self, chat_id: int, text: str) -> int:
        raise AssertionError("no placeholder for a private chat")

    async def edit(self, chat_id: int, message_id: int, text: str) -> None:
        raise AssertionError("no edit for a private chat")

    async def delete(self, chat_id: int, message_id: int) -> None:
        raise AssertionError("no placeholder to delete")


async def test_a_local_turn_streams_to_the_client_and_telegram_sees_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    hub, telegram = LocalHub(), Telegram()
    shown: list[tuple[float, ServerFrame]] = []

    async def send_text(text: str) -> None:
        shown.append((trio.current_time(), frames.decode_server(text)))

    drafts = Drafts(LocalOrTelegram(hub, telegram), "auto", 0.2)
    async with trio.open_nursery() as nursery:
        await nursery.start(drafts.run)
        hub.attach(Session(LOCAL_CHAT_ID, send_text, trio.CancelScope(), nursery))
        stream = drafts.open(LOCAL_CHAT_ID)
        assert stream is not None
        async with stream:
            for piece in ("Hel", "lo", ", wor", "ld"):
                stream.on_event(TextDelta(piece))
                await trio.sleep(0.05)
            stream.on_event(ToolStarted("recall_memory"))
            await trio.sleep(DRAFT_INTERVAL * 3)
        stream.finish()
        await trio.sleep(1)
        other = drafts.open(12345)
        assert other is not None
        async with other:
            other.on_event(TextDelta("for Telegram"))
            await trio.sleep(1)
        other.finish()
        nursery.cancel_scope.cancel()
    texts = [frame.text for _, frame in shown if isinstance(frame, Draft)]
    assert len(texts) >= 2 and all("Hello, world".startswith(t) for t in texts[:-1])
    assert texts[-1] == f"Hello, world\n\n⏳ {TOOL_STATUS['recall_memory']}"
    times = [t for t, frame in shown if isinstance(frame, Draft)]
    assert all(b - a >= DRAFT_INTERVAL - 1e-9 for a, b in pairwise(times))
    assert all(chat == 12345 for chat, _ in telegram.drafts)
    assert telegram.drafts[-1] == (12345, "for Telegram")


async def test_no_client_no_frames(autojump_clock: trio.testing.MockClock) -> None:
    hub = LocalHub()
    sink = LocalOrTelegram(hub, Telegram())
    await sink.draft(LOCAL_CHAT_ID, 1, "nobody listens")  # no error
    assert await sink.send(LOCAL_CHAT_ID, "x") == 0
    await sink.delete(LOCAL_CHAT_ID, 0)
