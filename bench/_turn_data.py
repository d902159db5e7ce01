"""Synthetic data for ``bench/turn.py``: a journal, chat histories, user messages, and the fake
embedder (a deterministic bag-of-hashed-words vector).

Entries are written from themed vocabularies (work, family, travel, ...): each entry picks one
or two themes and draws its content words from them with Zipf-like weights, between English
function words, so word co-occurrence (and so how many entries a two-word full-text query
matches) behaves roughly like a real journal's. Everything is seeded: the same ``--seed`` gives
the same data, queries and vectors.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from memory.tools.results import truncate_for_storage


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


THEMES: dict[str, tuple[str, ...]] = {
    "work": _words(
        "work meeting project deadline manager team office email presentation client report "
        "budget colleague boss promotion interview review launch release sprint bug feature "
        "design roadmap contract invoice salary overtime commute laptop slack standup demo "
        "hiring feedback strategy quarter workshop conference proposal spreadsheet"
    ),
    "family": _words(
        "mom dad sister brother grandma grandpa kids daughter son cousin aunt uncle family "
        "dinner birthday wedding anniversary holiday christmas visit call phone house garden "
        "argument hug baby nephew niece parents photos album recipe sunday lunch table "
        "stories memories tradition reunion"
    ),
    "travel": _words(
        "trip flight airport train hotel beach mountain lake city museum passport luggage "
        "road map hike island village cathedral market ferry border tour guide sunset "
        "coast valley river bridge camping tent backpack rental ticket delay station harbor "
        "castle vineyard"
    ),
    "health": _words(
        "run running gym workout yoga sleep tired headache doctor weight diet sugar coffee "
        "water walk steps knee back pain stretch swim bike meditation breathing energy "
        "calories protein vegetables fasting insomnia nap injury physio marathon training "
        "appointment pills"
    ),
    "feelings": _words(
        "happy sad anxious calm angry grateful lonely excited worried proud stressed "
        "relieved hopeful frustrated nervous content overwhelmed peaceful guilty jealous "
        "bored curious confident afraid motivated restless tender nostalgic ashamed joyful "
        "irritated hopeless cheerful"
    ),
    "friends": _words(
        "anna marco lucia peter sofia david elena tom julia carlos friends party drinks bar "
        "concert movie game chat laugh gossip message birthday brunch karaoke festival "
        "board football match dance club roommate neighbor visit weekend plans"
    ),
    "home": _words(
        "apartment kitchen cleaning laundry groceries cooking bread soup pasta rent landlord "
        "furniture plants balcony cat dog vacuum dishes repair plumber paint shelves sofa "
        "bedroom window heating bills mortgage move boxes neighbors noise garden tools"
    ),
    "learning": _words(
        "book reading novel chapter course language spanish german guitar piano lesson "
        "practice podcast article study exam notes essay writing poem library teacher "
        "class homework grammar vocabulary history science philosophy math lecture "
        "tutorial documentary"
    ),
    "money": _words(
        "money savings budget expenses bank loan debt investment stocks rent taxes bills "
        "shopping sale discount price expensive cheap account card payment salary bonus "
        "pension insurance refund receipt wallet cash spending subscription"
    ),
    "weather": _words(
        "rain sun snow wind storm cold hot warm fog cloudy spring summer autumn winter "
        "morning evening night sky stars moon thunder umbrella heat frost breeze sunrise "
        "season temperature humid dry"
    ),
    "love": _words(
        "date partner boyfriend girlfriend kiss romance relationship breakup love crush "
        "flowers letter dinner candles promise trust jealousy distance together apart "
        "moving future ring proposal honeymoon cuddle evening"
    ),
    "creative": _words(
        "painting drawing sketch photography camera music song lyrics band studio film "
        "script story idea draft blog website design colors canvas clay pottery knitting "
        "sewing craft exhibition gallery theater"
    ),
}
FUNCTION_WORDS = _words(
    "i the a and to of in it was my that we with for on at but so me had is this be "
    "then just about really today after when all very some after still there not went "
    "felt got much more back out up too again also because before over maybe"
)
CITIES = ("Madrid", "Barcelona", "Lisbon", "Berlin", "Paris", "London", "Rome", "New York")
TIMEZONES = (
    "Europe/Madrid",
    "Europe/Madrid",
    "Europe/Madrid",
    "Europe/Lisbon",
    "Europe/Berlin",
    "Europe/Paris",
    "Europe/London",
    "America/New_York",
    "Invalid/Zone",
)
QUESTIONS = (
    "What did I write about {a} and {b}?",
    "When was the last time I mentioned {a} together with {b}?",
    "Can you find my entries about {a} and {b}, I want to reread them",
    "Did I ever write how I felt about {a} and {b}?",
    "Remind me what happened with the {a} and the {b}",
)
_TOKEN = re.compile(r"[a-z']+")
_STOPWORDS = frozenset(FUNCTION_WORDS)
VOCAB: tuple[str, ...] = tuple(dict.fromkeys(w for ws in THEMES.values() for w in ws))


def _zipf(n: int, s: float = 1.0) -> np.ndarray:
    w: np.ndarray = 1.0 / np.arange(1, n + 1) ** s
    return w / w.sum()  # type: ignore[no-any-return]


# --- the fake embedder ---------------------------------------------------------------------------


def word_vector(word: str, dims: int) -> np.ndarray:
    """A fixed pseudo-random vector per word (seeded by a hash of the word)."""
    seed = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
    return np.random.default_rng(seed).standard_normal(dims).astype(np.float32)


class HashEmbedder:
    """:class:`memory.embeddings.providers.Embedder` answering at once: the normalised sum of
    hashed word
    vectors, function words left out (so texts sharing words are close, and the vector arm of
    the search has neighbours to find). Word vectors are cached."""

    provider = "local"

    def __init__(self, dims: int, model: str | None = None) -> None:
        self.dims = dims
        self.model = model or f"bench-hash-{dims}"
        self._cache: dict[str, np.ndarray] = {}
        self.calls = 0
        self.seconds = 0.0

    def vector(self, word: str) -> np.ndarray:
        v = self._cache.get(word)
        if v is None:
            v = self._cache[word] = word_vector(word, self.dims)
        return v

    def embed_sync(self, text: str) -> np.ndarray:
        total = np.zeros(self.dims, np.float32)
        for word in _TOKEN.findall(text.lower()):
            if word not in _STOPWORDS:
                total += self.vector(word)
        norm = float(np.linalg.norm(total))
        if norm == 0.0:
            total[0], norm = 1.0, 1.0
        return total / np.float32(norm)

    async def embed(
        self, texts: Sequence[str], *, purpose: str, chat_id: int | None = None
    ) -> list[np.ndarray]:
        return [self.embed_sync(t) for t in texts]

    async def aclose(self) -> None:
        """Nothing to release."""


# --- the journal ---------------------------------------------------------------------------------

THEME_WORDS = min(len(words) for words in THEMES.values())  # per theme, most frequent first
FUNCTION_SHARE, TAIL_SHARE = 0.50, 0.45  # of an entry's words; the rest are theme words
_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


def tail_vocabulary(size: int = 5000) -> tuple[str, ...]:
    """Pseudo-words for the long tail of an entry's vocabulary (stable, seed-independent)."""
    rng = np.random.default_rng(12345)
    taken = {*VOCAB, *FUNCTION_WORDS}
    words: dict[str, None] = {}
    while len(words) < size:
        word = "".join(
            _SYLLABLES[int(k)] for k in rng.integers(0, len(_SYLLABLES), 2 + (rng.random() < 0.5))
        )
        if word not in taken:
            words[word] = None
    return tuple(words)


