"""The ``/ws/chat`` frames: what a client may send is checked, every refusal has a code."""

from __future__ import annotations

import json

import pytest

from actors.local.errors import BadFrame
from actors.local.frames import (
    MAX_TEXT,
    Ack,
    Choice,
    Choose,
    Delivery,
    Draft,
    Error,
    Hello,
    Notice,
    Send,
    ServerFrame,
    Stored,
    Typing,
    choices_of,
    decode_client,
    decode_server,
    encode,
)


def test_client_frames_round_trip() -> None:
    for frame in (Send("c-1", "hello"), Choose("c_2", 7, "tok"), Ack("17.0")):
        assert decode_client(encode(frame)) == frame


def test_server_frames_round_trip() -> None:
    frames: list[ServerFrame] = [
        Hello(2**53 + 1),
        Stored("c1"),
        Delivery(
            "message",
            "3.0",
            5,
            "hi",
            (Choice(1, "Forget", "t1"), Choice(2, "Docs", None, "https://x.test")),
            4,
        ),
        Delivery("edit", "4.0", 5, None, ()),
        Draft("partial", "using recall memory…"),
        Typing(),
        Notice("Forgetting..."),
        Error("bad_field", "why", "c1"),
    ]
    for frame in frames:
        assert decode_server(encode(frame)) == frame


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b"binary", "not_text"),
        ("not json", "not_json"),
        ("[1, 2]", "not_json"),
        ('{"type": "shout"}', "unknown_type"),
        ('{"type": "send", "id": "a b", "text": "x"}', "bad_field"),
        ('{"type": "send", "id": "' + "a" * 65 + '", "text": "x"}', "bad_field"),
        ('{"type": "send", "id": "a", "text": 5}', "bad_field"),
        ('{"type": "send", "id": "a", "text": "   "}', "empty"),
        (json.dumps({"type": "send", "id": "a", "text": "x" * (MAX_TEXT + 1)}), "too_long"),
        ('{"type": "choose", "id": "a", "message_id": true, "data": "t"}', "bad_field"),
        ('{"type": "choose", "id": "a", "message_id": -3, "data": "t"}', "bad_field"),
        ('{"type": "choose", "id": "a", "message_id": 3, "data": ""}', "bad_field"),
        ('{"type": "choose", "id": "a", "message_id": 3, "data": "' + "d" * 65 + '"}', "bad_field"),
        ('{"type": "ack"}', "bad_field"),
    ],
)
def test_bad_client_frames_are_refused_with_a_code(raw: str | bytes, code: str) -> None:
    with pytest.raises(BadFrame) as refused:
        decode_client(raw)
    assert refused.value.code == code and refused.value.detail


def test_a_message_of_the_longest_length_is_accepted() -> None:
    assert decode_client(encode(Send("a", "é" * MAX_TEXT))) == Send("a", "é" * MAX_TEXT)


def test_a_keyboard_becomes_numbered_choices_row_by_row() -> None:
    markup = {
        "inline_keyboard": [
            [{"text": "Forget", "callback_data": "t1"}, {"text": "Keep", "callback_data": "t2"}],
            [{"text": "Docs", "url": "https://docs.test"}],
        ]
    }
    assert choices_of(markup) == (
        Choice(1, "Forget", "t1"),
        Choice(2, "Keep", "t2"),
        Choice(3, "Docs", None, "https://docs.test"),
    )
    assert choices_of(None) == () and choices_of({"inline_keyboard": []}) == ()
