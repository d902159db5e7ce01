"""Splitting replies into Telegram messages: unit tests for boundaries, property tests."""

from __future__ import annotations

import time
from html.parser import HTMLParser

import pytest
from fakes.bot_api import telegram_html_text
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.telegram.chunking import (
    MAX_MESSAGE_UTF16,
    escape_html,
    html_to_text,
    plan_reply,
    split_html,
    split_text,
    utf16_len,
    validate_html,
    visible_text,
)
from actors.telegram.errors import MalformedHtml

# --- checking helpers --------------------------------------------------------------------------


def _tier(gap: str) -> int:
    """Kind of boundary a dropped whitespace run is: 2 blank line, 1 newline, 0 space, -1 none."""
    return -1 if not gap else min(gap.count("\n"), 2)


def _runs(chunk: str) -> list[str]:
    runs, current = [], ""
    for ch in chunk:
        if ch.isspace():
            current += ch
        elif current:
            runs.append(current)
            current = ""
    return runs


def assert_whitespace_rule(text: str, chunks: list[str]) -> None:
    """text == ws0 + c0 + ws1 + c1 + ... + wsN, chunks stripped; boundaries respect preference."""
    pos = 0
    gaps = []
    for chunk in chunks:
        assert chunk and chunk == chunk.strip()
        at = text.index(chunk, pos)
        gap = text[pos:at]
        assert gap.strip() == ""
        gaps.append(gap)
        pos = at + len(chunk)
    assert text[pos:].strip() == ""
    # a split never passes over a better boundary: inner runs are no stronger than the cut
    for chunk, cut in zip(chunks[:-1], gaps[1:], strict=True):
        assert all(_tier(run) <= _tier(cut) for run in _runs(chunk))


