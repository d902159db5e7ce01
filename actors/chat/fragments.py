"""Pure state machines for the chat actor's inbound buffering (no I/O, no clock).

Two rules, both from OpenClaw (seed 000):

* **Text fragment reassembly.** Telegram splits a long paste (> 4096 chars) into several
  updates with consecutive ``message_id``s. A text of at least ``FRAGMENT_MIN_CHARS`` starts a
  buffer; a following text from the same chat and sender whose ``message_id`` is the last one
  plus one, *received* less than ``FRAGMENT_GAP_S`` after the previous fragment and before the
  buffer's timer expired, is appended and resets the timer. Anything else flushes the buffer
  first and is then handled on its own. Fragments are joined with no separator (Telegram
  splits mid-text).
* **Media-group buffering.** Items sharing a ``media_group_id`` are collected and produced as
  one message whose text is the non-empty captions joined by ``"\\n"``. The window is
  ``MEDIA_GROUP_WINDOW_S`` from the first item and **each later item extends it** to its own
  arrival + ``MEDIA_GROUP_WINDOW_S`` (a debounce: album items arrive as a burst, and a straggler
  must not become a second agent turn); a group flushes at once when it reaches
  ``MEDIA_GROUP_MAX_ITEMS`` (Telegram's album limit).

Cap rule: when appending a fragment would take the combined text over ``FRAGMENT_MAX_CHARS``,
the buffer is flushed and the overflowing message is handled **on its own** — it starts a new
buffer if it is itself long (>= ``FRAGMENT_MIN_CHARS``), else it passes straight through. So a
combined text never exceeds the cap; a single message is never split or truncated (a message
longer than the cap — impossible from Telegram — passes straight through unbuffered).

Timing: the fragment gap is measured between the messages' ``received_at`` (so a backlog read
after a restart is judged by arrival, not by processing time), while the timers are driven by
the caller's ``now``: ``deadline`` = ``now`` of the last accepted item + the window. The actor
sleeps until :func:`deadline` and calls :func:`expire`; :func:`offer` also treats a
buffer whose deadline has passed as expired, so a late timer cannot glue unrelated messages.

:class:`Reassembler` combines both buffers so at most one unit is pending at a time and the
output order always equals the input order. Before handling anything that is not a text or a
captioned media item (voice, callback, command), the actor calls :func:`flush_all`.
"""

from __future__ import annotations

import attrs

from actors.telegram.media import PhotoSize

FRAGMENT_MIN_CHARS = 4000
FRAGMENT_GAP_S = 1.5
FRAGMENT_MAX_CHARS = 50_000
MEDIA_GROUP_WINDOW_S = 0.5
MEDIA_GROUP_MAX_ITEMS = 10


@attrs.frozen
class Inbound:
    """One inbound text message or media item (``text`` is the text or the caption, or "")."""

    chat_id: int
    sender_id: int
    message_id: int
    text: str
    received_at: float
    update_ids: tuple[int, ...] = ()
    media_group_id: str | None = None
    #: the photo it carries (its sizes), if any
    photos: tuple[tuple[PhotoSize, ...], ...] = ()


@attrs.frozen
class Flushed:
    """A message ready for a turn: the joined text plus every source id to mark done."""

    chat_id: int
    sender_id: int
    text: str
    message_ids: tuple[int, ...]
    update_ids: tuple[int, ...]
    received_at: float
    media_group_id: str | None = None
    #: every photo of the combined messages, in order (each one's sizes)
    photos: tuple[tuple[PhotoSize, ...], ...] = ()

    @property
    def parts(self) -> int:
        """How many inbound messages were combined."""
        return len(self.message_ids)

    @property
    def last_message_id(self) -> int:
        """The newest source message id (the one to reply to)."""
        return self.message_ids[-1]


def _combine(items: list[Inbound], text: str) -> Flushed:
    first = items[0]
    return Flushed(
        chat_id=first.chat_id,
        sender_id=first.sender_id,
        text=text,
        message_ids=tuple(m.message_id for m in items),
        update_ids=tuple(u for m in items for u in m.update_ids),
        received_at=first.received_at,
        media_group_id=first.media_group_id,
        photos=tuple(p for m in items for p in m.photos),
    )


def single(msg: Inbound) -> Flushed:
    """Wrap one message as a :class:`Flushed` on its own."""
    return _combine([msg], msg.text)


# --- text fragments -------------------------------------------------------------------------


@attrs.define
class FragmentBuffer:
    """Pending fragments of one long paste (empty when nothing is buffered)."""

    items: list[Inbound] = attrs.Factory(list)
    chars: int = 0
    last_offer_at: float = 0.0


def fragment_deadline(buf: FragmentBuffer) -> float | None:
    """When the buffered fragments must be flushed, or None if the buffer is empty."""
    return buf.last_offer_at + FRAGMENT_GAP_S if buf.items else None


def flush_fragments(buf: FragmentBuffer) -> Flushed | None:
    """Empty the buffer and return the joined fragments, if any."""
    if not buf.items:
        return None
    out = _combine(buf.items, "".join(m.text for m in buf.items))
    buf.items = []
    buf.chars = 0
    return out


