"""Untrusted text in prompts: journal text, tool output and the person's words quoted back to a
model go inside ``<untrusted>`` tags, escaped so they can open or close no tag (seed 001,
injection-like text); so does a forwarded message, its origin named (:func:`wrap_forwarded`;
issue 20 row 6), which is never the person's own claim (:func:`own_words`). Pure; used by the
window, the tool loop, the chat and the memory prompts.
"""

from __future__ import annotations

import html
import re
import unicodedata


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


# --- instruction-like text ---------------------------------------------------------------------

_URL = r"(?:https?://|www\.)\S+"
INSTRUCTION_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE))
    for name, pattern in (
        (
            "ignore instructions",
            r"\b(ignore|disregard|forget|override|bypass)\b[^.]{0,40}"
            r"\b(previous|prior|above|earlier|all|your|system|safety)\b[^.]{0,20}"
            r"\b(instructions?|prompts?|rules?|messages?|guidelines?|directives?)\b",
        ),
        ("addresses the model", r"\byou (must|should|will|are to|have to|need to|shall)\b"),
        ("addresses the model", r"\byou are (now|no longer|an? (ai|assistant|bot|model))\b"),
        (
            "system prompt",
            r"\b(system|developer|hidden|initial)[ _-]?(prompt|message|instructions?)\b",
        ),
        ("new instructions", r"\b(new|updated|real|additional) instructions?\b"),
        ("role-play", r"\b(act as|pretend (to be|you)|role[ -]?play|roleplay|from now on,? you)\b"),
        ("jailbreak", r"\b(jailbreak|do anything now|developer mode|dan mode|unfiltered mode)\b"),
        (
            "secrets",
            r"\b(api[ _-]?keys?|passwords?|secret (keys?|tokens?)|access tokens?|"
            r"credentials?)\b",
        ),
        (
            "url with an action",
            r"\b(visit|open|click|go to|navigate to|download|fetch|send|post|"
            r"call|curl|browse)\b[^.]{0,60}" + _URL,
        ),
        (
            "url with an action",
            _URL + r"[^.]{0,60}\b(visit|open|click|download|fetch|send|post|"
            r"call|curl|browse)\b",
        ),
        ("markup", r"</?\s*(untrusted|system|assistant|user|instructions?|tool_result)\b[^>]*>"),
        ("chat template", r"(^|\n)\s*(system|assistant|human)\s*:"),
    )
)

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
    {
        "ignore instructions",
        "system prompt",
        "new instructions",
        "jailbreak",
        "markup",
        "chat template",
    }
)


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
