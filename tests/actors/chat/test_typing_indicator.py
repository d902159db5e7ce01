"""typing_while: refresh timing, best-effort failures and cancellation (MockClock, in-memory)."""

from __future__ import annotations

import attrs
import pytest
import structlog
import trio
import trio.testing
from fakes.bot_api import Failure, run_fake_bot_api

from actors.chat.typing_indicator import ChatActionClient, TypingIndicator, typing_while
from actors.telegram.client import BotApiClient
from actors.telegram.errors import RateLimited


@attrs.define
class FakeActions:
    """In-memory ChatActionClient: records (time, chat_id, action); may fail or hang."""

    calls: list[tuple[float, int | str, str]] = attrs.field(factory=list)
    error: Exception | None = None
    hang: bool = False

    async def send_chat_action(self, chat_id: int | str, action: str = "typing") -> None:
        self.calls.append((trio.current_time(), chat_id, action))
        if self.hang:
            await trio.sleep_forever()
        await trio.lowlevel.checkpoint()
        if self.error is not None:
            raise self.error

    def times(self, t0: float) -> list[float]:
        return [round(t - t0, 6) for t, _, _ in self.calls]


def _as_client(fake: FakeActions) -> ChatActionClient:
    return fake


async def test_refreshes_every_5s_and_stops_with_the_body(
    autojump_clock: trio.testing.MockClock,
) -> None:
    actions = FakeActions()
    t0 = trio.current_time()
    async with typing_while(_as_client(actions), 42) as indicator:
        await trio.sleep(17)
    assert actions.times(t0) == [0, 5, 10, 15]
    assert {(chat, action) for _, chat, action in actions.calls} == {(42, "typing")}
    assert (indicator.sent, indicator.failed) == (4, 0)
    await trio.sleep(30)
    assert len(actions.calls) == 4  # nothing after the body ended


async def test_custom_interval_and_action(autojump_clock: trio.testing.MockClock) -> None:
    actions = FakeActions()
    t0 = trio.current_time()
    async with typing_while(actions, 1, interval=2.0, action="record_voice"):
        await trio.sleep(5)
    assert actions.times(t0) == [0, 2, 4]
    assert {a for _, _, a in actions.calls} == {"record_voice"}
    with pytest.raises(ValueError):
        typing_while(actions, 1, interval=0)


@pytest.mark.parametrize(
    "error",
    [RateLimited("sendChatAction", 429, 429, "Too Many Requests"), RuntimeError("bug")],
)
async def test_failing_chat_action_does_not_affect_the_body(
    autojump_clock: trio.testing.MockClock, error: Exception
) -> None:
    actions = FakeActions(error=error)
    with structlog.testing.capture_logs() as logs:
        async with typing_while(actions, 7) as indicator:
            await trio.sleep(11)
            result = "body done"
    assert result == "body done"
    assert (indicator.sent, indicator.failed) == (0, 3)
    assert [e["event"] for e in logs] == ["typing.failed"] * 3
    assert {e["log_level"] for e in logs} <= {"debug", "warning"}
    assert all(e["chat_id"] == 7 for e in logs)


async def test_hanging_chat_action_keeps_the_schedule(
    autojump_clock: trio.testing.MockClock,
) -> None:
    actions = FakeActions(hang=True)
    t0 = trio.current_time()
    async with typing_while(actions, 1):
        await trio.sleep(12)
    assert trio.current_time() - t0 == pytest.approx(12)
    assert actions.times(t0) == [0, 5, 10]


async def test_body_exception_propagates_unwrapped(autojump_clock: trio.testing.MockClock) -> None:
    actions = FakeActions()
    with pytest.raises(KeyError):
        async with typing_while(actions, 1):
            await trio.sleep(6)
            raise KeyError("boom")
    await trio.sleep(20)
    assert len(actions.calls) == 2


async def test_cancellation_of_the_body_is_not_swallowed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    actions = FakeActions()
    reached = False
    with trio.move_on_after(7) as scope:
        async with typing_while(actions, 1):
            await trio.sleep(100)
        reached = True
    assert scope.cancelled_caught and not reached
    assert trio.current_time() == pytest.approx(7)
    await trio.sleep(20)
    assert len(actions.calls) == 2


async def test_single_use(autojump_clock: trio.testing.MockClock) -> None:
    indicator = TypingIndicator(FakeActions(), 1)
    async with indicator:
        pass
    with pytest.raises(RuntimeError):
        async with indicator:
            pass


async def test_with_the_real_client_and_strict_fake() -> None:
    async with run_fake_bot_api() as fake, BotApiClient(fake.token, base_url=fake.base_url) as bot:
        fake.fail_next("sendChatAction", Failure.server_error())
        async with typing_while(bot, 5, interval=0.2):
            await trio.sleep(0.5)
        calls = fake.calls_to("sendChatAction")
        assert [c.status for c in calls][:2] == [500, 200]
        assert all(c.params == {"chat_id": 5, "action": "typing"} for c in calls)
