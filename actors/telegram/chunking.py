"""Split a reply into Telegram messages (pure functions, no I/O).

Limits are counted in UTF-16 code units, as Telegram counts them (an emoji counts 2); in HTML
mode the limit applies to the visible text after entity parsing, as Telegram's does.

Whitespace rule: a split drops the whitespace at the split point, and every chunk is stripped
and non-blank (Telegram trims messages and rejects blank ones). So for plain text,
``text == ws0 + chunks[0] + ws1 + chunks[1] + ... + wsN`` where every ``ws`` is whitespace
(possibly empty); where no whitespace is dropped (a hard split) the chunks are exact slices.

Split preference inside the allowed window: the last paragraph break (a blank line), else the
last line break, else the last whitespace, else a hard split (never inside a surrogate pair,
an HTML tag or an HTML entity). HTML chunks are individually well formed: tags open at a split
are closed at the end of the chunk and reopened (with their attributes) in the next.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

import attrs

from actors.telegram.errors import MalformedHtml

#: Telegram's limit for a message text, in UTF-16 code units after entity parsing.
MAX_MESSAGE_UTF16 = 4096

#: Telegram's HTML subset (``span`` needs class="tg-spoiler").
HTML_TAGS = frozenset(
    {
        "b",
        "strong",
        "i",
        "em",
        "u",
        "ins",
        "s",
        "strike",
        "del",
        "span",
        "tg-spoiler",
        "a",
        "code",
        "pre",
        "blockquote",
        "tg-emoji",
    }
)
_NAMED_ENTITIES = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}

_ATTR = r"""\s+[A-Za-z_:][-\w:.]*(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s"'=<>`]+))?"""
_TAG_RE = re.compile(rf"<(/?)([A-Za-z][A-Za-z0-9-]*)((?:{_ATTR})*)\s*(/?)>")
_ENTITY_RE = re.compile(r"&(?:#([0-9]{1,8})|#[xX]([0-9A-Fa-f]{1,8})|([A-Za-z][A-Za-z0-9]{0,31}));")
_SPECIAL_RE = re.compile(r"[<&]")
_SPOILER_CLASS_RE = re.compile(r"""\bclass\s*=\s*(["']?)tg-spoiler\1""")


def utf16_len(text: str) -> int:
    """Length of ``text`` in UTF-16 code units (what Telegram counts)."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _char_units(text: str) -> list[str]:
    """Code points, with a surrogate pair that is stored as two code points kept together."""
    units: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if "\ud800" <= c <= "\udbff" and i + 1 < n and "\udc00" <= text[i + 1] <= "\udfff":
            units.append(text[i : i + 2])
            i += 2
        else:
            units.append(c)
            i += 1
    return units


def _plan(units: Sequence[str], limit: int) -> list[tuple[int, int]]:
    """Content ranges ``[start, end)`` over ``units``, each stripped and within ``limit``."""
    if limit < 2:
        raise ValueError("limit must be at least 2 UTF-16 units")
    n = len(units)
    widths = [utf16_len(u) for u in units]
    ws = [u.isspace() for u in units]
    # tier of each whitespace run that follows content: 2 blank line, 1 newline, 0 other
    tier = [-1] * n
    i = 0
    while i < n:
        if ws[i] and i > 0 and not ws[i - 1]:
            j, newlines = i, 0
            while j < n and ws[j]:
                newlines += units[j].count("\n")
                j += 1
            tier[i] = min(newlines, 2)
            i = j
        else:
            i += 1
    ranges: list[tuple[int, int]] = []
    pos = 0
    while True:
        while pos < n and ws[pos]:
            pos += 1
        if pos >= n:
            return ranges
        end, used = pos, 0
        while end < n and used + widths[end] <= limit:
            used += widths[end]
            end += 1
        if end == pos:
            raise ValueError(f"a single unit is wider than the limit {limit}")
        if end == n:
            stop = end
            while ws[stop - 1]:
                stop -= 1
            ranges.append((pos, stop))
            return ranges
        best = [-1, -1, -1]
        for k in range(end, pos, -1):
            t = tier[k]
            if t >= 0 and best[t] < 0:
                best[t] = k
                if t == 2:
                    break
        cut = next((k for k in reversed(best) if k > 0), end)
        ranges.append((pos, cut))
        pos = cut


def split_text(text: str, limit: int = MAX_MESSAGE_UTF16) -> list[str]:
    """Split plain text into stripped, non-blank chunks of at most ``limit`` UTF-16 units."""
    units = _char_units(text)
    return ["".join(units[a:b]) for a, b in _plan(units, limit)]


# --- HTML --------------------------------------------------------------------------------------


@attrs.frozen
class _Atom:
    raw: str
    visible: str  # "" for tags
    opens: str | None = None  # tag name for a start tag
    closes: str | None = None  # tag name for an end tag


def _tokenize(text: str) -> list[_Atom]:
    """Atoms of Telegram HTML: start/end tags, entities and characters; checks balance."""
    atoms: list[_Atom] = []
    stack: list[tuple[str, int]] = []
    pos, n = 0, len(text)
    while pos < n:
        m = _SPECIAL_RE.search(text, pos)
        stop = n if m is None else m.start()
        atoms.extend(_Atom(u, u) for u in _char_units(text[pos:stop]))
        pos = stop
        if pos >= n:
            break
        if text[pos] == "&":
            em = _ENTITY_RE.match(text, pos)
            if em is None:
                atoms.append(_Atom("&", "&"))  # a bare ampersand is literal text
                pos += 1
                continue
            atoms.append(_Atom(em.group(0), _entity_text(em, pos)))
            pos = em.end()
            continue
        tm = _TAG_RE.match(text, pos)
        if tm is None:
            raise MalformedHtml("unescaped '<' (write &lt;)", offset=pos)
        closing, name, attrs_text, selfclose = tm.group(1, 2, 3, 4)
        name = name.lower()
        if name not in HTML_TAGS:
            raise MalformedHtml(f"unsupported tag <{name}>", offset=pos)
        if selfclose:
            raise MalformedHtml(f"self-closing tag <{name}/>", offset=pos)
        if closing:
            if attrs_text.strip():
                raise MalformedHtml(f"end tag </{name}> has attributes", offset=pos)
            if not stack or stack[-1][0] != name:
                raise MalformedHtml(f"unmatched end tag </{name}>", offset=pos)
            stack.pop()
            atoms.append(_Atom(tm.group(0), "", closes=name))
        else:
            if name == "span" and not _SPOILER_CLASS_RE.search(attrs_text):
                raise MalformedHtml('<span> needs class="tg-spoiler"', offset=pos)
            stack.append((name, pos))
            atoms.append(_Atom(tm.group(0), "", opens=name))
        pos = tm.end()
    if stack:
        name, where = stack[-1]
        raise MalformedHtml(f"unclosed tag <{name}>", offset=where)
    return atoms


def _entity_text(m: re.Match[str], offset: int) -> str:
    dec, hexa, name = m.group(1), m.group(2), m.group(3)
    if name is not None:
        return _NAMED_ENTITIES.get(name, m.group(0))  # unsupported names stay literal
    code = int(dec) if dec is not None else int(hexa, 16)
    if code == 0 or code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
        raise MalformedHtml(f"invalid character reference {m.group(0)}", offset=offset)
    return chr(code)


def validate_html(text: str) -> None:
    """Raise ``MalformedHtml`` unless ``text`` is well-formed Telegram HTML."""
    _tokenize(text)


def visible_text(text: str) -> str:
    """The text Telegram displays for well-formed HTML (tags removed, entities decoded)."""
    return "".join(a.visible for a in _tokenize(text))


def split_html(text: str, limit: int = MAX_MESSAGE_UTF16) -> list[str]:
    """Split Telegram HTML into well-formed chunks of at most ``limit`` visible UTF-16 units.

    Raises ``MalformedHtml`` when the input itself is not well formed (send the
    ``html_to_text`` fallback as plain text then).
    """
    atoms = _tokenize(text)
    where = [i for i, a in enumerate(atoms) if a.visible]
    stacks: list[tuple[_Atom, ...]] = []  # open start tags before each atom (and at the end)
    current: tuple[_Atom, ...] = ()
    for a in atoms:
        stacks.append(current)
        if a.opens is not None:
            current = (*current, a)
        elif a.closes is not None:
            current = current[:-1]
    stacks.append(current)
    chunks: list[str] = []
    for vs, ve in _plan([atoms[i].visible for i in where], limit):
        start, end = where[vs], where[ve - 1] + 1
        while start > 0 and atoms[start - 1].opens is not None:
            start -= 1
        while end < len(atoms) and atoms[end].closes is not None:
            end += 1
        head = "".join(a.raw for a in stacks[start])
        body = "".join(a.raw for a in atoms[start:end])
        tail = "".join(f"</{a.opens}>" for a in reversed(stacks[end]))
        chunks.append(head + body + tail)
    return chunks


_A_RE = re.compile(
    r"""<a\s[^<>]*?href\s*=\s*(?:"([^"]*)"|'([^']*)')[^<>]*>(.*?)</a\s*>""", re.I | re.S
)
_STRIP_RE = re.compile(rf"</?({'|'.join(sorted(HTML_TAGS))})(?:\s[^<>]*)?>", re.I)
_BR_RE = re.compile(r"<br\s*/?>", re.I)


