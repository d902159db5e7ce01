"""Untrusted text in prompts: journal text, tool output and the person's words quoted back to a
model go inside ``<untrusted>`` tags, escaped so they can open or close no tag (seed 001,
injection-like text); so does a forwarded message, its origin named (:func:`wrap_forwarded`;
issue 20 row 6), which is never the person's own claim (:func:`own_words`). Pure; used by the
window, the tool loop, the chat and the memory prompts.
"""

from __future__ import annotations

import html
import re


def escape_untrusted(text: str) -> str:
    """``&``, ``<`` and ``>`` escaped, so the text can open or close no tag."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def wrap_untrusted(source: str, text: str) -> str:
    """``<untrusted source="...">`` + escaped text + ``</untrusted>``, for prompts."""
    return (
        f'<untrusted source="{html.escape(source, quote=True)}">\n'
        f"{escape_untrusted(text)}\n</untrusted>"
    )


# --- forwarded messages -----------------------------------------------------------------------

FORWARDED = "forwarded from "
#: a forwarded message as :func:`wrap_forwarded` writes it (its text escaped: no ``<`` inside)
_FORWARD_BLOCK = re.compile(r'<untrusted source="forwarded from [^"<>]*">\n[^<>]*\n</untrusted>')


def wrap_forwarded(origin: str, text: str) -> str:
    """A forwarded message as stored and shown to the model: untrusted, its origin named
    (``<untrusted source="forwarded from channel “News”">``): someone else's words, never the
    person's own claims or instructions."""
    return wrap_untrusted(FORWARDED + origin, text)


def split_forwarded(text: str) -> list[tuple[bool, str]]:
    """``text`` in pieces, in order: ``(True, block)`` for each :func:`wrap_forwarded` block
    (kept as is: its text is escaped), ``(False, words)`` for the rest (the person's own)."""
    out: list[tuple[bool, str]] = []
    at = 0
    for m in _FORWARD_BLOCK.finditer(text):
        if m.start() > at:
            out.append((False, text[at : m.start()]))
        out.append((True, m.group(0)))
        at = m.end()
    if at < len(text):
        out.append((False, text[at:]))
    return out


def own_words(text: str) -> str:
    """What the person wrote themself: ``text`` without its forwarded blocks."""
    return "\n".join(p.strip() for fwd, p in split_forwarded(text) if not fwd and p.strip())


def escape_own(text: str) -> str:
    """A user message for a prompt: the person's own words escaped
    (:func:`escape_untrusted`), forwarded blocks kept as untrusted blocks."""
    return "".join(p if fwd else escape_untrusted(p) for fwd, p in split_forwarded(text))
