"""Text rules and guardrails over the extractor's output (seed 000, "Pattern extraction during
compaction"; seed 001: grounding check and injection-like text rejection). Pure, no I/O.

**Grounding.** A claim is grounded in its cited evidence when enough of its *content words* occur
in the evidence. Content words are the NFKC-casefolded alphanumeric tokens of the text, minus
English stop words and the meta words every claim uses ("user", "assistant"...), each reduced by
:func:`stem` (a light suffix stripper: plural/-ing/-ed/-ly/-ness..., final "e", doubled final
consonant). A claim word matches an evidence word when the stems are equal or share a prefix of
at least :data:`PREFIX_MATCH` characters reaching to within 3 characters of the shorter stem
("prefer"/"preferenc"). The rule (:func:`is_grounded`), with ``m`` matched of ``n`` claim words::

    grounded  <=>  compact(claim) is a substring of compact(evidence)
               or  m / n >= 0.45                       (GROUNDING_MIN_OVERLAP, seed 001's ~45%)
               or  m >= 3 and m / n >= 0.30            (long claims paraphrase more)

and never for a claim without content words. A resolved name ("Odei" for "he") costs one word.
On LoCoMo's 1,210 extracted observations (speaker name read as "User") against the turns they
cite, 89% are grounded; against a random turn of the same conversation, 1.4% (0.45 alone: 81% and
0.7%).

**Instruction-like text.** :func:`instruction_reason` names the first rule a text breaks
(ignore/disregard previous instructions, "you must", system/developer prompt, role-play and
jailbreak phrases, new instructions, secrets, a URL with an action verb, markup/tags, chat
template lines) or returns None (none of LoCoMo's 1,210 observations trips one). A claim that
tells the bot how to behave (:func:`directs_the_bot`) is rejected when all its evidence is tool
output: journal text may describe the user, it may not instruct the assistant.

**Guardrails.** :func:`check_extraction` applies these and the structural rules (cap, evidence
roles, known ids) to a parsed :class:`memory.extraction.Extraction`.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Collection, Iterable, Sequence
from typing import TYPE_CHECKING, TypeVar

import attrs

from memory.canonical import canonical_hash

if TYPE_CHECKING:  # memory.extraction imports this module; its types are only annotations here
    from memory.extraction import (
        ChunkMessage,
        Extraction,
        KnownPattern,
        MetaPattern,
        NewPattern,
        Reinforcement,
        Supersede,
    )

GROUNDING_MIN_OVERLAP = 0.45
LONG_CLAIM_MATCHES = 3
LONG_CLAIM_MIN_OVERLAP = 0.30
PREFIX_MATCH = 5

STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for
    from further had has have having he her here hers herself him himself his how i if in
    into is it its itself just me more most my myself no nor not now of off on once only or
    other our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up
    very was we were what when where which while who whom why will with would you your yours
    yourself yourselves also really often usually sometimes tends tend seems seem lot lots
    much many get gets got thing things something way very im ive dont doesnt isnt wasnt id
    ill youre thats its lately s t d ll m re ve""".split()  # noqa: SIM905
)
#: words every claim about the user carries; they prove nothing about grounding
META_WORDS = frozenset(["user", "users", "user's", "bot", "assistant", "person", "someone"])

_TOKEN = re.compile(r"[^\W_]+(?:'[^\W_]+)?", re.UNICODE)
_SUFFIXES = ("ational", "fulness", "iveness", "ations", "nesses", "ation", "ments", "ness",
             "ment", "ings", "ies", "ied", "ing", "ed", "ly", "es", "s")  # fmt: skip


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold().replace("\u2019", "'")


def stem(word: str) -> str:
    """A light stemmer: strips the first matching common English suffix (stem >= 3 chars)."""
    if word.isdigit() or len(word) <= 3:
        return word
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            base = word[: -len(suffix)]
            if suffix in ("ies", "ied") or (suffix == "ly" and base.endswith("i")):
                return base.removesuffix("i") + "y"  # "studies", "happily"
            if suffix == "s" and base.endswith(("s", "u", "i")):
                return word  # "glass", "status", "analysis"
            return _tidy(base)
    return _tidy(word)


