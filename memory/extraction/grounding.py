"""The text rules behind the guardrails over the extractor's output (seed 000, "Pattern
extraction during compaction"; seed 001: grounding check and injection-like text rejection).
Pure, no I/O.

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

**Instruction-like text** (:mod:`memory.untrusted`, the store's ``remember`` applies it too).
:func:`~memory.untrusted.instruction_reason` names the first rule a text breaks
(ignore/disregard previous instructions, "you must", system/developer prompt, role-play and
jailbreak phrases, new instructions, secrets, a URL with an action verb, markup/tags, chat
template lines) or returns None (none of LoCoMo's 1,210 observations trips one). A claim that
tells the bot how to behave (:func:`~memory.untrusted.directs_the_bot`) is rejected when all
its evidence is tool output: journal text may describe the user, it may not instruct the
assistant.

**Guardrails.** :func:`memory.extraction.guardrails.check_extraction` applies these and the
structural rules (cap, evidence roles, known ids) to a parsed
:class:`memory.extraction.claims.Extraction`.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable

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
_SUFFIXES = (
    "ational",
    "fulness",
    "iveness",
    "ations",
    "nesses",
    "ation",
    "ments",
    "ness",
    "ment",
    "ings",
    "ies",
    "ied",
    "ing",
    "ed",
    "ly",
    "es",
    "s",
)


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
