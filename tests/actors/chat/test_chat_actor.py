"""ChatActor timing and behaviour under MockClock, through in-memory fakes (no database)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from fakes.memory import CHAT, Agent, Bot, MemoryStore, msg

from actors.chat.actor import GAVE_UP, ChatActor
from actors.chat.commands import NOTHING_TO_STOP, STOPPED, command_table
from actors.chat.deps import ChatDeps
from actors.chat.turns import MODEL_AWAY, MODEL_GAVE_UP, SORRY
from actors.chat.wakes import RunningTurns, Wake
from actors.queues import inbox
from actors.telegram.errors import PhotoError, VoiceTooLarge
from actors.telegram.types import Voice
from memory.llm.protocol import ImageBlock
from runtime.registry import Registry


@attrs.define
class Harness:
    store: MemoryStore
    agent: Agent
    bot: Bot
    deps: ChatDeps
    registry: Registry[int, Wake]
    notified: list[int]

    async def deliver(self, payload: dict[str, Any], attempts: int = 0, crashes: int = 0) -> int:
        row_id = self.store.add(payload, attempts, crashes)
        await self.registry.send(CHAT, Wake())
        return row_id


@pytest.fixture
async def harness(nursery: trio.Nursery) -> Harness:
    store, bot = MemoryStore(), Bot()
    agent = Agent(store=store)
    notified: list[int] = []

    def outbox_ready(chat_id: int, row: object) -> None:
        notified.append(chat_id)

    deps = ChatDeps(store=store, turns=agent, bot=bot, outbox_ready=outbox_ready)

    async def transcribe(chat_id: int, voice: Voice) -> str:
        if voice.file_id == "bug":
            raise RuntimeError("transcriber bug")
        if voice.file_size and voice.file_size > 20 * 1024 * 1024:
            raise VoiceTooLarge(voice.file_size, 20 * 1024 * 1024)
        return "transcribed words"

    deps.transcribe = transcribe
    registry: Registry[int, Wake] = Registry(
        "chats", lambda chat_id: ChatActor(chat_id, deps), idle_timeout=600, key_name="chat_id"
    )
    await nursery.start(registry.run)
    return Harness(store, agent, bot, deps, registry, notified)


async def test_consecutive_fragments_join_after_1_5_s(
    autojump_clock: trio.testing.MockClock, harness: Harness
) -> None:
    t0 = trio.current_time()
    await harness.deliver(msg(1, 10, "a" * 4000))
    await trio.sleep(1.0)
    await harness.deliver(msg(2, 11, "b" * 300))
    await trio.sleep(10)
    assert len(harness.agent.turns) == 1
    turn, at = harness.agent.turns[0]
    assert turn.text == "a" * 4000 + "b" * 300
    assert turn.inbox_ids == (1, 2)
    assert turn.external_ids == ("update:1", "update:2")
    assert at == pytest.approx(t0 + 2.5)
    assert [c[1] for c in harness.store.commits] == [(1, 2)]
    assert {r.status for r in harness.store.rows.values()} == {"done"}


async def test_fragment_timeout_and_non_consecutive_id(
    autojump_clock: trio.testing.MockClock, harness: Harness
) -> None:
    await harness.deliver(msg(1, 10, "a" * 4000))
    await trio.sleep(2.0)  # past 1.5 s: the buffer flushed alone
    await harness.deliver(msg(2, 11, "late"))
    await harness.deliver(msg(3, 20, "c" * 4000))
    await harness.deliver(msg(4, 22, "gap"))  # not 21: flushes the buffer first
    await trio.sleep(5)
    texts = [t.text for t, _ in harness.agent.turns]
    # the buffer is flushed alone; the two queued behind "late" are answered in one turn
    assert texts == ["a" * 4000, "late", "c" * 4000 + "\n\ngap"]
    assert harness.agent.turns[2][0].inbox_ids == (3, 4)


async def test_fragments_capped_at_50k(
    autojump_clock: trio.testing.MockClock, harness: Harness
) -> None:
    for i in range(13):  # 13 x 4000 = 52,000 > 50,000
        await harness.deliver(msg(i + 1, 100 + i, "x" * 4000))
        await trio.sleep(0.1)
    await trio.sleep(5)
    lengths = [len(t.text) for t, _ in harness.agent.turns]
    assert sum(lengths) == 52_000
    assert max(lengths) <= 50_000
    assert len(lengths) == 2


async def test_media_group_combines_captions_after_500_ms(
    autojump_clock: trio.testing.MockClock, harness: Harness
) -> None:
    t0 = trio.current_time()
    await harness.deliver(
        msg(
            1,
            10,
            None,
            caption="first",
            media_group_id="g",
            photo=[{"file_id": "p", "file_unique_id": "u", "width": 90, "height": 90}],
        )
    )
    await harness.deliver(
        msg(
            2,
            11,
            None,
            media_group_id="g",
            photo=[{"file_id": "p", "file_unique_id": "u", "width": 90, "height": 90}],
        )
    )
    await harness.deliver(
        msg(
            3,
            12,
            None,
            caption="third",
            media_group_id="g",
            photo=[{"file_id": "p", "file_unique_id": "u", "width": 90, "height": 90}],
        )
    )
    await trio.sleep(3)
    assert len(harness.agent.turns) == 1
    turn, at = harness.agent.turns[0]
    assert turn.text == "first\nthird"
    assert turn.kind == "media_group"
    assert at == pytest.approx(t0 + 0.5)


async def test_stop_cancels_running_turn_without_queueing(
    autojump_clock: trio.testing.MockClock, harness: Harness
) -> None:
    running = harness.deps.running
    slow = await harness.deliver(msg(1, 10, "slow"))
    await trio.sleep(1)
    stop = harness.store.add(msg(2, 11, "/stop"))
    # what the router does on /stop, before the message reaches the actor's queue
    assert running.cancel(CHAT) is True
    await harness.registry.send(CHAT, Wake())
    await trio.sleep(1)
    assert harness.store.rows[slow].status == "skipped"
    assert harness.store.rows[stop].status == "done"
    assert [c[0] for c in harness.store.commits] == [STOPPED]
    assert trio.current_time() < 5  # did not wait for the 100 s turn
    assert running.cancel(CHAT) is False


async def test_stop_with_nothing_running(
    autojump_clock: trio.testing.MockClock, harness: Harness
) -> None:
    await harness.deliver(msg(1, 10, "/stop"))
    await trio.sleep(1)
    assert [c[0] for c in harness.store.commits] == [NOTHING_TO_STOP]


async def test_failing_turn_replies_sorry_and_keeps_going(
    autojump_clock: trio.testing.MockClock, harness: Harness
) -> None:
    await harness.deliver(msg(1, 10, "boom"))
    await harness.deliver(msg(2, 11, "fine"))
    await trio.sleep(1)
    assert [c[0] for c in harness.store.commits] == [SORRY, "echo:fine"]
    assert harness.notified == [CHAT, CHAT]


async def test_after_commit_hook_runs_once_the_reply_is_committed(
    autojump_clock: trio.testing.MockClock, harness: Harness
) -> None:
    await harness.deliver(msg(1, 10, "after one"))
    await trio.sleep(0.1)  # each on its own (not one burst)
    await harness.deliver(msg(2, 11, "after boom"))  # a failing hook: logged, the actor goes on
    await trio.sleep(0.1)
    await harness.deliver(msg(3, 12, "plain"))
    await trio.sleep(1)
    assert [c[0] for c in harness.store.commits] == [
        "echo:after one",
        "echo:after boom",
        "echo:plain",
    ]
    # each hook ran after its own turn's commit and before the next turn's
    assert harness.agent.after_commits == [("after one", 1), ("after boom", 2)]


async def test_poison_row_is_skipped_after_max_attempts(
    autojump_clock: trio.testing.MockClock, harness: Harness
) -> None:
    row = await harness.deliver(msg(1, 10, "hello"), attempts=3)
    await trio.sleep(1)
    assert harness.agent.turns == []
    assert harness.store.rows[row].status == "skipped"
    assert harness.store.commits[0][0] == GAVE_UP


async def test_a_row_in_its_turn_at_the_crash_cap_is_skipped_and_later_rows_go_on(
    autojump_clock: trio.testing.MockClock, harness: Harness
) -> None:
    cap = inbox.MAX_CRASHES
    spared = await harness.deliver(msg(1, 10, "below the cap"), crashes=cap - 1)
    await trio.sleep(1)
    poison = await harness.deliver(msg(2, 11, "kills the process"), crashes=cap)
    later = await harness.deliver(msg(3, 12, "later"))
    await trio.sleep(1)
    assert [t.text for t, _ in harness.agent.turns] == ["below the cap", "later"]
    assert [c[0] for c in harness.store.commits] == ["echo:below the cap", GAVE_UP, "echo:later"]
    assert harness.store.commits[1][2] == f"in its turn at {cap} crashes"
    statuses = [harness.store.rows[i].status for i in (spared, poison, later)]
    assert statuses == ["done", "skipped", "done"]


async def test_an_exception_in_a_rows_processing_is_charged_to_it_alone(
    autojump_clock: trio.testing.MockClock, harness: Harness
) -> None:
    bug = {"file_id": "bug", "file_unique_id": "u", "duration": 3}
    t0 = trio.current_time()
    row = harness.store.add(msg(1, 10, None, voice=bug))
    later = await harness.deliver(msg(2, 11, "after the bug"))
    seen = []
    for _ in range(40):
        await trio.sleep(0.1)
        seen.append(harness.store.rows[row].attempts)
        assert harness.store.rows[later].attempts == 0  # never charged for another's failure
    # tried again by the actor itself (no restart, no wake) after 0.5 s, 1 s, then given up 2 s on
    assert seen[:4] == [1, 1, 1, 1] and seen[5:14] == [2] * 9 and seen[-1] == 3
    assert harness.store.rows[row].status == "skipped"
    assert [c[0] for c in harness.store.commits] == [GAVE_UP, "echo:after the bug"]
    assert harness.store.rows[later].status == "done"
    assert harness.store.commits[0][3] == pytest.approx(t0 + 3.5)
    assert harness.registry.live_keys() == [CHAT]  # the same actor: it never crashed


async def test_a_chat_failing_on_every_message_never_crashes_its_actor(
    autojump_clock: trio.testing.MockClock, harness: Harness
) -> None:
    """Far past the registry's restart budget (5 crashes a minute would end the process): each
    bad row is that row's failure, skipped after its attempts; the good ones are answered."""
    bug = {"file_id": "bug", "file_unique_id": "u", "duration": 3}
    ids = []
    for n in range(30):
        payload = msg(n + 1, n + 10, None, voice=bug) if n % 3 else msg(n + 1, n + 10, f"ok {n}")
        ids.append(await harness.deliver(payload))
        await trio.sleep(0.5)
    await trio.sleep(600)
    statuses = [harness.store.rows[i].status for i in ids]
    assert statuses == ["skipped" if n % 3 else "done" for n in range(30)]
    assert [c[0] for c in harness.store.commits].count(GAVE_UP) == 20
    assert [t.text for t, _ in harness.agent.turns] == [f"ok {n}" for n in range(0, 30, 3)]


