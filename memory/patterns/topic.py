"""The rule that turns a ``/forget`` topic into a full-text query: positive words only.

A topic is what the person wants gone, never a search expression: ``-x``, ``!x``, ``"x"``,
``x OR -x`` match what ``x`` matches (or nothing), never "everything but x" — with
``websearch_to_tsquery`` ``/forget -word`` matched (and one tap deleted) the whole
conversation. :func:`topic_tsquery` keeps the topic's letters-and-digits words, drops the
operator words (``or``, ``and``, ``not``), and ANDs what is left as input for
``to_tsquery('english', $n)``; it is the one place a topic becomes a query (the ``/forget``
matches of :mod:`memory.patterns.views` and :mod:`memory.patterns.forgetting`).
"""

from __future__ import annotations

import re

#: words a search syntax reads as operators; a topic made only of them matches nothing
OPERATOR_WORDS = frozenset({"or", "and", "not"})
#: at most this many words of a topic are used (a topic is a few words)
MAX_WORDS = 16
_WORD = re.compile(r"[^\W_]+")


def topic_words(topic: str) -> list[str]:
    """The topic's positive words, lower-cased, each once, in order."""
    words = [w.lower() for w in _WORD.findall(topic)]
    kept = [w for w in dict.fromkeys(words) if w not in OPERATOR_WORDS]
    return kept[:MAX_WORDS]


def topic_tsquery(topic: str) -> str:
    """A ``to_tsquery('english', ...)`` string AND-ing :func:`topic_words` ('' — which matches
    nothing — when there are none). Only letters and digits reach it, so it is always valid
    syntax and never a negation."""
    return " & ".join(topic_words(topic))
