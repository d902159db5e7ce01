"""A chat's vault as text: pure functions of :class:`~memory.vault.data.ChatData`.

:func:`render_vault` gives every file of the chat's folder, by relative path:

* ``daily/YYYY-MM-DD.md`` — for each local day with something in it: the conversation with
  local times (tool calls as one-line notes, routine messages marked), the day's episode
  summaries, and the patterns created or changed that day as links;
* ``MEMORY.md`` — the profile (core tenets, then facts), the active patterns by kind with
  strength, confidence, first and last seen and a link to each page, then the superseded and
  the disputed ones in their own sections;
* ``patterns/<id>-<slug>.md`` — one page per pattern: YAML front matter (id, kind, status,
  strength, confidence, dates, relations as wiki-links), its evidence, its audit history.

Links are Obsidian wiki-links (``[[patterns/12-likes-tea|likes tea]]``), so the folder opens
as an Obsidian vault and reads in any editor.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import date, datetime

from memory.vault.data import Audit, ChatData, Message, Observation, Pattern
from runtime.clock import zone

#: kinds in the order MEMORY.md lists them
KINDS = (
    "fact",
    "event",
    "preference",
    "goal",
    "belief",
    "behavior",
    "emotion",
    "temporal",
    "causal",
)
MAX_LINK_TEXT = 80
MAX_TOOL_INPUT = 100
SLUG_WORDS = 6
SLUG_CHARS = 48
_ROLE = {"user": "You", "assistant": "engram"}
_RELATION_OUT = {
    "supports": "supports",
    "contradicts": "contradicts",
    "parent_of": "parent_of",
    "causes": "causes",
    "supersedes": "supersedes",
}
_RELATION_IN = {
    "supports": "supported_by",
    "contradicts": "contradicted_by",
    "parent_of": "child_of",
    "causes": "caused_by",
    "supersedes": "superseded_by",
}


def slug(text: str) -> str:
    """A file-name slug: ascii words, lower case, at most :data:`SLUG_WORDS` of them."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    words = re.findall(r"[a-z0-9]+", ascii_text.lower())[:SLUG_WORDS]
    out = "-".join(words)[:SLUG_CHARS].strip("-")
    return out or "pattern"


def page_name(pattern: Pattern) -> str:
    """``<id>-<slug>``: the pattern page's name, without ``.md``."""
    return f"{pattern.id}-{slug(pattern.content)}"


def page_path(pattern: Pattern) -> str:
    return f"patterns/{page_name(pattern)}.md"


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def link(pattern: Pattern) -> str:
    """A wiki-link to the pattern's page, its text as the label."""
    label = _one_line(pattern.content, MAX_LINK_TEXT)
    label = label.replace("|", "/").replace("[", "(").replace("]", ")")
    return f"[[patterns/{page_name(pattern)}|{label}]]"


def _yaml(value: object) -> str:
    """A YAML scalar: strings double-quoted (JSON escapes are YAML's)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int):
        return str(value)
    return json.dumps(str(value), ensure_ascii=False)


class _Clock:
    """Local days and times in the chat's zone."""

    def __init__(self, timezone: str) -> None:
        self.tz = zone(timezone)

    def day(self, at: datetime) -> date:
        return at.astimezone(self.tz).date()

    def hm(self, at: datetime) -> str:
        return at.astimezone(self.tz).strftime("%H:%M")

    def stamp(self, at: datetime) -> str:
        return at.astimezone(self.tz).strftime("%Y-%m-%d %H:%M")

    def iso(self, at: datetime) -> str:
        return at.astimezone(self.tz).isoformat(timespec="seconds")


# --- daily pages ----------------------------------------------------------------------------


def _message_lines(clock: _Clock, m: Message) -> list[str]:
    who = _ROLE.get(m.role, m.role)
    if m.routine_name is not None:
        who = f"{who} (routine: {m.routine_name})"
    lines: list[str] = []
    text = m.content.strip()
    if text:
        first, *rest = text.split("\n")
        lines.append(f"**{clock.hm(m.created_at)} {who}:** {first}")
        lines += [f"{line}" for line in rest]
    for name, args in zip(m.tool_names, m.tool_inputs, strict=False):
        lines.append(f"> {clock.hm(m.created_at)} tool `{name}` {_one_line(args, MAX_TOOL_INPUT)}")
    if lines:
        lines.append("")
    return lines


