"""Turning a natural-language query into a full-text query.

``plainto_tsquery`` ANDs every word, so a question ("when did Caroline go to the support
group?") matches almost nothing: a stored claim never contains all of its words. The full-text
arms of retrieval instead OR the query's content words (stop words dropped, Postgres stemming
still applied by ``to_tsquery('english', ...)``) and let ``ts_rank`` order the matches.

:func:`content_text` is the same words as plain text, for ``to_tsvector('english', ...)`` when
the query's stemmed lexemes are needed one by one (a BM25-style arm counting each term's
document frequency; see ``bench/locomo.py``).

Tried on the synthetic sets of ``bench/data`` and not adopted (no gain): prefix matching
(``word:*``), dropping names, more question-scaffolding stop words.
"""

from __future__ import annotations

import re

# Words that carry no topic (on top of Postgres' own english stop list, which to_tsquery also
# drops): question words and conversational filler.
_EXTRA_STOP_WORDS = """
    a about above after again all am an and any are as at be been before being below between
    both but by can could did do does doing done during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just
    know like me might more most my myself no nor not now of off on once only or other our ours
    ourselves out over own really same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself
    yourselves user users tell told say said thing things get got go went going
"""
EXTRA_STOP_WORDS = frozenset(_EXTRA_STOP_WORDS.split())

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?", re.UNICODE)
MAX_TERMS = 32


def content_words(text: str) -> list[str]:
    """The query's distinct content words, lower-cased, in order of appearance."""
    seen: dict[str, None] = {}
    for match in _WORD.finditer(text.lower()):
        word = match.group(0).replace("’", "'").split("'")[0]
        if len(word) < 2 or word in EXTRA_STOP_WORDS or (word.isdigit() and len(word) < 3):
            continue
        seen.setdefault(word, None)
    return list(seen)[:MAX_TERMS]


def or_tsquery(text: str) -> str:
    """A ``to_tsquery`` string OR-ing the content words of ``text`` ('' when there are none).

    Only letters and digits reach the result, so it is always valid ``to_tsquery`` syntax.
    """
    return " | ".join(content_words(text))


def content_text(text: str) -> str:
    """The content words of ``text`` joined by spaces ('' when there are none)."""
    return " ".join(content_words(text))
