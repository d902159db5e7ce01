"""The guardrails over the extractor's output (seed 000, "Pattern extraction during compaction";
seed 001: grounding check and injection-like text rejection). Pure, no I/O.

:func:`check_extraction` applies the text rules of :mod:`memory.extraction.grounding` (grounding,
instruction-like text, bot directives, entry uuids in tool results) and the structural rules
(cap, evidence roles, known ids) to a parsed :class:`memory.extraction.extractor.Extraction`.
:func:`evidence_for` is the evidence snapshot of the cited rows.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import TypeVar

import attrs

from memory.extraction.claims import (
    ChunkMessage,
    Extraction,
    KnownPattern,
    MetaPattern,
    NewPattern,
    Reinforcement,
    Supersede,
)
from memory.extraction.grounding import entry_uuids_in, is_grounded, overlap
from memory.patterns.canonical import canonical_hash
from memory.untrusted import directs_the_bot, injection_in, instruction_reason, own_words

CITABLE_ROLES = ("user", "tool_result")
Linked = TypeVar("Linked", "NewPattern", "Reinforcement", "Supersede")
MAX_NEW_PATTERNS = 5
MAX_META_PATTERNS = 2
META_KINDS = ("causal", "belief")
MAX_CONTENT_CHARS = 400
MAX_SUMMARY_CHARS = 1000
EVIDENCE_CHARS_PER_MESSAGE = 1000


@attrs.frozen
class Rejection:
    """Something the guardrails dropped: ``what`` (e.g. ``new_patterns[2]``) and why."""

    what: str
    reason: str


def evidence_for(ids: Iterable[int], chunk: Sequence[ChunkMessage]) -> tuple[str, tuple[str, ...]]:
    """The immutable evidence snapshot of the cited rows (user and tool_result rows of
    ``chunk`` only, in citation order) and their roles, for ``pattern_observations``."""
    by_id = {m.id: m for m in chunk}
    lines: list[str] = []
    roles: list[str] = []
    for message_id in dict.fromkeys(ids):
        row = by_id.get(message_id)
        if row is None or row.role not in CITABLE_ROLES:
            continue
        label = row.role if row.tool_name is None else f"{row.role}:{row.tool_name}"
        text = " ".join(row.content.split())
        if len(text) > EVIDENCE_CHARS_PER_MESSAGE:
            text = text[: EVIDENCE_CHARS_PER_MESSAGE - 1] + "…"
        lines.append(f"[{label} #{row.id}, {row.created_at:%Y-%m-%d}] {text}")
        roles.append(row.role)
    return "\n".join(lines), tuple(roles)


class _Guard:
    """The state of one :func:`check_extraction` pass."""

    def __init__(
        self, chunk: Sequence[ChunkMessage], known: Sequence[KnownPattern], uuids: Collection[str]
    ) -> None:
        # a user row's evidence is the person's own words: forwarded blocks are someone else's
        self.rows = {
            m.id: attrs.evolve(m, content=own_words(m.content)) if m.role == "user" else m
            for m in chunk
        }
        self.known = {p.id: p for p in known}
        self.uuids = set(uuids)
        self.tainted: dict[int, str] = {}  # tool results holding an injection attempt
        for row in chunk:
            if row.role == "tool_result":
                self.uuids |= entry_uuids_in(row.content)
                if (rule := injection_in(row.content)) is not None:
                    self.tainted[row.id] = rule
        self.rejections: list[Rejection] = []

    def reject(self, what: str, reason: str) -> None:
        self.rejections.append(Rejection(what, reason))

    def evidence(self, what: str, ids: Sequence[int]) -> tuple[int, ...] | None:
        """The citable ids of ``ids`` (others dropped, each with a Rejection); None (rejected)
        when none is left."""
        kept: list[int] = []
        for message_id in dict.fromkeys(ids):
            row = self.rows.get(message_id)
            if row is None:
                self.reject(f"{what} evidence #{message_id}", "not a message of this chunk")
            elif row.role not in CITABLE_ROLES:
                self.reject(
                    f"{what} evidence #{message_id}",
                    f"{row.role} row (only user and tool_result rows are evidence)",
                )
            elif row.role == "user" and not row.content:
                self.reject(
                    f"{what} evidence #{message_id}",
                    "a forwarded message (not the person's own words)",
                )
            elif message_id in self.tainted:
                self.reject(
                    f"{what} evidence #{message_id}",
                    f"tool result holds instruction-like text ({self.tainted[message_id]})",
                )
            else:
                kept.append(message_id)
        if not kept:
            self.reject(what, "no valid evidence left")
            return None
        return tuple(kept)

    def text_of(self, ids: Sequence[int]) -> str:
        return "\n".join(self.rows[i].content for i in ids)

    def entry_uuids(self, what: str, uuids: Sequence[str]) -> tuple[str, ...]:
        kept = []
        for uuid in dict.fromkeys(uuids):
            if uuid in self.uuids:
                kept.append(uuid)
            else:
                self.reject(f"{what} entry {uuid[:40]}", "unknown entry uuid")
        return tuple(kept)

    def linked(self, what: str, item: Linked, ids: tuple[int, ...]) -> Linked:
        """``item`` with the kept evidence ids and its known entry uuids only."""
        uuids = self.entry_uuids(what, item.entry_uuids)
        return attrs.evolve(item, evidence_message_ids=ids, entry_uuids=uuids)

    def claim(self, what: str, content: str, ids: tuple[int, ...]) -> bool:
        """Length, instruction-likeness, bot directives from tool output, grounding."""
        if len(content) > MAX_CONTENT_CHARS:
            self.reject(what, f"longer than {MAX_CONTENT_CHARS} characters (not atomic)")
        elif (rule := instruction_reason(content)) is not None:
            self.reject(what, f"instruction-like text ({rule})")
        elif directs_the_bot(content) and all(self.rows[i].role != "user" for i in ids):
            self.reject(what, "instructs the assistant on tool output's word only")
        elif not is_grounded(content, self.text_of(ids)):
            self.reject(what, "not grounded in the cited messages")
        else:
            return True
        return False

    def related(self, what: str, pattern: KnownPattern, ids: tuple[int, ...]) -> bool:
        if overlap(pattern.content, self.text_of(ids)) > 0:
            return True
        self.reject(what, f"the cited messages do not mention pattern #{pattern.id}'s subject")
        return False

    def known_pattern(self, what: str, pattern_id: int) -> KnownPattern | None:
        pattern = self.known.get(pattern_id)
        if pattern is None:
            self.reject(what, f"unknown pattern id {pattern_id}")
        return pattern


def check_extraction(
    ex: Extraction,
    chunk: Sequence[ChunkMessage],
    known: Sequence[KnownPattern],
    known_entry_uuids: Collection[str],
) -> tuple[Extraction, list[Rejection]]:
    """Apply every guardrail to ``ex``; what survives and a Rejection for each thing dropped.

    - evidence ids must be ``user``/``tool_result`` rows of ``chunk`` (assistant and unknown
      ids are dropped, and tool results holding an injection attempt (:func:`injection_in`);
      an item left without evidence is rejected), supersedes included;
    - pattern ids (reinforced, contradicted, superseded, meta children) must be ``known``;
    - entry uuids must be in ``known_entry_uuids`` or in a tool result of the chunk (unknown
      ones are dropped, the item kept);
    - new and replacement pattern texts must be at most 400 characters, not instruction-like,
      and grounded in the cited text (:func:`is_grounded`); a text directing the assistant is
      rejected unless a user message is cited; reinforcements and contradictions must cite
      messages sharing a content word with the pattern; contradiction reasons must not be
      instruction-like;
    - meta patterns: kind causal or belief, >= 2 distinct known children, grounded in the
      children's texts; at most 2;
    - at most 5 new patterns (supersedes first, then new_patterns in order, then meta
      patterns; a repeat of the same canonical text is dropped); a pattern is
      reinforced/contradicted/superseded once; a superseded pattern is not also reinforced;
    - the episode summary is cut to 1,000 characters, emptied when instruction-like.
    """
    g = _Guard(chunk, known, known_entry_uuids)
    seen_texts: set[str] = set()
    slots = MAX_NEW_PATTERNS

    def fresh(what: str, content: str) -> bool:
        nonlocal slots
        key = canonical_hash(content)
        if key in seen_texts:
            g.reject(what, "repeats another pattern of this extraction")
            return False
        if slots == 0:
            g.reject(what, f"over the cap of {MAX_NEW_PATTERNS} new patterns per chunk")
            return False
        seen_texts.add(key)
        slots -= 1
        return True

    supersedes = []
    superseded: set[int] = set()
    for i, s in enumerate(ex.supersedes):
        what = f"supersedes[{i}]"
        if g.known_pattern(what, s.old_pattern_id) is None:
            continue
        if s.old_pattern_id in superseded:
            g.reject(what, f"pattern #{s.old_pattern_id} is already superseded here")
            continue
        ids = g.evidence(what, s.evidence_message_ids)
        if ids is None or not g.claim(what, s.new_pattern_content, ids):
            continue
        if (rule := instruction_reason(s.reason)) is not None:
            g.reject(what, f"instruction-like reason ({rule})")
            continue
        if fresh(what, s.new_pattern_content):
            superseded.add(s.old_pattern_id)
            supersedes.append(g.linked(what, s, ids))

    new = []
    for i, p in enumerate(ex.new_patterns):
        what = f"new_patterns[{i}]"
        ids = g.evidence(what, p.evidence_message_ids)
        if ids is not None and g.claim(what, p.content, ids) and fresh(what, p.content):
            new.append(g.linked(what, p, ids))

    reinforcements = []
    reinforced: set[int] = set()
    for i, r in enumerate(ex.reinforcements):
        what = f"reinforcements[{i}]"
        pattern = g.known_pattern(what, r.pattern_id)
        if pattern is None:
            continue
        if r.pattern_id in superseded | reinforced:
            g.reject(what, f"pattern #{r.pattern_id} is already reinforced or superseded here")
            continue
        ids = g.evidence(what, r.evidence_message_ids)
        if ids is not None and g.related(what, pattern, ids):
            reinforced.add(r.pattern_id)
            reinforcements.append(g.linked(what, r, ids))

    contradictions = []
    contradicted: set[int] = set()
    for i, c in enumerate(ex.contradictions):
        what = f"contradictions[{i}]"
        pattern = g.known_pattern(what, c.pattern_id)
        if pattern is None:
            continue
        if c.pattern_id in contradicted:
            g.reject(what, f"pattern #{c.pattern_id} is already contradicted here")
            continue
        if (rule := instruction_reason(c.reason)) is not None:
            g.reject(what, f"instruction-like reason ({rule})")
            continue
        ids = g.evidence(what, c.evidence_message_ids)
        if ids is not None and g.related(what, pattern, ids):
            contradicted.add(c.pattern_id)
            contradictions.append(attrs.evolve(c, evidence_message_ids=ids))

    metas: list[MetaPattern] = []
    for i, m in enumerate(ex.meta_patterns):
        what = f"meta_patterns[{i}]"
        children = tuple(dict.fromkeys(m.child_pattern_ids))
        if m.kind not in META_KINDS:
            g.reject(what, f"a meta pattern's kind must be one of {META_KINDS}")
        elif len(children) < 2:
            g.reject(what, "a meta pattern needs at least two child patterns")
        elif any(g.known_pattern(what, c) is None for c in children):
            pass
        elif len(m.content) > MAX_CONTENT_CHARS or (rule := instruction_reason(m.content)):
            g.reject(what, "too long or instruction-like")
        elif not is_grounded(m.content, "\n".join(g.known[c].content for c in children)):
            g.reject(what, "not grounded in its child patterns")
        elif len(metas) >= MAX_META_PATTERNS:
            g.reject(what, f"over the cap of {MAX_META_PATTERNS} meta patterns per chunk")
        elif fresh(what, m.content):  # a meta pattern is a new pattern too: same cap of 5
            metas.append(attrs.evolve(m, child_pattern_ids=children))

    summary = ex.episode_summary[:MAX_SUMMARY_CHARS]
    if (rule := instruction_reason(summary)) is not None:
        g.reject("episode_summary", f"instruction-like text ({rule})")
        summary = ""
    checked = attrs.evolve(
        ex,
        new_patterns=tuple(new),
        reinforcements=tuple(reinforcements),
        contradictions=tuple(contradictions),
        supersedes=tuple(supersedes),
        meta_patterns=tuple(metas),
        episode_summary=summary,
    )
    return checked, g.rejections