def expire_fragments(buf: FragmentBuffer, now: float) -> Flushed | None:
    """Flush the buffer if its deadline is at or before ``now``."""
    due = fragment_deadline(buf)
    return flush_fragments(buf) if due is not None and now >= due else None


def _continues(buf: FragmentBuffer, msg: Inbound, now: float) -> bool:
    if not buf.items:
        return False
    last = buf.items[-1]
    return (
        msg.chat_id == last.chat_id
        and msg.sender_id == last.sender_id
        and msg.message_id == last.message_id + 1
        and 0.0 <= msg.received_at - last.received_at < FRAGMENT_GAP_S
        and now < buf.last_offer_at + FRAGMENT_GAP_S
    )


def offer_text(buf: FragmentBuffer, msg: Inbound, now: float) -> list[Flushed]:
    """Feed one text message; return what is ready now, in order (possibly nothing)."""
    if msg.media_group_id is not None:
        raise ValueError("offer_text takes plain text messages; route media groups elsewhere")
    if _continues(buf, msg, now) and buf.chars + len(msg.text) <= FRAGMENT_MAX_CHARS:
        buf.items.append(msg)
        buf.chars += len(msg.text)
        buf.last_offer_at = now
        return []
    out: list[Flushed] = []
    flushed = flush_fragments(buf)
    if flushed is not None:
        out.append(flushed)
    if FRAGMENT_MIN_CHARS <= len(msg.text) <= FRAGMENT_MAX_CHARS:
        buf.items = [msg]
        buf.chars = len(msg.text)
        buf.last_offer_at = now
    else:
        out.append(single(msg))
    return out


# --- media groups ---------------------------------------------------------------------------


@attrs.define
class MediaGroupBuffer:
    """Items of the one media group being collected (empty when none is pending)."""

    items: list[Inbound] = attrs.Factory(list)
    last_offer_at: float = 0.0

    @property
    def group_id(self) -> str | None:
        """The pending group's ``media_group_id``, or None."""
        return self.items[0].media_group_id if self.items else None


def media_deadline(buf: MediaGroupBuffer) -> float | None:
    """When the pending group must be flushed, or None if there is none."""
    return buf.last_offer_at + MEDIA_GROUP_WINDOW_S if buf.items else None


def flush_media(buf: MediaGroupBuffer) -> Flushed | None:
    """Empty the buffer and return the group as one message (captions joined by newline)."""
    if not buf.items:
        return None
    text = "\n".join(m.text for m in buf.items if m.text.strip())
    out = _combine(buf.items, text)
    buf.items = []
    return out


def expire_media(buf: MediaGroupBuffer, now: float) -> Flushed | None:
    """Flush the pending group if its deadline is at or before ``now``."""
    due = media_deadline(buf)
    return flush_media(buf) if due is not None and now >= due else None


def offer_media(buf: MediaGroupBuffer, msg: Inbound, now: float) -> list[Flushed]:
    """Feed one media-group item; a different group (or an expired one) is flushed first."""
    if msg.media_group_id is None:
        raise ValueError("offer_media takes media-group items (media_group_id set)")
    out: list[Flushed] = []
    due = media_deadline(buf)
    if buf.items and (
        buf.group_id != msg.media_group_id
        or buf.items[0].chat_id != msg.chat_id
        or (due is not None and now >= due)
    ):
        flushed = flush_media(buf)
        if flushed is not None:
            out.append(flushed)
    buf.items.append(msg)
    buf.last_offer_at = now
    if len(buf.items) >= MEDIA_GROUP_MAX_ITEMS:
        flushed = flush_media(buf)
        if flushed is not None:
            out.append(flushed)
    return out


# --- both, in order ---------------------------------------------------------------------------


@attrs.define
class Reassembler:
    """One chat's inbound buffering: at most one fragment run or media group pending."""

    fragments: FragmentBuffer = attrs.Factory(FragmentBuffer)
    media: MediaGroupBuffer = attrs.Factory(MediaGroupBuffer)


def offer(state: Reassembler, msg: Inbound, now: float) -> list[Flushed]:
    """Feed one text or media item; return the messages ready now, in input order."""
    out: list[Flushed] = []
    if msg.media_group_id is None:
        flushed = flush_media(state.media)
        if flushed is not None:
            out.append(flushed)
        out.extend(offer_text(state.fragments, msg, now))
    else:
        flushed = flush_fragments(state.fragments)
        if flushed is not None:
            out.append(flushed)
        out.extend(offer_media(state.media, msg, now))
    return out


def deadline(state: Reassembler) -> float | None:
    """The earliest time :func:`expire` has work to do, or None if nothing is pending."""
    dues = (fragment_deadline(state.fragments), media_deadline(state.media))
    pending = [d for d in dues if d is not None]
    return min(pending) if pending else None


def expire(state: Reassembler, now: float) -> list[Flushed]:
    """Flush whatever has reached its deadline by ``now``."""
    out = [expire_fragments(state.fragments, now), expire_media(state.media, now)]
    return [f for f in out if f is not None]


def flush_all(state: Reassembler) -> list[Flushed]:
    """Flush everything pending (before a non-text message, on idle stop or shutdown)."""
    out = [flush_fragments(state.fragments), flush_media(state.media)]
    return [f for f in out if f is not None]