async def test_a_model_outage_is_told_once_and_waited_out_answering_in_order(
    autojump_clock: trio.testing.MockClock, harness: Harness
) -> None:
    t0 = trio.current_time()
    harness.agent.model_down_until = t0 + 1800
    first = await harness.deliver(msg(1, 10, "first"))
    await trio.sleep(10)
    second = await harness.deliver(msg(2, 11, "second"))
    await trio.sleep(300)
    third = await harness.deliver(msg(3, 12, "third"))
    await trio.sleep(1)
    assert harness.store.outbox == [MODEL_AWAY]  # told once, however many tries
    assert harness.notified == [CHAT]  # and the sender was woken for it
    assert "model unavailable" in (harness.store.rows[first].last_error or "")
    await trio.sleep(3600)
    # the oldest alone, then the two waiting behind it together
    assert harness.store.outbox == [MODEL_AWAY, "echo:first", "echo:second\n\nthird"]
    tried = [(t.text, at - t0) for t, at in harness.agent.turns]
    assert len(tried) >= 7 and {text for text, _ in tried[:-2]} == {"first"}  # later ones wait
    assert [text for text, _ in tried[-2:]] == ["first", "second\n\nthird"]
    gaps = [b - a - 110 for (_, a), (_, b) in itertools.pairwise(tried[:-1])]
    assert all(0 < gap <= 300 for gap in gaps) and max(gaps) > 100  # backoff, capped at 5 min
    for row_id in (first, second, third):
        row = harness.store.rows[row_id]
        assert (row.status, row.attempts, row.crashes) == ("done", 0, 0)