def _link_text(m: re.Match[str]) -> str:
    raw_href = m.group(1) if m.group(1) is not None else m.group(2) or ""
    label = m.group(3)
    shown = html.unescape(_STRIP_RE.sub("", label)).strip()
    return label if not raw_href or html.unescape(raw_href) == shown else f"{label} ({raw_href})"


def html_to_text(text: str) -> str:
    """Plain-text fallback for HTML Telegram refused: tags stripped, entities decoded.

    Works on malformed input too: only tags of Telegram's subset (and ``<br>``) are removed,
    anything else that looks like markup is kept as literal text. Links keep their URL.
    """
    text = _A_RE.sub(_link_text, text)
    text = _BR_RE.sub("\n", text)
    return html.unescape(_STRIP_RE.sub("", text))


def escape_html(text: str) -> str:
    """Escape plain text for ``parse_mode=HTML`` (``&``, ``<``, ``>``)."""
    return html.escape(text, quote=False)


@attrs.frozen
class ChunkPlan:
    """The messages to send for one reply and the parse_mode to send them with."""

    chunks: tuple[str, ...]
    parse_mode: str | None


def plan_reply(text: str, *, html_mode: bool = True, limit: int = MAX_MESSAGE_UTF16) -> ChunkPlan:
    """Chunks for a reply: HTML chunks when the HTML is valid, else plain-text fallback chunks."""
    if html_mode:
        try:
            return ChunkPlan(tuple(split_html(text, limit)), "HTML")
        except MalformedHtml:
            text = html_to_text(text)
    return ChunkPlan(tuple(split_text(text, limit)), None)