def _tidy(base: str) -> str:
    """Final "e" dropped and a doubled final consonant undone ("tire"/"tir", "runn"/"run")."""
    if len(base) > 3 and base.endswith("e"):
        base = base[:-1]
    if len(base) > 3 and base[-1] == base[-2] and base[-1] not in "aeiouls":
        base = base[:-1]
    return base


def content_words(text: str) -> list[str]:
    """The stems of ``text``'s content words, in order, without repeats."""
    seen: dict[str, None] = {}
    for token in _TOKEN.findall(_fold(text)):
        token = token.removesuffix("'s")
        bare = token.replace("'", "")
        if bare in STOP_WORDS or token in META_WORDS or bare in META_WORDS:
            continue
        seen.setdefault(stem(bare), None)
    return list(seen)


def _matches(word: str, evidence: Iterable[str]) -> bool:
    for other in evidence:
        if word == other:
            return True
        n = min(len(word), len(other))
        if n >= PREFIX_MATCH and word[:PREFIX_MATCH] == other[:PREFIX_MATCH]:
            common = 0
            while common < n and word[common] == other[common]:
                common += 1
            if common >= max(PREFIX_MATCH, n - 3):
                return True
    return False


def _compact(text: str) -> str:
    return "".join(ch for ch in _fold(text) if ch.isalnum())


def matched_words(claim: str, evidence: str) -> tuple[int, int]:
    """``(m, n)``: how many of ``claim``'s ``n`` content words ``evidence`` has."""
    words = content_words(claim)
    found = set(content_words(evidence))
    return sum(1 for w in words if _matches(w, found)), len(words)


def overlap(claim: str, evidence: str) -> float:
    """The share of ``claim``'s content words found in ``evidence`` (0 when it has none)."""
    m, n = matched_words(claim, evidence)
    return m / n if n else 0.0


def is_grounded(claim: str, evidence: str) -> bool:
    """Whether ``claim`` is supported by the text of ``evidence`` (module docstring's rule)."""
    compact = _compact(claim)
    if len(compact) >= 8 and compact in _compact(evidence):
        return True
    m, n = matched_words(claim, evidence)
    if n == 0:
        return False
    share = m / n
    return share >= GROUNDING_MIN_OVERLAP or (
        m >= LONG_CLAIM_MATCHES and share >= LONG_CLAIM_MIN_OVERLAP
    )


# --- instruction-like text ---------------------------------------------------------------------

_URL = r"(?:https?://|www\.)\S+"
INSTRUCTION_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE))
    for name, pattern in (
        ("ignore instructions", r"\b(ignore|disregard|forget|override|bypass)\b[^.]{0,40}"
         r"\b(previous|prior|above|earlier|all|your|system|safety)\b[^.]{0,20}"
         r"\b(instructions?|prompts?|rules?|messages?|guidelines?|directives?)\b"),
        ("addresses the model", r"\byou (must|should|will|are to|have to|need to|shall)\b"),
        ("addresses the model", r"\byou are (now|no longer|an? (ai|assistant|bot|model))\b"),
        ("system prompt",
         r"\b(system|developer|hidden|initial)[ _-]?(prompt|message|instructions?)\b"),
        ("new instructions", r"\b(new|updated|real|additional) instructions?\b"),
        ("role-play", r"\b(act as|pretend (to be|you)|role[ -]?play|roleplay|from now on,? you)\b"),
        ("jailbreak", r"\b(jailbreak|do anything now|developer mode|dan mode|unfiltered mode)\b"),
        ("secrets", r"\b(api[ _-]?keys?|passwords?|secret (keys?|tokens?)|access tokens?|"
         r"credentials?)\b"),
        ("url with an action", r"\b(visit|open|click|go to|navigate to|download|fetch|send|post|"
         r"call|curl|browse)\b[^.]{0,60}" + _URL),
        ("url with an action", _URL + r"[^.]{0,60}\b(visit|open|click|download|fetch|send|post|"
         r"call|curl|browse)\b"),
        ("markup", r"</?\s*(untrusted|system|assistant|user|instructions?|tool_result)\b[^>]*>"),
        ("chat template", r"(^|\n)\s*(system|assistant|human)\s*:"),
    )
)  # fmt: skip