def _changes_by_day(clock: _Clock, data: ChatData) -> dict[date, dict[int, list[str]]]:
    """Per day, per pattern id: what happened to it (created, seen again, audited)."""
    out: dict[date, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    for p in data.patterns:
        out[clock.day(p.created_at)][p.id].append("created")
    seen_first = {p.id: clock.day(p.created_at) for p in data.patterns}
    for o in data.observations:
        day = clock.day(o.observed_at)
        if seen_first.get(o.pattern_id) != day and "seen again" not in out[day][o.pattern_id]:
            out[day][o.pattern_id].append("seen again")
    for a in data.audit:
        out[clock.day(a.at)][a.pattern_id].append(f"{a.action} ({a.old_status} → {a.new_status})")
    return out


def day_tails(data: ChatData, memo: LineMemo | None = None) -> dict[date, list[str]]:
    """Per local day, what its page shows after the conversation: the day's episode summaries
    and the patterns created or changed that day (the lines; empty for a day of messages only)."""
    clock = _Clock(data.timezone)
    by_id = {p.id: p for p in data.patterns}
    episodes = defaultdict(list)
    for e in data.episodes:
        episodes[clock.day(e.started_at)].append(e)
    changes = _changes_by_day(clock, data)
    out: dict[date, list[str]] = {}
    for day in sorted({*episodes, *changes}):
        lines: list[str] = []
        if episodes.get(day):
            lines += ["## Episodes", ""]
            for e in episodes[day]:
                span = f"{clock.hm(e.started_at)}–{clock.hm(e.ended_at)}"
                lines.append(f"- {span} ({e.message_count} messages): {_one_line(e.summary, 2000)}")
            lines.append("")
        if changes.get(day):
            lines += ["## Patterns", ""]
            for pid, what in sorted(changes[day].items()):
                p = by_id.get(pid)
                if p is None:
                    name = f"#{pid} (forgotten)"
                else:
                    name = memo.get(clock, p)[1] if memo is not None else link(p)
                lines.append(f"- {name}: {', '.join(what)}")
            lines.append("")
        out[day] = lines
    return out


def local_day(timezone: str, at: datetime) -> date:
    """The local day (in the chat's zone) of ``at``: the daily page it is shown on."""
    return _Clock(timezone).day(at)


def day_path(day: date) -> str:
    return f"daily/{day.isoformat()}.md"


def render_day(timezone: str, day: date, messages: Sequence[Message], tail: list[str]) -> str:
    """``daily/<day>.md`` from the day's ``messages`` (in order) and its :func:`day_tails`."""
    clock = _Clock(timezone)
    lines = [f"# {day.isoformat()}", ""]
    if messages:
        lines += ["## Conversation", ""]
        for m in messages:
            lines += _message_lines(clock, m)
    lines += tail
    return "\n".join(lines).rstrip("\n") + "\n"


def messages_by_day(data: ChatData) -> dict[date, list[Message]]:
    clock = _Clock(data.timezone)
    messages: dict[date, list[Message]] = defaultdict(list)
    for m in data.messages:
        messages[clock.day(m.created_at)].append(m)
    return messages


def render_daily(data: ChatData) -> dict[str, str]:
    """``daily/YYYY-MM-DD.md`` for each local day with messages, episodes or pattern changes."""
    messages = messages_by_day(data)
    tails = day_tails(data)
    return {
        day_path(day): render_day(data.timezone, day, messages.get(day, ()), tails.get(day, []))
        for day in sorted({*messages, *tails})
    }


# --- MEMORY.md ------------------------------------------------------------------------------


def _rank(p: Pattern) -> tuple[float, int]:
    return (-(p.strength * p.confidence), p.id)


def _memory_line(clock: _Clock, p: Pattern) -> str:
    return (
        f"- {link(p)} — strength {p.strength:.2f}, confidence {p.confidence:.2f}, "
        f"first seen {clock.day(p.first_seen).isoformat()}, "
        f"last seen {clock.day(p.last_seen).isoformat()}"
    )


class LineMemo:
    """Each pattern's ``MEMORY.md`` line and link, kept while the pattern is the same (the vault
    writer keeps one per chat, so a write after a change formats only the changed ones)."""

    def __init__(self) -> None:
        self._memo: dict[int, tuple[Pattern, str, str]] = {}

    def get(self, clock: _Clock, p: Pattern) -> tuple[str, str]:
        """(its line, its link)."""
        hit = self._memo.get(p.id)
        if hit is not None and (hit[0] is p or hit[0] == p):
            return hit[1], hit[2]
        out = (_memory_line(clock, p), link(p))
        self._memo[p.id] = (p, *out)
        return out

    def drop(self, pattern_id: int) -> None:
        self._memo.pop(pattern_id, None)


def _section(clock: _Clock, title: str, patterns: Iterable[Pattern], memo: LineMemo) -> list[str]:
    ranked = sorted(patterns, key=_rank)
    if not ranked:
        return []
    return [title, "", *(memo.get(clock, p)[0] for p in ranked), ""]


def render_memory(data: ChatData, memo: LineMemo | None = None) -> str:
    """``MEMORY.md``: the profile, the active patterns by kind, superseded, disputed."""
    clock = _Clock(data.timezone)
    memo = memo if memo is not None else LineMemo()
    active = [p for p in data.patterns if p.status == "active"]
    lines = ["# Memory", ""]
    count = {s: sum(p.status == s for p in data.patterns) for s in ("superseded", "disputed")}
    lines += [
        f"{len(active)} active patterns, {count['superseded']} superseded, "
        f"{count['disputed']} disputed. Each links to its page in `patterns/`; the days are "
        "in `daily/`.",
        "",
    ]
    profile = [p for p in active if p.is_core_tenet] + [
        p for p in active if p.kind == "fact" and not p.is_core_tenet
    ]
    lines += ["## Profile", ""]
    ordered = sorted(profile, key=lambda p: (not p.is_core_tenet, *_rank(p)))
    lines += [f"- {memo.get(clock, p)[1]}" for p in ordered] or ["(nothing yet)"]
    lines.append("")
    lines += ["## Active patterns", ""]
    by_kind: dict[str, list[Pattern]] = defaultdict(list)
    for p in active:
        by_kind[p.kind].append(p)
    for kind in KINDS:
        lines += _section(clock, f"### {kind.capitalize()}", by_kind.get(kind, ()), memo)
    superseded = (p for p in data.patterns if p.status == "superseded")
    lines += _section(clock, "## Superseded", superseded, memo)
    disputed = (p for p in data.patterns if p.status == "disputed")
    lines += _section(clock, "## Disputed", disputed, memo)
    return "\n".join(lines).rstrip("\n") + "\n"


# --- pattern pages --------------------------------------------------------------------------


def _front_matter(clock: _Clock, p: Pattern, relations: Mapping[str, list[str]]) -> list[str]:
    lines = [
        "---",
        f"id: {p.id}",
        f"kind: {p.kind}",
        f"status: {p.status}",
        f"strength: {p.strength:.4f}",
        f"confidence: {p.confidence:.4f}",
        f"times_seen: {p.times_seen}",
        f"first_seen: {clock.iso(p.first_seen)}",
        f"last_seen: {clock.iso(p.last_seen)}",
        f"created: {clock.iso(p.created_at)}",
        f"source: {p.source}",
        f"core_tenet: {_yaml(p.is_core_tenet)}",
    ]
    if p.occurs_on is not None:
        lines.append(f"occurs_on: {p.occurs_on.isoformat()}")
    if p.occurs_at is not None:
        lines.append(f"occurs_at: {_yaml(p.occurs_at.strftime('%H:%M'))}")
    if p.status_reason:
        lines.append(f"status_reason: {_yaml(p.status_reason)}")
    for name, links in relations.items():
        lines.append(f"{name}:")
        lines += [f"  - {_yaml(target)}" for target in links]
    lines += [f"tags: [engram/{p.kind}, engram/{p.status}]", "---", ""]
    return lines


def _relations(data: ChatData) -> dict[int, dict[str, list[str]]]:
    by_id = {p.id: p for p in data.patterns}
    out: dict[int, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for r in data.relations:
        a, b = by_id.get(r.from_id), by_id.get(r.to_id)
        if a is None or b is None:
            continue
        out[a.id][_RELATION_OUT[r.relation]].append(f"[[patterns/{page_name(b)}]]")
        out[b.id][_RELATION_IN[r.relation]].append(f"[[patterns/{page_name(a)}]]")
    return out


def _evidence_line(clock: _Clock, o: Observation) -> str:
    return (
        f"- {clock.stamp(o.observed_at)} ({o.signal}, {o.confidence:.2f}): "
        f"{_one_line(o.evidence, 2000)}"
    )


def _audit_line(clock: _Clock, a: Audit, by_id: Mapping[int, Pattern]) -> str:
    other = ""
    if a.other_pattern_id is not None:
        target = by_id.get(a.other_pattern_id)
        other = f" (with {link(target)})" if target else f" (with #{a.other_pattern_id})"
    return (
        f"- {clock.stamp(a.at)} {a.action} by {a.actor}: {a.old_status} → {a.new_status}"
        f"{other} — {_one_line(a.reason, 500)}"
    )


def render_patterns(data: ChatData, only: Collection[int] | None = None) -> dict[str, str]:
    """``patterns/<id>-<slug>.md`` for every pattern of the chat (or only those ``only``
    names: ``data`` then needs the evidence of those only)."""
    clock = _Clock(data.timezone)
    by_id = {p.id: p for p in data.patterns}
    relations = _relations(data)
    evidence: dict[int, list[Observation]] = defaultdict(list)
    for o in data.observations:
        evidence[o.pattern_id].append(o)
    audit: dict[int, list[Audit]] = defaultdict(list)
    for a in data.audit:
        audit[a.pattern_id].append(a)
    files: dict[str, str] = {}
    for p in data.patterns if only is None else (by_id[i] for i in sorted(only) if i in by_id):
        lines = _front_matter(clock, p, relations.get(p.id, {}))
        lines += [f"# {_one_line(p.content, 2000)}", ""]
        lines += ["## Evidence", ""]
        lines += [_evidence_line(clock, o) for o in evidence.get(p.id, [])] or ["(none kept)"]
        lines.append("")
        if audit.get(p.id):
            lines += ["## History", ""]
            lines += [_audit_line(clock, a, by_id) for a in audit[p.id]]
            lines.append("")
        files[page_path(p)] = "\n".join(lines).rstrip("\n") + "\n"
    return files


def render_vault(data: ChatData, memo: LineMemo | None = None) -> dict[str, str]:
    """Every file of the chat's vault folder, by path relative to it; none for a chat with
    nothing in the database (an erased one)."""
    if not (data.messages or data.episodes or data.patterns or data.audit):
        return {}
    return {"MEMORY.md": render_memory(data, memo), **render_daily(data), **render_patterns(data)}