class Journal:
    """Seeded generator of ``entries`` rows and their vectors, in chunks (for COPY).

    Half an entry's words are function words, 45 % come from a 5,000-word long tail
    (Zipf), 5 % from the entry's one or two themes (``THEME_WORDS`` words each, Zipf-like),
    so a two-word query about one theme matches a few per cent of the journal.
    """

    COLUMNS = (
        "id",
        "uuid",
        "created_at",
        "modified_at",
        "timezone",
        "text",
        "tags",
        "city",
        "country",
        "word_count",
        "photo_count",
    )

    def __init__(self, embedder: HashEmbedder, seed: int = 7, years: float = 10.0) -> None:
        self.embedder = embedder
        self.seed = seed
        self.years = years
        self.themes = list(THEMES)
        tail = tail_vocabulary()
        #: one id space: theme words, function words, tail words
        self.words = np.array([*VOCAB, *FUNCTION_WORDS, *tail], dtype=object)
        index = {w: i for i, w in enumerate(self.words)}
        self.theme_ids = np.array(
            [[index[w] for w in THEMES[t][:THEME_WORDS]] for t in self.themes]
        )
        self.function_base = len(VOCAB)
        self.tail_base = len(VOCAB) + len(FUNCTION_WORDS)
        self.p_theme = _zipf(len(self.themes), 0.3)
        self.p_word = _zipf(THEME_WORDS, 0.6)
        self.p_function = _zipf(len(FUNCTION_WORDS), 0.8)
        self.p_tail = _zipf(len(tail), 1.05)
        self.word_vectors = np.stack([embedder.vector(w) for w in self.words])
        self.word_vectors[self.function_base : self.tail_base] = 0.0  # as the embedder does

    def chunks(
        self, total: int, size: int = 2000
    ) -> Iterator[tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]]:
        """``(entry rows, (entry_id, model, dims, vector) rows)`` for ids 1..total."""
        rng = np.random.default_rng(self.seed)
        now = datetime.now(UTC).replace(microsecond=0)
        span = timedelta(days=365.25 * self.years).total_seconds()
        for start in range(1, total + 1, size):
            yield self._chunk(rng, start, min(size, total - start + 1), now, span)

    def _chunk(
        self, rng: np.random.Generator, start: int, n: int, now: datetime, span: float
    ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        lengths = np.clip(rng.lognormal(4.9, 0.6, n), 15, 1200).astype(np.int64)
        ages = np.sort(rng.uniform(0, span, n))[::-1]  # ids ascending = older first
        first = rng.choice(len(self.themes), n, p=self.p_theme)
        second = np.where(
            rng.random(n) < 0.4, rng.choice(len(self.themes), n, p=self.p_theme), first
        )
        owner = np.repeat(np.arange(n), lengths)  # entry of each word
        total = int(lengths.sum())
        kind = rng.random(total)
        theme = np.where(rng.random(total) < 0.5, first[owner], second[owner])
        ids = np.where(
            kind < FUNCTION_SHARE,
            self.function_base + rng.choice(len(FUNCTION_WORDS), total, p=self.p_function),
            np.where(
                kind < FUNCTION_SHARE + TAIL_SHARE,
                self.tail_base + rng.choice(len(self.p_tail), total, p=self.p_tail),
                self.theme_ids[theme, rng.choice(THEME_WORDS, total, p=self.p_word)],
            ),
        )
        counts = np.bincount(owner * len(self.words) + ids, minlength=n * len(self.words))
        summed = counts.reshape(n, len(self.words)).astype(np.float32) @ self.word_vectors
        summed /= np.maximum(np.linalg.norm(summed, axis=1, keepdims=True), 1e-9)
        tokens = self.words[ids].tolist()
        bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
        rows: list[tuple[Any, ...]] = []
        model, dims = self.embedder.model, self.embedder.dims
        extras = rng.random((n, 4))
        zones = rng.integers(0, len(TIMEZONES), n)
        cities = rng.integers(0, len(CITIES), n)
        edits = rng.integers(0, 600, n)
        high = rng.integers(0, 2**62, n)
        for i in range(n):
            words = tokens[bounds[i] : bounds[i + 1]]
            text = ". ".join(
                " ".join(words[k : k + 14]).capitalize() for k in range(0, len(words), 14)
            )
            created = now - timedelta(seconds=float(ages[i]))
            city = CITIES[cities[i]] if extras[i, 0] < 0.7 else None
            picked = dict.fromkeys((self.themes[first[i]], self.themes[second[i]]))
            entry_id = start + i
            rows.append(
                (
                    entry_id,
                    str(uuid.UUID(int=int(high[i]) << 64 | entry_id)).upper(),
                    created,
                    created + timedelta(minutes=int(edits[i])),
                    TIMEZONES[zones[i]],
                    text + ".",
                    list(picked) if extras[i, 1] < 0.6 else [],
                    city,
                    "Spain" if city in ("Madrid", "Barcelona") else None,
                    len(words),
                    int(extras[i, 2] < 0.2),
                )
            )
        vectors = [(start + i, model, dims, summed[i]) for i in range(n)]
        return rows, vectors


# --- chats ---------------------------------------------------------------------------------------


def user_message(rng: np.random.Generator) -> tuple[str, str]:
    """A question about the journal and the search query the fake model makes of it."""
    theme = THEMES[list(THEMES)[int(rng.integers(0, len(THEMES)))]][:THEME_WORDS]
    p = _zipf(len(theme), 0.9)
    a, b = rng.choice(len(theme), size=2, replace=False, p=p)
    template = QUESTIONS[int(rng.integers(0, len(QUESTIONS)))]
    return template.format(a=theme[a], b=theme[b]), f"{theme[a]} {theme[b]}"


def _stored_search_result(rng: np.random.Generator, query: str, now: datetime) -> str:
    results = []
    for k in range(int(rng.integers(3, 11))):
        day = now - timedelta(days=int(rng.integers(10, 3000)))
        words = rng.choice(VOCAB, size=45)
        results.append(
            {
                "uuid": uuid.UUID(int=int(rng.integers(0, 2**62)) + k).hex.upper(),
                "date": day.date().isoformat(),
                "time": "21:14",
                "tags": [],
                "snippet": " ".join(str(w) for w in words),
                "matched": ["text", "meaning"],
            }
        )
    full = json.dumps(
        {"query": query, "count": len(results), "results": results, "degraded": False},
        ensure_ascii=False,
    )
    return truncate_for_storage("search_entries", full)


def chat_history(
    chat_id: int, rows: int, rng: np.random.Generator, now: datetime
) -> list[tuple[Any, ...]]:
    """``chat_messages`` rows (chat_id, external_message_id, role, content, tool_calls,
    tool_call_id, tool_name, created_at) spread over the last three days: plain exchanges and
    journal look-ups (user, assistant tool call, tool result, assistant answer)."""
    out: list[tuple[Any, ...]] = []
    at = now - timedelta(days=3)
    step = timedelta(days=3) / max(rows, 1)
    n = 0
    while len(out) < rows:
        n += 1
        question, query = user_message(rng)
        out.append((chat_id, f"hist:{chat_id}:{n}", "user", question, None, None, None, at))
        at += step
        if rng.random() < 0.5:
            call_id = f"toolu_hist_{chat_id}_{n}"
            calls = json.dumps(
                [{"id": call_id, "name": "search_entries", "input": {"query": query}}]
            )
            out.append((chat_id, None, "assistant", "", calls, None, None, at))
            stored = _stored_search_result(rng, query, now)
            out.append((chat_id, None, "tool_result", stored, None, call_id, "search_entries", at))
        words = " ".join(str(w) for w in rng.choice(VOCAB, size=int(rng.integers(15, 60))))
        out.append(
            (chat_id, None, "assistant", f"From what you wrote: {words}.", None, None, None, at)
        )
        at += step
    return out[:rows]


HISTORY_COLUMNS = (
    "chat_id",
    "external_message_id",
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "tool_name",
    "created_at",
)
