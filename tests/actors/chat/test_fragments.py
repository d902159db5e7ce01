"""Text fragment reassembly and media-group buffering (pure state machines)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.chat.fragments import (
    FRAGMENT_GAP_S,
    FRAGMENT_MAX_CHARS,
    FRAGMENT_MIN_CHARS,
    MEDIA_GROUP_MAX_ITEMS,
    MEDIA_GROUP_WINDOW_S,
    FragmentBuffer,
    Inbound,
    MediaGroupBuffer,
    Reassembler,
    deadline,
    expire,
    flush_all,
    offer,
    offer_media,
    offer_text,
)

LONG = "a" * FRAGMENT_MIN_CHARS


def msg(
    mid: int,
    text: str,
    at: float,
    *,
    sender: int = 7,
    chat: int = 1,
    group: str | None = None,
) -> Inbound:
    return Inbound(
        chat_id=chat,
        sender_id=sender,
        message_id=mid,
        text=text,
        received_at=at,
        update_ids=(1000 + mid,),
        media_group_id=group,
    )


def test_short_message_passes_straight_through() -> None:
    state = Reassembler()
    out = offer(state, msg(1, "hello", 0.0), 0.0)
    assert [f.text for f in out] == ["hello"]
    assert out[0].message_ids == (1,)
    assert out[0].update_ids == (1001,)
    assert deadline(state) is None


def test_consecutive_fragments_within_gap_join() -> None:
    state = Reassembler()
    assert offer(state, msg(10, LONG, 0.0), 0.0) == []
    assert deadline(state) == pytest.approx(FRAGMENT_GAP_S)
    assert offer(state, msg(11, "b" * 4096, 1.0), 1.0) == []
    assert deadline(state) == pytest.approx(1.0 + FRAGMENT_GAP_S)  # timer reset
    assert offer(state, msg(12, "tail", 2.0), 2.0) == []
    assert expire(state, 3.49) == []
    out = expire(state, 3.5)
    assert len(out) == 1
    assert out[0].text == LONG + "b" * 4096 + "tail"  # no separator
    assert out[0].message_ids == (10, 11, 12)
    assert out[0].update_ids == (1010, 1011, 1012)
    assert out[0].received_at == 0.0
    assert deadline(state) is None


def test_non_consecutive_id_flushes_then_handles_alone() -> None:
    state = Reassembler()
    offer(state, msg(10, LONG, 0.0), 0.0)
    out = offer(state, msg(12, "later", 0.5), 0.5)
    assert [(f.text, f.message_ids) for f in out] == [(LONG, (10,)), ("later", (12,))]
    assert deadline(state) is None


def test_other_sender_flushes() -> None:
    state = Reassembler()
    offer(state, msg(10, LONG, 0.0), 0.0)
    out = offer(state, msg(11, "me too", 0.2, sender=8), 0.2)
    assert [(f.sender_id, f.text) for f in out] == [(7, LONG), (8, "me too")]


def test_too_late_by_arrival_time_flushes() -> None:
    state = Reassembler()
    offer(state, msg(10, LONG, 0.0), 0.0)
    out = offer(state, msg(11, "x", FRAGMENT_GAP_S), FRAGMENT_GAP_S)
    assert [f.text for f in out] == [LONG, "x"]


def test_expired_timer_is_honoured_even_if_caller_did_not_expire() -> None:
    state = Reassembler()
    offer(state, msg(10, LONG, 0.0), 0.0)
    # arrival gap says "fragment", but the buffer's timer ran out before it was offered
    out = offer(state, msg(11, "x", 1.0), 1.6)
    assert [f.text for f in out] == [LONG, "x"]


def test_backlog_judged_by_arrival_not_processing_time() -> None:
    state = Reassembler()
    offer(state, msg(10, LONG, 0.0), 100.0)
    out = offer(state, msg(11, "x", 5.0), 100.01)  # received 5 s apart: separate messages
    assert [f.text for f in out] == [LONG, "x"]
    state2 = Reassembler()
    offer(state2, msg(10, LONG, 0.0), 100.0)
    assert offer(state2, msg(11, "x", 0.3), 100.01) == []
    assert [f.text for f in flush_all(state2)] == [LONG + "x"]


def test_long_message_after_flush_starts_new_buffer() -> None:
    state = Reassembler()
    offer(state, msg(10, LONG, 0.0), 0.0)
    out = offer(state, msg(20, "c" * 4500, 0.1), 0.1)
    assert [f.message_ids for f in out] == [(10,)]
    assert deadline(state) is not None
    assert [f.message_ids for f in flush_all(state)] == [(20,)]


def test_cap_flushes_and_overflowing_fragment_starts_new_buffer() -> None:
    buf = FragmentBuffer()
    out = []
    chunk = "z" * 4096
    for i in range(14):  # 14 * 4096 = 57,344 > 50,000
        out += offer_text(buf, msg(100 + i, chunk, i * 0.1), i * 0.1)
    assert len(out) == 1
    first = out[0]
    assert len(first.text) == 12 * 4096 <= FRAGMENT_MAX_CHARS
    assert first.message_ids == tuple(range(100, 112))
    assert buf.chars == 2 * 4096
    assert [m.message_id for m in buf.items] == [112, 113]


def test_cap_overflowing_short_fragment_passes_alone() -> None:
    buf = FragmentBuffer()
    out = []
    for i in range(12):
        out += offer_text(buf, msg(i, "z" * 4096, i * 0.1), i * 0.1)
    assert out == []
    pad = FRAGMENT_MAX_CHARS - 12 * 4096  # 848 chars still fit
    out += offer_text(buf, msg(12, "p" * pad, 1.2), 1.2)
    assert out == [] and buf.chars == FRAGMENT_MAX_CHARS
    out += offer_text(buf, msg(13, "!", 1.3), 1.3)
    assert [len(f.text) for f in out] == [FRAGMENT_MAX_CHARS, 1]
    assert buf.items == []


def test_offer_text_rejects_media_items() -> None:
    with pytest.raises(ValueError):
        offer_text(FragmentBuffer(), msg(1, "x", 0.0, group="g"), 0.0)
    with pytest.raises(ValueError):
        offer_media(MediaGroupBuffer(), msg(1, "x", 0.0), 0.0)


# --- media groups ---------------------------------------------------------------------------


def test_media_group_combines_captions() -> None:
    state = Reassembler()
    assert offer(state, msg(1, "first caption", 0.0, group="g1"), 0.0) == []
    assert offer(state, msg(2, "", 0.1, group="g1"), 0.1) == []
    assert offer(state, msg(3, "  ", 0.2, group="g1"), 0.2) == []
    assert offer(state, msg(4, "second", 0.3, group="g1"), 0.3) == []
    assert deadline(state) == pytest.approx(0.3 + MEDIA_GROUP_WINDOW_S)  # extended
    assert expire(state, 0.79) == []
    out = expire(state, 0.8)
    assert len(out) == 1
    assert out[0].text == "first caption\nsecond"
    assert out[0].message_ids == (1, 2, 3, 4)
    assert out[0].update_ids == (1001, 1002, 1003, 1004)
    assert out[0].media_group_id == "g1"


def test_media_group_window_from_first_item() -> None:
    state = Reassembler()
    offer(state, msg(1, "cap", 0.0, group="g"), 0.0)
    assert deadline(state) == pytest.approx(MEDIA_GROUP_WINDOW_S)
    assert [f.text for f in expire(state, MEDIA_GROUP_WINDOW_S)] == ["cap"]


def test_media_group_without_captions_has_empty_text() -> None:
    state = Reassembler()
    offer(state, msg(1, "", 0.0, group="g"), 0.0)
    offer(state, msg(2, "", 0.0, group="g"), 0.0)
    (out,) = flush_all(state)
    assert out.text == "" and out.parts == 2 and out.last_message_id == 2


def test_other_group_or_text_flushes_pending_group_in_order() -> None:
    state = Reassembler()
    offer(state, msg(1, "a", 0.0, group="g1"), 0.0)
    out = offer(state, msg(2, "b", 0.1, group="g2"), 0.1)
    assert [(f.media_group_id, f.text) for f in out] == [("g1", "a")]
    out = offer(state, msg(3, "text", 0.2), 0.2)
    assert [(f.media_group_id, f.text) for f in out] == [("g2", "b"), (None, "text")]


def test_text_buffer_flushed_before_media_group() -> None:
    state = Reassembler()
    offer(state, msg(1, LONG, 0.0), 0.0)
    out = offer(state, msg(2, "cap", 0.1, group="g"), 0.1)
    assert [f.text for f in out] == [LONG]
    assert [f.text for f in flush_all(state)] == ["cap"]


def test_media_group_full_album_flushes_immediately() -> None:
    buf = MediaGroupBuffer()
    out = []
    for i in range(MEDIA_GROUP_MAX_ITEMS):
        out += offer_media(buf, msg(i, f"c{i}", 0.0, group="g"), 0.0)
    assert len(out) == 1 and out[0].parts == MEDIA_GROUP_MAX_ITEMS
    assert buf.items == []


def test_late_media_item_after_expiry_starts_new_message() -> None:
    buf = MediaGroupBuffer()
    offer_media(buf, msg(1, "a", 0.0, group="g"), 0.0)
    out = offer_media(buf, msg(2, "b", 0.6, group="g"), 0.6)
    assert [f.text for f in out] == ["a"]
    assert buf.group_id == "g" and len(buf.items) == 1


# --- properties -----------------------------------------------------------------------------


@st.composite
def text_streams(draw: st.DrawFn) -> list[tuple[Inbound, float]]:
    """Plain-text messages (Telegram-sized) with mostly consecutive ids and small gaps."""
    n = draw(st.integers(min_value=0, max_value=30))
    mid, at = 1, 0.0
    out: list[tuple[Inbound, float]] = []
    for i in range(n):
        mid += draw(st.sampled_from([1, 1, 1, 2]))
        at += draw(st.sampled_from([0.0, 0.1, 0.5, 1.4, 1.5, 3.0]))
        lag = draw(st.sampled_from([0.0, 0.0, 0.2, 2.0]))
        size = draw(st.sampled_from([0, 5, 3999, 4000, 4096]))
        sender = draw(st.sampled_from([7, 7, 7, 8]))
        text = chr(ord("a") + i % 26) * size
        out.append((msg(mid, text, at, sender=sender), at + lag))
    return out


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(stream=text_streams(), use_timer=st.booleans())
def test_fragments_never_lose_duplicate_or_reorder(
    stream: list[tuple[Inbound, float]], use_timer: bool
) -> None:
    state = Reassembler()
    outputs = []
    now = 0.0
    for m, offered_at in stream:
        now = max(now, offered_at)
        due = deadline(state)
        if use_timer and due is not None and due <= now:
            outputs += expire(state, due)
        outputs += offer(state, m, now)
    outputs += flush_all(state)
    assert "".join(f.text for f in outputs) == "".join(m.text for m, _ in stream)
    ids = [i for f in outputs for i in f.message_ids]
    assert ids == [m.message_id for m, _ in stream]
    assert [u for f in outputs for u in f.update_ids] == [
        u for m, _ in stream for u in m.update_ids
    ]
    by_id = {m.message_id: m for m, _ in stream}
    for f in outputs:
        assert len(f.text) <= FRAGMENT_MAX_CHARS
        if f.parts > 1:
            assert len(by_id[f.message_ids[0]].text) >= FRAGMENT_MIN_CHARS
            assert {by_id[i].sender_id for i in f.message_ids} == {f.sender_id}
            assert all(b - a == 1 for a, b in zip(f.message_ids, f.message_ids[1:], strict=False))


@settings(max_examples=50, deadline=None)
@given(n=st.integers(min_value=1, max_value=40))
def test_many_fragments_never_exceed_cap(n: int) -> None:
    buf = FragmentBuffer()
    outputs = []
    for i in range(n):
        outputs += offer_text(buf, msg(i, "q" * 4096, i * 0.01), i * 0.01)
    outputs += flush_all(Reassembler(fragments=buf))
    assert all(len(f.text) <= FRAGMENT_MAX_CHARS for f in outputs)
    assert sum(len(f.text) for f in outputs) == n * 4096
