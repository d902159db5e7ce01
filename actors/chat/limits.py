"""Per-chat limits on model turns (issue 20 item 8): the pure rules (the settings:
:mod:`actors.chat.settings`).

* **Bursts are answered together.** Messages that arrive while a chat's turn is queued or
  running are answered in its next turn, all at once: :func:`coalesce` joins consecutive
  messages ready for a turn (in order, one per paragraph) up to
  :data:`~actors.chat.fragments.FRAGMENT_MAX_CHARS`, the cap of a reassembled paste. Each message
  keeps its inbox row, marked done with the turn.
* **``CHAT_TURNS_PER_MINUTE``** (default 6; 0: no limit): a chat's turn that would be the
  (n+1)th to start within 60 s waits (:func:`next_turn_at`); what arrives meanwhile joins it.
* **``CHAT_DAILY_COST_USD``** (default: none): once the chat's model calls cost that much
  today (``TIMEZONE``), its turns wait for the next day.

A waiting chat is told once (:data:`RATE_LIMITED`, :data:`COST_LIMITED`), not per message; its
messages stay in the inbox, waiting uncharged (see :class:`actors.chat.actor.ChatActor`).
Commands and buttons are not turns: they are answered at once.
"""

from __future__ import annotations

from collections.abc import Sequence

from actors.chat import fragments

WINDOW_S = 60.0
RATE_LIMITED = (
    "You're writing faster than I answer here; I'll read everything you sent and reply to it "
    "together in a moment."
)
COST_LIMITED = (
    "I've reached today's spending limit for this chat (CHAT_DAILY_COST_USD), so I'll read "
    "what you send and answer tomorrow. Commands still work."
)


def next_turn_at(starts: Sequence[float], now: float, per_minute: int) -> float | None:
    """When the next turn may start given the recent turn ``starts`` (oldest first): None for
    now, else the time the oldest of the last ``per_minute`` leaves the 60 s window. 0: no
    limit."""
    recent = [t for t in starts if t > now - WINDOW_S]
    if per_minute <= 0 or len(recent) < per_minute:
        return None
    return recent[-per_minute] + WINDOW_S


def _joined(items: Sequence[fragments.Flushed]) -> fragments.Flushed:
    first = items[0]
    return fragments.Flushed(
        chat_id=first.chat_id,
        sender_id=first.sender_id,
        text="\n\n".join(i.text for i in items),
        message_ids=tuple(m for i in items for m in i.message_ids),
        update_ids=tuple(u for i in items for u in i.update_ids),
        received_at=first.received_at,
        media_group_id=next((i.media_group_id for i in items if i.media_group_id), None),
        photos=tuple(p for i in items for p in i.photos),
    )


def coalesce(
    items: Sequence[fragments.Flushed], max_chars: int = fragments.FRAGMENT_MAX_CHARS
) -> list[fragments.Flushed]:
    """Consecutive messages with text as few turns as the cap allows, in order; a message
    without text stays on its own (it is answered that it has none)."""
    out: list[fragments.Flushed] = []
    run: list[fragments.Flushed] = []
    chars = 0
    for item in items:
        empty = not item.text.strip()
        if run and (empty or chars + 2 + len(item.text) > max_chars):
            out.append(_joined(run))
            run, chars = [], 0
        if empty:
            out.append(item)
            continue
        run.append(item)
        chars += len(item.text) + (2 if len(run) > 1 else 0)
    if run:
        out.append(_joined(run))
    return out