class _Checker(HTMLParser):
    """Independent well-formedness check with the standard library's parser."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.text: list[str] = []
        self.start_tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack.append(tag)
        self.start_tags.append(self.get_starttag_text() or "")

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack[-1] == tag, f"unbalanced </{tag}> in {self.stack}"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def check_html(chunk: str) -> _Checker:
    checker = _Checker()
    checker.feed(chunk)
    checker.close()
    assert checker.stack == [], f"unclosed {checker.stack}"
    return checker


# --- strategies --------------------------------------------------------------------------------

ALPHABET = st.sampled_from([*list("abcdefgh "), "\n", "\n\n", "😀", "é", "\t", " \n ", "你"])
TEXTS = st.lists(ALPHABET | st.text(max_size=3), max_size=120).map("".join)
LIMITS = st.integers(min_value=2, max_value=40)

TAGS = [
    ("b", "<b>"),
    ("i", "<i>"),
    ("u", "<u>"),
    ("s", "<s>"),
    ("code", "<code>"),
    ("pre", "<pre>"),
    ("tg-spoiler", "<tg-spoiler>"),
    ("span", '<span class="tg-spoiler">'),
    ("a", '<a href="https://example.org/?q=1&amp;r=2">'),
    ("blockquote", "<blockquote>"),
]


def _text_node(raw: str) -> str:
    return escape_html(raw).replace("😀", "&#x1F600;")


HTML_DOCS = st.recursive(
    TEXTS.map(_text_node),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map("".join),
        st.tuples(st.sampled_from(TAGS), inner).map(lambda t: f"{t[0][1]}{t[1]}</{t[0][0]}>"),
    ),
    max_leaves=12,
)


# --- plain text --------------------------------------------------------------------------------


def test_boundary_preference() -> None:
    text = "A" * 10 + "\n\n" + "B" * 10 + "\n" + "C" * 5
    assert split_text(text, 25) == ["A" * 10, "B" * 10 + "\n" + "C" * 5]
    assert split_text("aaa bbb\nccc ddd eee", 12) == ["aaa bbb", "ccc ddd eee"]
    assert split_text("aaa bbb ccc", 9) == ["aaa bbb", "ccc"]
    assert split_text("x" * 10, 4) == ["xxxx", "xxxx", "xx"]
    assert split_text("one\r\n\r\ntwo three", 12) == ["one", "two three"]
    assert split_text("para one\n  \npara two", 15) == ["para one", "para two"]
    assert split_text("  \n\n ") == [] and split_text("") == []
    assert split_text("  short  ") == ["short"]


def test_utf16_counting_and_surrogates() -> None:
    assert utf16_len("a😀") == 3
    assert split_text("a" * 4095 + "😀") == ["a" * 4095, "😀"]
    assert split_text("😀" * 2048) == ["😀" * 2048]
    assert split_text("😀" * 2049) == ["😀" * 2048, "😀"]
    paired = "a" + "\ud83d\ude00" * 3  # a pair stored as two code points stays together
    chunks = split_text(paired, 3)
    assert "".join(chunks) == paired
    assert all(not ("\ud800" <= c[-1] <= "\udbff") for c in chunks)
    with pytest.raises(ValueError):
        split_text("abc", 1)


def test_default_limit_and_speed() -> None:
    text = "\n\n".join(f"Paragraph {i}. " + "lorem ipsum dolor " * 30 for i in range(400))
    start = time.perf_counter()
    chunks = split_text(text)
    assert time.perf_counter() - start < 2.0
    assert all(utf16_len(c) <= MAX_MESSAGE_UTF16 for c in chunks)
    assert all(c.startswith("Paragraph") for c in chunks)  # cut at paragraph breaks only
    assert_whitespace_rule(text, chunks)


@given(TEXTS, LIMITS)
def test_plain_chunks_property(text: str, limit: int) -> None:
    chunks = split_text(text, limit)
    assert all(utf16_len(c) <= limit for c in chunks)
    assert_whitespace_rule(text, chunks)
    assert bool(chunks) == bool(text.strip())


@given(st.text(), LIMITS)
def test_plain_chunks_any_text(text: str, limit: int) -> None:
    chunks = split_text(text, limit)
    assert all(utf16_len(c) <= limit for c in chunks)
    assert_whitespace_rule(text, chunks)


# --- HTML --------------------------------------------------------------------------------------


def test_html_never_splits_entities_or_tags() -> None:
    assert split_html("&amp;" * 7, 3) == ["&amp;&amp;&amp;", "&amp;&amp;&amp;", "&amp;"]
    assert split_html("&#x1F600;&#128512;", 2) == ["&#x1F600;", "&#128512;"]
    link = '<a href="https://x.org/?a=1&amp;b=2">one two three</a>'
    assert split_html(link, 5) == [
        '<a href="https://x.org/?a=1&amp;b=2">one</a>',
        '<a href="https://x.org/?a=1&amp;b=2">two</a>',
        '<a href="https://x.org/?a=1&amp;b=2">three</a>',
    ]
    nested = '<b>bold <span class="tg-spoiler">secret words</span> end</b>'
    assert split_html(nested, 12) == [
        '<b>bold <span class="tg-spoiler">secret</span></b>',
        '<b><span class="tg-spoiler">words</span> end</b>',
    ]
    assert split_html("aaaa <b>bbbb</b>", 4) == ["aaaa", "<b>bbbb</b>"]  # no empty <b></b>
    assert split_html("<pre>line one\nline two</pre>", 9) == [
        "<pre>line one</pre>",
        "<pre>line two</pre>",
    ]
    assert split_html("<b> </b>") == []


def test_html_visible_limit_not_source_length() -> None:
    text = "<b>x</b>" * 4096
    assert split_html(text) == [text]
    assert len(split_html(text + "y")) == 2


@pytest.mark.parametrize(
    "bad",
    [
        "<b>x",
        "x</b>",
        "<br>",
        "a < b",
        "<b><i>x</b></i>",
        "<span>x</span>",
        "&#0;",
        "<b/>",
        "</b x>",
    ],
)
def test_malformed_html_is_rejected(bad: str) -> None:
    with pytest.raises(MalformedHtml):
        split_html(bad)
    with pytest.raises(MalformedHtml):
        validate_html(bad)
    plan = plan_reply(bad)
    assert plan.parse_mode is None


def test_lenient_literals_and_fallback_text() -> None:
    assert visible_text("AT&T > 3 &nbsp; &quot;q&quot;") == 'AT&T > 3 &nbsp; "q"'
    assert html_to_text('<b>bold</b> &amp; <a href="https://e.org">link</a>') == (
        "bold & link (https://e.org)"
    )
    assert html_to_text('<a href="https://e.org">https://e.org</a>') == "https://e.org"
    assert html_to_text("<b>x <3 y<br/>z &lt;tag&gt;") == "x <3 y\nz <tag>"
    plan = plan_reply("<b>ok</b>")
    assert plan.parse_mode == "HTML" and plan.chunks == ("<b>ok</b>",)
    plain = plan_reply("<b>broken", html_mode=True)
    assert plain.parse_mode is None and plain.chunks == ("broken",)
    assert plan_reply("1 < 2", html_mode=False).chunks == ("1 < 2",)


@settings(max_examples=300)
@given(HTML_DOCS, LIMITS)
def test_html_chunks_property(doc: str, limit: int) -> None:
    chunks = split_html(doc, limit)
    original = check_html(doc)
    visible_chunks = []
    for chunk in chunks:
        checker = check_html(chunk)
        shown = "".join(checker.text)
        assert utf16_len(shown) <= limit
        assert shown == telegram_html_text(chunk) == visible_text(chunk)  # fake agrees
        assert all(tag in doc for tag in checker.start_tags)  # attributes preserved
        visible_chunks.append(shown)
    assert_whitespace_rule("".join(original.text), visible_chunks)


@given(st.text(), LIMITS)
def test_escaped_text_splits_like_plain_text(text: str, limit: int) -> None:
    escaped = escape_html(text)
    assert visible_text(escaped) == text
    assert [visible_text(c) for c in split_html(escaped, limit)] == split_text(text, limit)


@given(st.text())
def test_html_to_text_never_fails(text: str) -> None:
    out = html_to_text(text)
    if "<" not in text and "&" not in text:
        assert out == text
    assert html_to_text(escape_html(text)) == text
