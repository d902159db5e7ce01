"""Streamed drafts (issue 23), on trio's MockClock through an in-memory sink: the throttle, the
keep-alive, tool status lines, 429 backoff, the edit-based fallback and its placeholder, and
Stop through nested running turns."""

from __future__ import annotations

from itertools import pairwise

import attrs
import pytest
import trio
import trio.testing

from actors.chat.drafts import (
    KEEPALIVE,
    TOOL_STATUS,
    ChatProgress,
    Drafts,
    DraftStream,
    draft_view,
)
from actors.chat.wakes import RunningTurns
from actors.telegram.errors import BadRequest, RateLimited
from memory.llm.protocol import TextDelta, ToolStarted

CHAT = 7001


@attrs.define
class Sink:
    """Records what a stream shows, with the (mock) time."""

    drafts: list[tuple[float, int, str]] = attrs.field(factory=list)
    sent: list[tuple[float, str]] = attrs.field(factory=list)
    edits: list[tuple[float, int, str]] = attrs.field(factory=list)
    deleted: list[int] = attrs.field(factory=list)
    refuse_drafts: bool = False
    rate_limit_next: int = 0

    async def draft(self, chat_id: int, draft_id: int, text: str) -> None:
        if self.refuse_drafts:
            raise BadRequest("sendMessageDraft", 400, 400, "Bad Request: drafts unavailable")
        if self.rate_limit_next:
            self.rate_limit_next -= 1
            raise RateLimited("sendMessageDraft", 429, 429, "Too Many Requests", retry_after=3)
        self.drafts.append((trio.current_time(), draft_id, text))

    async def send(self, chat_id: int, text: str) -> int:
        self.sent.append((trio.current_time(), text))
        return 500 + len(self.sent)

    async def edit(self, chat_id: int, message_id: int, text: str) -> None:
        self.edits.append((trio.current_time(), message_id, text))

    async def delete(self, chat_id: int, message_id: int) -> None:
        self.deleted.append(message_id)


async def stream_words(stream: DraftStream, words: int, every: float) -> str:
    text = ""
    for n in range(words):
        piece = f"word{n} "
        text += piece
        stream.on_event(TextDelta(piece))
        await trio.sleep(every)
    return text


@pytest.fixture
def clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def run_turn(drafts: Drafts, body: object) -> DraftStream:
    """Open a stream as the chat actor does, run ``body(stream)``, finish it."""
    async with trio.open_nursery() as nursery:
        await nursery.start(drafts.run)
        stream = drafts.open(CHAT)
        assert stream is not None
        async with stream:
            await body(stream)  # type: ignore[operator]
        stream.finish()
        await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    return stream


async def test_the_draft_grows_at_most_once_per_interval(clock: trio.testing.MockClock) -> None:
    sink = Sink()
    drafts = Drafts(sink, "auto", 0.8)
    written = ""

    async def body(stream: DraftStream) -> None:
        nonlocal written
        written = await stream_words(stream, 60, 0.05)  # 3 s of text, 20 words a second

    stream = await run_turn(drafts, body)
    assert sink.drafts[0][2] == ""  # "Thinking..." at once
    times = [t for t, _, _ in sink.drafts]
    gaps = [b - a for a, b in pairwise(times[1:])]
    assert gaps and min(gaps) >= 0.8 - 1e-9  # never faster than DRAFT_INTERVAL
    assert 3 <= len(sink.drafts) <= 6
    texts = [t for _, _, t in sink.drafts[1:]]
    assert all(b.startswith(a.rstrip()) for a, b in pairwise(texts))
    assert {d for _, d, _ in sink.drafts} == {stream.draft_id} and stream.draft_id != 0
    assert written.startswith(texts[-1].rstrip())


async def test_a_tool_call_shows_its_status_then_the_next_answer_replaces_the_text(
    clock: trio.testing.MockClock,
) -> None:
    sink = Sink()

    async def body(stream: DraftStream) -> None:
        stream.on_event(TextDelta("Let me look."))
        await trio.sleep(1)
        stream.on_event(ToolStarted("search_entries"))
        await trio.sleep(1)
        stream.on_event(TextDelta("You slept well."))
        await trio.sleep(1)

    await run_turn(Drafts(sink, "auto", 0.8), body)
    shown = [t for _, _, t in sink.drafts]
    assert f"Let me look.\n\n⏳ {TOOL_STATUS['search_entries']}" in shown
    assert shown[-1] == "You slept well."