async def test_a_message_waiting_past_the_deadline_gets_an_apology(
    autojump_clock: trio.testing.MockClock, harness: Harness
) -> None:
    base = datetime(2026, 1, 1, tzinfo=UTC)
    harness.store.received_at = base
    harness.deps.wall_clock = lambda: base + timedelta(seconds=trio.current_time())
    harness.deps.model_deadline = 1000
    harness.agent.model_down_until = float("inf")
    row = await harness.deliver(msg(1, 10, "hello?"))
    await trio.sleep(3000)
    assert harness.store.outbox == [MODEL_AWAY, MODEL_GAVE_UP]
    assert harness.store.rows[row].status == "done"
    assert 1000 <= harness.store.commits[0][3] <= 1000 + 300 + 110


async def test_a_database_error_is_charged_only_when_it_is_the_rows_own(
    autojump_clock: trio.testing.MockClock, harness: Harness
) -> None:
    blip = await harness.deliver(msg(1, 10, "db blip"))
    await trio.sleep(60)  # crashed on the outage, restarted
    assert harness.store.rows[blip].attempts == 0  # the database's trouble, not the row's
    await harness.registry.send(CHAT, Wake())
    await trio.sleep(1)
    assert harness.store.rows[blip].status == "done"
    bad = await harness.deliver(msg(2, 11, "breaks a constraint"))
    for attempts in (1, 2):
        await trio.sleep(0.25)  # retried by the actor after 0.5 s, then 1 s
        assert harness.store.rows[bad].attempts == attempts  # deterministic: the row's own
        await trio.sleep(0.25)
    await trio.sleep(60)
    assert harness.store.rows[bad].status == "skipped"
    assert [c[0] for c in harness.store.commits] == ["echo:db blip", GAVE_UP]


