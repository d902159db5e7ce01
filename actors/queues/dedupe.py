"""In-memory TTL dedupe cache for incoming updates (the hot path; no I/O).

Telegram retries a webhook call it thinks failed and re-sends callback queries until they are
answered. The cache remembers the dedupe keys of recent updates, strongest first as
``actors.telegram.types.dedupe_keys`` produces them: ``update:<id>`` -> ``callback:<id>`` ->
``message:<chat_id>:<message_id>``. An update is a duplicate when *any* of its keys was seen
within the TTL; the first matching key (in the caller's priority order) is reported.

It is an optimisation only: the durable safety net is the inbox's UNIQUE ``update_key``,
which survives restarts. Time is passed in by the caller (``now``, seconds on any monotonic
clock: ``trio.current_time()``, a ``MockClock``, or plain floats in tests).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

DEFAULT_TTL = 300.0
DEFAULT_MAX_KEYS = 2000


class DedupeCache:
    """Remembers keys for ``ttl`` seconds after they were added; at most ``max_keys`` keys.

    Entries expire a fixed ``ttl`` after they were first added (a hit does not extend them).
    When full, the oldest keys are evicted first.
    """

    def __init__(self, ttl: float = DEFAULT_TTL, max_keys: int = DEFAULT_MAX_KEYS) -> None:
        if ttl <= 0:
            raise ValueError("ttl must be positive")
        if max_keys < 1:
            raise ValueError("max_keys must be at least 1")
        self.ttl = ttl
        self.max_keys = max_keys
        # key -> time added; insertion order is age order (oldest first)
        self._added: OrderedDict[str, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._added)

    def _purge(self, now: float) -> None:
        """Drop expired keys from the old end."""
        limit = now - self.ttl
        while self._added:
            key, added = next(iter(self._added.items()))
            if added > limit:
                break
            del self._added[key]

    def _live(self, key: str, now: float) -> bool:
        added = self._added.get(key)
        return added is not None and now - added < self.ttl

    def match(self, keys: Sequence[str], now: float) -> str | None:
        """The first of ``keys`` (priority order) seen within the TTL, or None."""
        self._purge(now)
        for key in keys:
            if self._live(key, now):
                return key
        return None

    def seen(self, keys: Sequence[str], now: float) -> bool:
        """True when any of ``keys`` was seen within the TTL (nothing is added)."""
        return self.match(keys, now) is not None

    def add(self, keys: Iterable[str], now: float) -> None:
        """Remember ``keys`` as seen at ``now``; evicts the oldest keys beyond ``max_keys``."""
        self._purge(now)
        for key in keys:
            if self._live(key, now):
                continue
            self._added.pop(key, None)
            self._added[key] = now
        while len(self._added) > self.max_keys:
            self._added.popitem(last=False)

    def seen_or_add(self, keys: Sequence[str], now: float) -> bool:
        """True if any key was seen within the TTL; otherwise remember all keys, return False."""
        if self.seen(keys, now):
            return True
        self.add(keys, now)
        return False

    def forget(self, keys: Iterable[str]) -> None:
        """Drop ``keys`` (e.g. when storing the update failed and a retry must get through)."""
        for key in keys:
            self._added.pop(key, None)

    def clear(self) -> None:
        self._added.clear()
