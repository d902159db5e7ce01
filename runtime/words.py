"""Counts in words, one rule for every count a person reads: ``1 model call``, ``2 model
calls``, ``0 summaries``."""

from __future__ import annotations

_VOWELS = frozenset("aeiou")


def plural(noun: str) -> str:
    """The plural of an English ``noun`` (of its last word): ``summary`` -> ``summaries``,
    ``day`` -> ``days``, ``match`` -> ``matches``, ``model call`` -> ``model calls``."""
    if noun.endswith("y") and len(noun) > 1 and noun[-2] not in _VOWELS:
        return noun[:-1] + "ies"
    if noun.endswith(("s", "x", "z", "ch", "sh")):
        return noun + "es"
    return noun + "s"


def count(n: int, noun: str, plural_form: str | None = None) -> str:
    """``n`` and the noun, singular for exactly one: ``count(1, "reply")`` is ``1 reply``,
    ``count(3, "reply")`` is ``3 replies`` (``plural_form`` for an irregular noun)."""
    return f"{n} {noun if n == 1 else plural_form or plural(noun)}"