async def test_an_idle_draft_is_kept_alive(clock: trio.testing.MockClock) -> None:
    sink = Sink()

    async def body(stream: DraftStream) -> None:
        stream.on_event(ToolStarted("recall_conversation"))
        await trio.sleep(KEEPALIVE * 2.5)  # a long tool call: Telegram drops a draft at 30 s

    await run_turn(Drafts(sink, "auto", 0.8), body)
    times = [t for t, _, _ in sink.drafts]
    assert len(times) >= 4 and max(b - a for a, b in pairwise(times)) <= 30


async def test_flood_control_waits_its_retry_after(clock: trio.testing.MockClock) -> None:
    sink = Sink(rate_limit_next=1)

    async def body(stream: DraftStream) -> None:
        await stream_words(stream, 20, 0.25)

    await run_turn(Drafts(sink, "auto", 0.8), body)
    # the first ("Thinking...") was refused with retry_after 3: nothing before 3 s
    assert sink.drafts and sink.drafts[0][0] >= 3.0


async def test_a_refused_draft_stops_the_stream_and_nothing_else(
    clock: trio.testing.MockClock,
) -> None:
    sink = Sink(refuse_drafts=True)

    async def body(stream: DraftStream) -> None:
        await stream_words(stream, 40, 0.1)

    stream = await run_turn(Drafts(sink, "auto", 0.8), body)
    assert stream.updates == 0 and not sink.drafts and not sink.sent and not sink.edits


async def test_edit_mode_edits_one_message_deleted_at_the_end(
    clock: trio.testing.MockClock,
) -> None:
    sink = Sink()

    async def body(stream: DraftStream) -> None:
        await stream_words(stream, 40, 0.1)

    stream = await run_turn(Drafts(sink, "edit", 0.8), body)
    assert stream.mode == "edit" and not sink.drafts
    assert len(sink.sent) == 1 and sink.edits
    times = [sink.sent[0][0]] + [t for t, _, _ in sink.edits]
    assert min(b - a for a, b in pairwise(times)) >= 1.0 - 1e-9
    assert sink.deleted == [501]  # the placeholder goes once the reply is queued


async def test_groups_are_not_streamed_under_auto_and_off_streams_nothing(
    clock: trio.testing.MockClock,
) -> None:
    sink = Sink()
    drafts = Drafts(sink, "auto", 0.8)
    async with trio.open_nursery() as nursery:
        await nursery.start(drafts.run)
        assert drafts.open(-100123) is None  # auto: drafts exist in private chats only
        assert Drafts(sink, "off").open(CHAT) is None
        edit = Drafts(sink, "edit")
        await nursery.start(edit.run)
        private = edit.open(CHAT)
        assert private is not None and private.mode == "edit"
        group = edit.open(-100123)
        assert group is not None and group.mode == "edit"
        nursery.cancel_scope.cancel()
    assert Drafts(sink, "auto").open(CHAT) is None  # not running: nothing streams


def test_a_long_text_shows_its_end_within_telegrams_limit() -> None:
    view = draft_view("x" * 10_000 + " the end", "remembering…")
    assert len(view) <= 4096 and view.startswith("…") and "the end" in view
    assert view.endswith("⏳ remembering…")
    emoji = draft_view("🐝" * 5_000, None)  # two UTF-16 units each: Telegram counts those
    assert len(emoji.encode("utf-16-le")) // 2 <= 4096 and emoji.endswith("🐝")


async def test_stop_cancels_the_innermost_scope_and_only_for_the_shown_draft() -> None:
    running = RunningTurns()
    stream = DraftStream(CHAT, Sink(), "draft")
    progress = ChatProgress(CHAT, running, stream)
    with trio.CancelScope() as turn:
        running.register(CHAT, turn)
        with progress.stoppable() as generation:
            assert not running.cancel(CHAT, draft_id=stream.draft_id + 1)  # an older draft
            assert running.cancel(CHAT, draft_id=stream.draft_id)
            await trio.sleep(1)
        assert generation.cancelled_caught and not turn.cancel_called
        assert running.consume_stopped(CHAT) and not running.consume_stopped(CHAT)
        running.unregister(CHAT, turn)
    assert not running.cancel(CHAT)  # nothing running any more
