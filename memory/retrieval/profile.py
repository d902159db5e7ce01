"""The profile: what a turn always knows about the person, whatever they ask (core memory;
issue 14 item 3, seed 004 "profile always in the prompt", seed 000 "Core tenets").

One query per turn (:meth:`SqlProfile.load`, concurrently with the window and the retrieval)
reads the chat's *active* patterns that belong in it (never superseded, deprecated, merged or
disputed ones, never another chat's):

* **core tenets** (``is_core_tenet``: pinned by the person or by the extractor) — first, always;
* **events** of the next :data:`UPCOMING_DAYS` days (today included), by date;
* **facts**, **preferences** (how they want to be answered among them) and **goals**, one pool
  ranked by ``strength × confidence``.

Items are taken in that order while their lines fit ``budget_tokens`` (the group headers
counted; an item too long for what is left is skipped, a shorter later one may still fit), then
rendered by group (:meth:`Profile.text`)::

    Core (who they are):
    - User values honesty above comfort (id 3)
    Facts:
    - User works as a Solution Architect at GovTech (id 5)
    Preferences (how they want to be answered among them):
    - User wants concise answers with bullet points (id 9)
    Active goals:
    - User wants to launch the SingPass integration by Q2 2026 (id 11)
    Coming up:
    - Fri 7 Mar 2025, 09:30 (in 4 days): User has a team offsite (id 12)

An event's day is a local date (resolved in ``TIMEZONE`` when it was said); "today" is reckoned
in the same zone. The section around it is :func:`actors.agent.context.profile_section`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime, time
from typing import Any, Protocol

import attrs

from memory.retrieval.ranking import EVENT_AHEAD_DAYS, estimate_tokens, local_today
from memory.retrieval.temporal import event_day
from runtime.db import Queries

#: the default of ``PROFILE_BUDGET_TOKENS``: ~25 lines, 2.5 % of the default context budget
PROFILE_BUDGET_TOKENS = 600
UPCOMING_DAYS = EVENT_AHEAD_DAYS  # events shown from today to this many days ahead
PROFILE_KINDS = ("fact", "preference", "goal")  # the ranked pool besides core tenets and events
MIN_LINE_TOKENS = 4  # the fewest tokens an item's line takes ("- abc (id 1)"): bounds the rows read
#: group -> its header, in the order they are shown
GROUPS = {
    "core": "Core (who they are):",
    "fact": "Facts:",
    "preference": "Preferences (how they want to be answered among them):",
    "goal": "Active goals:",
    "event": "Coming up:",
}


@attrs.frozen
class ProfileItem:
    """One pattern of the profile."""

    id: int
    kind: str
    content: str
    strength: float
    confidence: float
    core: bool = False
    occurs_on: date | None = None
    occurs_at: time | None = None

    @property
    def group(self) -> str:
        """``core`` for a core tenet, ``event`` for an upcoming event, else its kind."""
        return "core" if self.core else "event" if self.occurs_on is not None else self.kind

    @property
    def rank(self) -> float:
        """``strength × confidence``: the order within the ranked pool and within a group."""
        return self.strength * self.confidence

    def line(self, today: date | None) -> str:
        """``- content (id N)``; an event's led by its day and (knowing today) how far it is."""
        content = " ".join(self.content.split())
        if self.occurs_on is None:
            return f"- {content} (id {self.id})"
        day = event_day(self.occurs_on, self.occurs_at)
        if today is not None:
            day = f"{day} ({days_away(self.occurs_on, today)})"
        return f"- {day}: {content} (id {self.id})"


def days_away(day: date, today: date) -> str:
    """``today``, ``tomorrow``, ``in 4 days``; ``yesterday``, ``3 days ago`` (a pinned event)."""
    n = (day - today).days
    if n in (0, 1, -1):
        return ("today", "tomorrow", "yesterday")[n]
    return f"in {n} days" if n > 0 else f"{-n} days ago"


@attrs.frozen
class Profile:
    """The profile of a turn: its items (already within the budget) and the local date."""

    items: tuple[ProfileItem, ...] = ()
    today: date | None = None  # the local date it was read on (events say how far they are)

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(item.id for item in self.items)

    @property
    def text(self) -> str:
        """The items by group (:data:`GROUPS` order), each group by rank (events by day)."""
        lines: list[str] = []
        for group, header in GROUPS.items():
            members = sorted((i for i in self.items if i.group == group), key=_order)
            if members:
                lines += [header, *(m.line(self.today) for m in members)]
        return "\n".join(lines)