async def test_typing_refreshed_every_5_s_during_turn(
    autojump_clock: trio.testing.MockClock, harness: Harness
) -> None:
    t0 = trio.current_time()
    await harness.deliver(msg(1, 10, "slow"))
    await trio.sleep(200)
    offsets = [round(t - t0, 3) for t in harness.bot.actions]
    assert offsets[:20] == [i * 5.0 for i in range(20)]  # 0, 5, ..., 95
    assert len(offsets) <= 21  # and it stops with the turn (at most one tick at t=100)


async def test_failing_chat_action_does_not_affect_turn(
    autojump_clock: trio.testing.MockClock, harness: Harness
) -> None:
    harness.bot.fail = True
    await harness.deliver(msg(1, 10, "hi"))
    await trio.sleep(1)
    assert [c[0] for c in harness.store.commits] == ["echo:hi"]


async def test_voice_is_transcribed_and_too_large_is_refused(
    autojump_clock: trio.testing.MockClock, harness: Harness
) -> None:
    voice = {"file_id": "f", "file_unique_id": "u", "duration": 3}
    await harness.deliver(msg(1, 10, None, voice=voice))
    big = dict(voice, file_size=21 * 1024 * 1024)
    await harness.deliver(msg(2, 11, None, voice=big))
    await trio.sleep(1)
    assert [(t.text, t.kind) for t, _ in harness.agent.turns] == [("transcribed words", "voice")]
    assert [c[0] for c in harness.store.commits] == [
        "echo:transcribed words",
        "That voice message is too large for me to transcribe (over 20 MB).",
    ]


async def test_unsupported_message_is_answered_and_skipped(
    autojump_clock: trio.testing.MockClock, harness: Harness
) -> None:
    row = await harness.deliver(msg(1, 10, None, sticker={"file_id": "s"}))
    await trio.sleep(1)
    assert harness.store.rows[row].status == "skipped"
    assert harness.agent.turns == []


async def test_running_turns_bookkeeping() -> None:
    running = RunningTurns()
    scope = trio.CancelScope()
    running.register(1, scope)
    assert running.cancel(1) and scope.cancel_called
    assert running.consume_stopped(1) and not running.consume_stopped(1)


async def test_unknown_command_is_answered_without_the_agent(
    autojump_clock: trio.testing.MockClock, harness: Harness
) -> None:
    await harness.deliver(msg(77, 10, "/mood today"))
    await harness.deliver(msg(78, 10, "/help@engram_bot"))
    await trio.sleep(1)
    assert harness.agent.turns == []
    assert [c[0] for c in harness.store.commits] == [
        "Unknown command /mood, see /help.",
        command_table().help_text(),
    ]


def _photo(file_id: str) -> list[dict[str, Any]]:
    return [{"file_id": file_id, "file_unique_id": f"u{file_id}", "width": 90, "height": 90}]


async def test_an_album_of_two_photos_is_one_turn_with_both_images(
    autojump_clock: trio.testing.MockClock, harness: Harness
) -> None:
    fetched: list[list[str]] = []

    async def photos(items: Any) -> tuple[ImageBlock, ...]:
        fetched.append([sizes[-1].file_id for sizes in items])
        return tuple(ImageBlock("image/jpeg", sizes[-1].file_id.encode()) for sizes in items)

    harness.deps.photos = photos
    await harness.deliver(
        msg(1, 10, None, caption="our trip", media_group_id="g", photo=_photo("a"))
    )
    await harness.deliver(msg(2, 11, None, media_group_id="g", photo=_photo("b")))
    await trio.sleep(1.0)
    [(turn, _)] = harness.agent.turns
    assert fetched == [["a", "b"]] and [i.data for i in turn.images] == [b"a", b"b"]
    assert turn.text == "[sent 2 photos] our trip" and turn.kind == "photo"


async def test_a_photo_that_cannot_be_downloaded_is_answered_with_why(
    autojump_clock: trio.testing.MockClock, harness: Harness
) -> None:
    async def photos(items: Any) -> tuple[ImageBlock, ...]:
        raise PhotoError("That photo is too large for me to look at (over 10 MB).")

    harness.deps.photos = photos
    await harness.deliver(msg(1, 10, None, photo=_photo("a")))
    await trio.sleep(1.0)
    assert harness.agent.turns == []
    assert [c[0] for c in harness.store.commits] == [
        "That photo is too large for me to look at (over 10 MB)."
    ]
