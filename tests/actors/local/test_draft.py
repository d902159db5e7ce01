"""A local chat's drafts: the model's text as it grows, at most one frame per interval, the
latest text; a tool call shows a status line; no client, no frames (and no error)."""

from __future__ import annotations

import trio
import trio.testing

from actors.local import frames
from actors.local.draft import LocalDraft
from actors.local.frames import Draft, ServerFrame
from actors.local.hub import DRAFT_INTERVAL, LocalHub, Session
from actors.local.ids import LOCAL_CHAT_ID
from memory.llm.protocol import TextDelta, ToolStarted


async def test_drafts_are_throttled_and_carry_the_latest_text(
    autojump_clock: trio.testing.MockClock,
) -> None:
    hub = LocalHub()
    shown: list[tuple[float, ServerFrame]] = []

    async def send_text(text: str) -> None:
        shown.append((trio.current_time(), frames.decode_server(text)))

    draft = LocalDraft(hub, LOCAL_CHAT_ID)
    draft.on_event(TextDelta("lost"))  # no client yet: nothing, no error
    draft.text = ""
    async with trio.open_nursery() as nursery:
        hub.attach(Session(LOCAL_CHAT_ID, send_text, trio.CancelScope(), nursery))
        start = trio.current_time()
        for piece in ("Hel", "lo", ", wor", "ld"):
            draft.on_event(TextDelta(piece))
        await trio.sleep(DRAFT_INTERVAL / 4)
        draft.on_event(ToolStarted("recall_memory"))
        draft.on_event(TextDelta("!"))
        await trio.sleep(DRAFT_INTERVAL * 3)
    assert [frame for _, frame in shown] == [Draft("Hello, world"), Draft("Hello, world!")]
    times = [t - start for t, _ in shown]
    assert times[1] - times[0] >= DRAFT_INTERVAL


async def test_a_tool_call_shows_a_status_line(autojump_clock: trio.testing.MockClock) -> None:
    hub = LocalHub()
    shown: list[ServerFrame] = []

    async def send_text(text: str) -> None:
        shown.append(frames.decode_server(text))

    async with trio.open_nursery() as nursery:
        hub.attach(Session(LOCAL_CHAT_ID, send_text, trio.CancelScope(), nursery))
        LocalDraft(hub, LOCAL_CHAT_ID).on_event(ToolStarted("recall_memory"))
        await trio.sleep(DRAFT_INTERVAL * 2)
    assert shown == [Draft("", "using recall memory…")]
