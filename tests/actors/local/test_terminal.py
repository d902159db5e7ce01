"""What ``engram chat`` shows and what a typed line means."""

from __future__ import annotations

import io

import pytest
import trio
import trio.testing

from actors.local.frames import Choice, Delivery, Draft, Notice
from actors.local.terminal import Pick, Quit, Say, Terminal

OFFER = Delivery(
    "message", "1.0", 77, "Forget this?", (Choice(1, "Forget", "t1"), Choice(2, "Keep", "t2"))
)


def test_a_number_answers_the_latest_offer() -> None:
    out = io.StringIO()
    term = Terminal(out)
    term.show(OFFER)
    assert "  1) Forget\n  2) Keep\n" in out.getvalue()
    assert term.read("2\n") == Pick(77, "t2")
    assert term.read("3") is None and "choose 1-2" in out.getvalue()


def test_other_text_is_a_message_and_closes_the_offer() -> None:
    term = Terminal(io.StringIO())
    term.show(OFFER)
    assert term.read("never mind") == Say("never mind")
    assert term.read("1") == Say("1")


def test_an_edit_without_choices_closes_the_offer() -> None:
    out = io.StringIO()
    term = Terminal(out)
    term.show(OFFER)
    term.show(Delivery("edit", "2.0", 77, "Forgotten.", ()))
    assert "engram (updated): Forgotten.\n" in out.getvalue()
    assert term.read("1") == Say("1")


def test_quit_and_blank_lines() -> None:
    term = Terminal(io.StringIO())
    assert term.read("/quit") == Quit() and term.read("/exit\n") == Quit()
    assert term.read("   \n") is None


def test_a_streamed_reply_is_printed_once() -> None:
    out = io.StringIO()
    term = Terminal(out)
    term.show(Draft("Hel"))
    term.show(Draft("Hello, wor"))
    term.show(Delivery("message", "3.0", 9, "Hello, world!", ()))
    term.show(Notice("Forgetting..."))
    assert out.getvalue() == "engram: Hello, world!\n(Forgetting...)\n"


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def test_what_could_not_be_stored_is_said_and_fails_the_exit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``engram chat`` with no engram listening: the typed line is not lost silently."""
    from engram_outside import free_port

    from actors.cli.chat import converse

    lines = iter(["hello\n", ""])

    async def read_line() -> str:
        await trio.sleep(0.1)
        return next(lines)

    out = io.StringIO()
    url = f"ws://127.0.0.1:{free_port()}/ws/chat"
    assert await converse(url, "t" * 32, Terminal(out), read_line) == 1
    assert "1 message(s) not delivered" in out.getvalue()
