"""Canonical form of pattern content: the first (exact) tier of two-tier deduplication.

``normalize`` applies Unicode NFKC with case folding (a stronger lowercase: "Straße" and
"STRASSE" agree), collapses every run of whitespace to one space and strips punctuation and
whitespace from both ends. ``canonical_hash`` is the SHA-256 hex digest of that form, stored in
``patterns.canonical_hash``.
"""

from __future__ import annotations

import hashlib
import unicodedata


def _is_edge_junk(ch: str) -> bool:
    return ch.isspace() or unicodedata.category(ch).startswith("P")


def normalize(content: str) -> str:
    """NFKC + casefold, whitespace collapsed, punctuation stripped at both ends."""
    text = unicodedata.normalize("NFKC", content)
    text = unicodedata.normalize("NFKC", text.casefold())
    text = " ".join(text.split())
    start, end = 0, len(text)
    while start < end and _is_edge_junk(text[start]):
        start += 1
    while end > start and _is_edge_junk(text[end - 1]):
        end -= 1
    return text[start:end]


def canonical_hash(content: str) -> str:
    """SHA-256 hex digest of :func:`normalize` ``(content)`` encoded as UTF-8."""
    return hashlib.sha256(normalize(content).encode("utf-8")).hexdigest()


def lock_key(*parts: object) -> int:
    """A PostgreSQL advisory lock key: a signed 64-bit hash of ``engram:<part>:<part>...``."""
    digest = hashlib.blake2b(":".join(["engram", *map(str, parts)]).encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "big", signed=True)
