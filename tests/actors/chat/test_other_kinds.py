"""Messages engram does not read get a short answer naming their kind (parsed from real
update JSON), not the generic line."""

from __future__ import annotations

from typing import Any

import pytest

from actors.chat.other_kinds import ANSWERS, answer_for
from actors.chat.turns import UNSUPPORTED
from actors.telegram.types import parse_update


def _message(**fields: Any) -> Any:
    update = parse_update(
        {
            "update_id": 1,
            "message": {
                "message_id": 3,
                "date": 1,
                "chat": {"id": 5, "type": "private"},
                "from": {"id": 5, "is_bot": False, "first_name": "A"},
                **fields,
            },
        }
    )
    assert update.message is not None
    return update.message


FILE = {"file_id": "f", "file_unique_id": "u"}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("sticker", {**FILE, "type": "regular", "width": 512, "height": 512}),
        ("document", {**FILE, "file_name": "a.pdf"}),
        ("video_note", {**FILE, "length": 240, "duration": 3}),
        ("video", {**FILE, "width": 1, "height": 1, "duration": 1}),
        ("audio", {**FILE, "duration": 1}),
        ("location", {"latitude": 1.0, "longitude": 2.0}),
    ],
)
def test_each_kind_gets_its_own_answer(field: str, value: Any) -> None:
    msg = _message(**{field: value})
    assert msg.other_kind == field
    assert answer_for(msg) == ANSWERS[field] != UNSUPPORTED


def test_a_sticker_answer_names_its_emoji() -> None:
    sticker = {**FILE, "type": "regular", "width": 1, "height": 1, "emoji": "😂"}
    assert "😂" in answer_for(_message(sticker=sticker))


def test_an_unknown_kind_gets_the_generic_line() -> None:
    assert answer_for(_message(giveaway={"chats": []})) == UNSUPPORTED


def test_photo_sizes_are_parsed_smallest_first() -> None:
    sizes = [
        {**FILE, "file_id": "s", "width": 90, "height": 60, "file_size": 1000},
        {**FILE, "file_id": "l", "width": 1280, "height": 853},
    ]
    msg = _message(photo=sizes, caption="hi")
    assert [p.file_id for p in msg.photo] == ["s", "l"] and msg.has_photo
    assert msg.photo[1].file_size is None and msg.other_kind is None