_BOT = r"(assistant|bot|ai|model|claude|chatbot|you)"
_DIRECTIVE = re.compile(
    rf"\b(always|never|must|should|has to|is required to|is instructed to)\b[^.]{{0,40}}\b{_BOT}\b|"
    rf"\b{_BOT}\b[^.]{{0,30}}\b(always|never|must|should|has to|is required to|will)\b",
    re.IGNORECASE,
)


def instruction_reason(text: str) -> str | None:
    """The name of the first instruction/injection rule ``text`` breaks, or None."""
    folded = unicodedata.normalize("NFKC", text)
    for name, pattern in INSTRUCTION_RULES:
        if pattern.search(folded):
            return name
    return None


#: the rules that make a tool result (journal text) unusable as evidence: an injection attempt
#: there must not steer memory even through an innocent-looking claim. Narrower than the claim
#: rules: journal prose says "you should", "act as" and "password" innocently.
EVIDENCE_RULES = frozenset(
    {"ignore instructions", "system prompt", "new instructions", "jailbreak", "markup",
     "chat template"}
)  # fmt: skip


def injection_in(text: str) -> str | None:
    """The name of the first :data:`EVIDENCE_RULES` rule ``text`` breaks, or None."""
    folded = unicodedata.normalize("NFKC", text)
    for name, pattern in INSTRUCTION_RULES:
        if name in EVIDENCE_RULES and pattern.search(folded):
            return name
    return None


def directs_the_bot(text: str) -> bool:
    """Whether ``text`` tells the assistant how to behave (always/never/must + bot/you)."""
    return bool(_DIRECTIVE.search(unicodedata.normalize("NFKC", text)))


# --- entry uuids in tool results ---------------------------------------------------------------

_UUID_FIELD = re.compile(r'"uuid"\s*:\s*"([^"\\]{1,100})"')


def entry_uuids_in(text: str) -> set[str]:
    """Entry uuids a stored tool result mentions (``"uuid": "..."`` fields, also in JSON that
    storage truncation cut short)."""
    found = set(_UUID_FIELD.findall(text))
    try:
        data = json.loads(text)
    except ValueError:
        return found
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            value = item.get("uuid")
            if isinstance(value, str) and value:
                found.add(value)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


# --- the guardrails over one extraction ---------------------------------------------------------

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
        self.rows = {m.id: m for m in chunk}
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
            elif message_id in self.tainted:
                self.reject(f"{what} evidence #{message_id}",
                            f"tool result holds instruction-like text "
                            f"({self.tainted[message_id]})")  # fmt: skip
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
    - at most 5 new patterns (supersedes first, then new_patterns in order; a repeat of the
      same canonical text is dropped); a pattern is reinforced/contradicted/superseded once;
      a superseded pattern is not also reinforced;
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
        else:
            metas.append(attrs.evolve(m, child_pattern_ids=children))

    summary = ex.episode_summary[:MAX_SUMMARY_CHARS]
    if (rule := instruction_reason(summary)) is not None:
        g.reject("episode_summary", f"instruction-like text ({rule})")
        summary = ""
    checked = attrs.evolve(
        ex, new_patterns=tuple(new), reinforcements=tuple(reinforcements),
        contradictions=tuple(contradictions), supersedes=tuple(supersedes),
        meta_patterns=tuple(metas), episode_summary=summary,
    )  # fmt: skip
    return checked, g.rejections
