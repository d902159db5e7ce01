"""Pattern ↔ journal entry links recorded during the tool loop (seed 000, "Pattern ↔ entry
linking (both paths)").

During a turn the model may look at journal entries (``search_entries``, ``get_entry``, ...).
Entries it actually *cites* become candidate links between the turn's injected patterns and
those entries, with ``source='tool_loop'`` and a low confidence (:data:`TOOL_LOOP_CONFIDENCE`);
compaction later finalises links with ``source='compaction'`` and a higher one
(:func:`link_entries`, :data:`COMPACTION_LINK_CONFIDENCE`). Repeated
linking bumps ``times_linked`` and ``last_linked_at``; a compaction link is never downgraded.

**What counts as cited** (:func:`cited_entries`, pure):

* an entry opened with ``get_entry`` (a successful call): the model chose that one entry;
* an entry that a listing tool returned (``search_entries``, ``get_entries_by_date``,
  ``on_this_day``) only when the final answer refers to it, i.e. the answer contains
  - its uuid (in full or its first 8 characters), or
  - a run of :data:`QUOTE_WORDS` consecutive words of its snippet/text (case and punctuation
    ignored), or
  - its date (``2024-03-05``, ``5 March 2024``, ``March 5``, ``5 March``) when no other
    returned entry has that date.

Every other returned entry is not linked: a search returning ten entries links none of them
unless the answer uses them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime
from typing import Any

import attrs

from memory.retrieval.ranking import VALIDITY_BY_STATUS
from runtime.db import Queries

TOOL_LOOP_SOURCE = "tool_loop"
TOOL_LOOP_CONFIDENCE = 0.3
QUOTE_WORDS = 5
OPENING_TOOLS = frozenset({"get_entry"})
LISTING_TOOLS = frozenset({"search_entries", "get_entries_by_date", "on_this_day"})
_LIST_KEYS = ("results", "entries")
_TEXT_KEYS = ("snippet", "text")
_WORD = re.compile(r"[^\W_]+", re.UNICODE)


@attrs.frozen
class ToolExchange:
    """One tool call of the turn and its result (a JSON object, or its JSON text)."""

    name: str
    input: Mapping[str, Any] = attrs.field(factory=dict)
    result: Mapping[str, Any] | str = attrs.field(factory=dict)
    is_error: bool = False


@attrs.frozen
class _Seen:
    uuid: str
    day: date | None
    text: str


# --- which entries a turn cited -----------------------------------------------------------


def _result(ex: ToolExchange) -> Mapping[str, Any]:
    if isinstance(ex.result, str):
        try:
            parsed = json.loads(ex.result)
        except ValueError:
            return {}
        return parsed if isinstance(parsed, Mapping) else {}
    return ex.result


def _seen(item: Any) -> _Seen | None:
    if not isinstance(item, Mapping) or not isinstance(item.get("uuid"), str):
        return None
    day = None
    if isinstance(item.get("date"), str):
        try:
            day = date.fromisoformat(item["date"])
        except ValueError:
            day = None
    text = " ".join(str(item[k]) for k in _TEXT_KEYS if isinstance(item.get(k), str))
    return _Seen(item["uuid"], day, text)


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def _quotes(text: str, answer_words: str) -> bool:
    words = _words(text)
    for i in range(len(words) - QUOTE_WORDS + 1):
        if f" {' '.join(words[i : i + QUOTE_WORDS])} " in answer_words:
            return True
    return False


def date_forms(day: date) -> tuple[str, ...]:
    """The ways an answer may write ``day`` (lower case)."""
    month = day.strftime("%B").lower()
    return (
        day.isoformat(),
        f"{day.day} {month} {day.year}",
        f"{month} {day.day}, {day.year}",
        f"{month} {day.day}",
        f"{day.day} {month}",
    )


def _mentions_date(day: date, answer: str) -> bool:
    text = " ".join(answer.lower().replace(",", " , ").split())
    for form in date_forms(day):
        form = " ".join(form.replace(",", " , ").split())
        if re.search(rf"(?<![\w-]){re.escape(form)}(?![\w-])", text):
            return True
    return False


def cited_entries(calls: Sequence[ToolExchange], answer: str) -> tuple[str, ...]:
    """The uuids of the entries this turn cited, in first-seen order (rule in the module doc)."""
    cited: dict[str, None] = {}
    listed: list[_Seen] = []
    for ex in calls:
        if ex.is_error:
            continue
        result = _result(ex)
        if ex.name in OPENING_TOOLS:
            seen = _seen(result)
            if seen is not None:
                cited.setdefault(seen.uuid, None)
        elif ex.name in LISTING_TOOLS:
            for key in _LIST_KEYS:
                items = result.get(key)
                if isinstance(items, list):
                    listed += [s for s in map(_seen, items) if s is not None]
    answer_lower = answer.lower()
    answer_words = f" {' '.join(_words(answer))} "
    days: dict[date, set[str]] = {}
    for s in listed:
        if s.day is not None:
            days.setdefault(s.day, set()).add(s.uuid)
    for s in listed:
        if s.uuid in cited:
            continue
        uuid = s.uuid.lower()
        if (
            uuid in answer_lower
            or (len(uuid) >= 8 and uuid[:8] in answer_lower)
            or _quotes(s.text, answer_words)
            or (s.day is not None and len(days[s.day]) == 1 and _mentions_date(s.day, answer))
        ):
            cited.setdefault(s.uuid, None)
    return tuple(cited)


# --- storing --------------------------------------------------------------------------------

_LIVE = [s for s, v in VALIDITY_BY_STATUS.items() if v > 0.0]


async def record_tool_loop_links(
    db: Queries,
    chat_id: int,
    pattern_ids: Sequence[int],
    entry_uuids: Sequence[str],
    *,
    confidence: float = TOOL_LOOP_CONFIDENCE,
    now: datetime | None = None,
) -> int:
    """Link every live pattern of ``chat_id`` among ``pattern_ids`` to every known entry of
    ``entry_uuids``; the number of links inserted or bumped.

    New links get ``source='tool_loop'`` and ``confidence``. An existing link gets
    ``times_linked + 1`` and ``last_linked_at``; a tool-loop link's confidence rises to
    ``confidence`` if it was lower; a compaction link keeps its source and confidence.
    Patterns of other chats, dead patterns and uuids that are not entries of the chat's own
    journal are skipped.
    """
    if not pattern_ids or not entry_uuids:
        return 0
    rows = await db.fetch(
        "INSERT INTO pattern_entries AS pe (pattern_id, entry_uuid, chat_id, source, confidence,"
        " times_linked, last_linked_at)"
        " SELECT p.id, e.uuid, p.chat_id, $4, $5, 1, $6"
        " FROM patterns p JOIN entries e ON e.chat_id = p.chat_id AND e.uuid = ANY($3::text[])"
        " WHERE p.id = ANY($2::bigint[]) AND p.chat_id = $1 AND p.status = ANY($7::text[])"
        " ON CONFLICT (chat_id, pattern_id, entry_uuid) DO UPDATE SET"
        " times_linked = pe.times_linked + 1,"
        " last_linked_at = greatest(pe.last_linked_at, EXCLUDED.last_linked_at),"
        " confidence = CASE WHEN pe.source = 'compaction' THEN pe.confidence"
        "                   ELSE greatest(pe.confidence, EXCLUDED.confidence) END"
        " RETURNING pe.pattern_id",
        chat_id,
        sorted(set(pattern_ids)),
        sorted(set(entry_uuids)),
        TOOL_LOOP_SOURCE,
        confidence,
        now or datetime.now(UTC),
        _LIVE,
    )
    return len(rows)


async def link_turn(
    db: Queries,
    chat_id: int,
    pattern_ids: Sequence[int],
    calls: Sequence[ToolExchange],
    answer: str,
    *,
    now: datetime | None = None,
) -> int:
    """After a turn: link its injected patterns to the entries it cited (0 if none)."""
    return await record_tool_loop_links(
        db, chat_id, pattern_ids, cited_entries(calls, answer), now=now
    )


#: compaction's links; tool-loop links are recorded lower (:data:`TOOL_LOOP_CONFIDENCE`)
COMPACTION_LINK_CONFIDENCE = 0.8

# --- compaction's links ------------------------------------------------------------------------

_LINK = """
INSERT INTO pattern_entries (pattern_id, entry_uuid, chat_id, source, confidence, times_linked,
                             last_linked_at)
VALUES ($1, $2, $3, 'compaction', $4, 1, coalesce($5, now()))
ON CONFLICT (chat_id, pattern_id, entry_uuid) DO UPDATE SET
    source = 'compaction',
    confidence = greatest(pattern_entries.confidence, EXCLUDED.confidence),
    times_linked = pattern_entries.times_linked + 1,
    last_linked_at = greatest(pattern_entries.last_linked_at, EXCLUDED.last_linked_at)
"""


async def link_entries(
    conn: Queries,
    pattern_id: int,
    chat_id: int,
    entry_uuids: Sequence[str],
    *,
    at: datetime | None = None,
    confidence: float = COMPACTION_LINK_CONFIDENCE,
) -> int:
    """Upsert the pattern's links to journal entries cited by the extraction; the count."""
    uuids = list(dict.fromkeys(entry_uuids))
    if uuids:
        await conn.executemany(_LINK, [(pattern_id, u, chat_id, confidence, at) for u in uuids])
    return len(uuids)