def _order(item: ProfileItem) -> tuple[Any, ...]:
    if item.group == "event":
        return (item.occurs_on, item.occurs_at or time.min, item.id)
    return (-item.rank, -item.id)


def _priority(item: ProfileItem) -> tuple[Any, ...]:
    """Who is taken first when the budget binds: core tenets, then events by day, then the
    ranked pool."""
    if item.core:
        return (0, -item.rank, -item.id)
    if item.occurs_on is not None:
        return (1, item.occurs_on, item.occurs_at or time.min, item.id)
    return (2, -item.rank, -item.id)


def within_budget(
    items: Sequence[ProfileItem], budget_tokens: int, today: date
) -> tuple[ProfileItem, ...]:
    """The items taken in priority order while their lines (and each new group's header) fit
    ``budget_tokens`` (module docstring). Pure."""
    used = 0
    groups: set[str] = set()
    taken: list[ProfileItem] = []
    for item in sorted(items, key=_priority):
        cost = estimate_tokens(item.line(today) + "\n")
        if item.group not in groups:
            cost += estimate_tokens(GROUPS[item.group] + "\n")
        if used + cost > budget_tokens:
            continue
        used += cost
        groups.add(item.group)
        taken.append(item)
    return tuple(taken)


# --- the query ------------------------------------------------------------------------------

# $1 chat, $2 the ranked kinds, $3 today (local), $4 days ahead, $5 rows at most
_PROFILE = """
SELECT id, kind, content, strength, confidence, is_core_tenet, occurs_on, occurs_at
FROM patterns
WHERE chat_id = $1 AND status = 'active'
  AND (is_core_tenet
       OR (occurs_on IS NULL AND kind = ANY($2::text[]))
       OR occurs_on BETWEEN $3::date AND $3::date + $4::int)
ORDER BY CASE WHEN is_core_tenet THEN 0 WHEN occurs_on IS NOT NULL THEN 1 ELSE 2 END,
         CASE WHEN is_core_tenet OR occurs_on IS NULL THEN -(strength * confidence) END,
         occurs_on, occurs_at, id DESC
LIMIT $5
"""


def item_from_record(r: Any) -> ProfileItem:
    return ProfileItem(
        id=int(r["id"]),
        kind=str(r["kind"]),
        content=str(r["content"]),
        strength=float(r["strength"]),
        confidence=float(r["confidence"]),
        core=bool(r["is_core_tenet"]),
        occurs_on=r["occurs_on"],
        occurs_at=r["occurs_at"],
    )


async def load_profile(
    db: Queries, chat_id: int, *, now: datetime, timezone: str, budget_tokens: int
) -> Profile:
    """The chat's profile at ``now`` (one round trip; see the module docstring)."""
    today = local_today(now, timezone)
    if budget_tokens <= 0:
        return Profile(today=today)
    rows = await db.fetch(
        _PROFILE,
        chat_id,
        list(PROFILE_KINDS),
        today,
        UPCOMING_DAYS,
        budget_tokens // MIN_LINE_TOKENS + 1,
    )
    items = [item_from_record(r) for r in rows]
    return Profile(within_budget(items, budget_tokens, today), today)


class ProfileSource(Protocol):
    """What the agent needs to know of the person every turn."""

    async def load(self, chat_id: int, now: datetime) -> Profile: ...


@attrs.frozen
class NoProfile:
    """A :class:`ProfileSource` knowing nothing (unit tests without a database)."""

    async def load(self, chat_id: int, now: datetime) -> Profile:
        return Profile()


@attrs.frozen
class SqlProfile:
    """:class:`ProfileSource` over the ``patterns`` table."""

    db: Queries
    timezone: str = "UTC"
    budget_tokens: int = PROFILE_BUDGET_TOKENS

    async def load(self, chat_id: int, now: datetime) -> Profile:
        return await load_profile(
            self.db, chat_id, now=now, timezone=self.timezone, budget_tokens=self.budget_tokens
        )
