"""The in-memory TTL dedupe cache: TTL, size bound, key priority, with plain and mock clocks."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from actors.queues.dedupe import DEFAULT_MAX_KEYS, DEFAULT_TTL, DedupeCache
from actors.telegram.types import dedupe_keys, parse_update


def test_defaults_follow_the_seed() -> None:
    cache = DedupeCache()
    assert DEFAULT_TTL == 300.0
    assert DEFAULT_MAX_KEYS == 2000
    assert (cache.ttl, cache.max_keys) == (300.0, 2000)


def test_seen_or_add_and_ttl_expiry() -> None:
    cache = DedupeCache(ttl=300)
    keys = ("update:1", "message:5:10")
    assert cache.seen_or_add(keys, 0.0) is False
    assert cache.seen_or_add(keys, 1.0) is True
    assert cache.seen_or_add(keys, 299.9) is True
    # a fixed window: hits do not extend it
    assert cache.seen_or_add(keys, 300.0) is False
    assert cache.seen_or_add(keys, 300.5) is True


def test_any_key_matches_and_the_strongest_is_reported() -> None:
    cache = DedupeCache()
    cache.add(["update:1", "message:5:10"], 0.0)
    # a different update id carrying the same chat/message is a duplicate too
    assert cache.match(["update:2", "message:5:10"], 1.0) == "message:5:10"
    cache.add(["update:2", "callback:abc"], 1.0)
    assert cache.match(["update:2", "callback:abc"], 2.0) == "update:2"
    assert cache.match(["update:9", "callback:abc"], 2.0) == "callback:abc"
    assert cache.match(["update:9", "callback:zzz"], 2.0) is None


def test_seen_does_not_add_and_forget_removes() -> None:
    cache = DedupeCache()
    assert cache.seen(["update:1"], 0.0) is False
    assert cache.seen(["update:1"], 0.0) is False
    assert len(cache) == 0
    cache.add(["update:1", "message:1:1"], 0.0)
    cache.forget(["update:1", "message:1:1"])
    assert cache.seen(["update:1"], 1.0) is False


def test_bounded_oldest_evicted_first() -> None:
    cache = DedupeCache(ttl=300, max_keys=2000)
    for i in range(2500):
        cache.add([f"update:{i}"], i * 0.01)
    assert len(cache) == 2000
    assert not cache.seen(["update:0"], 26.0)
    assert not cache.seen(["update:499"], 26.0)
    assert cache.seen(["update:500"], 26.0)
    assert cache.seen(["update:2499"], 26.0)


def test_expired_keys_are_purged() -> None:
    cache = DedupeCache(ttl=10)
    for i in range(100):
        cache.add([f"update:{i}"], float(i) / 100)
    cache.add(["update:new"], 20.0)
    assert len(cache) == 1


def test_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError):
        DedupeCache(ttl=0)
    with pytest.raises(ValueError):
        DedupeCache(max_keys=0)


def test_keys_of_real_updates_in_priority_order() -> None:
    msg = parse_update(
        {
            "update_id": 7,
            "message": {
                "message_id": 3,
                "date": 1,
                "chat": {"id": 42, "type": "private"},
                "text": "hi",
            },
        }
    )
    keys = dedupe_keys(msg)
    assert keys[0] == "update:7"
    assert "message:42:3" in keys
    cb = parse_update(
        {"update_id": 8, "callback_query": {"id": "cbq", "from": {"id": 1}, "data": "x"}}
    )
    assert dedupe_keys(cb)[:2] == ("update:8", "callback:cbq")
    cache = DedupeCache()
    assert not cache.seen_or_add(keys, 0.0)
    assert cache.seen_or_add(keys, 0.1)


async def test_with_a_mock_clock(autojump_clock: trio.testing.MockClock) -> None:
    cache = DedupeCache()
    keys = ["update:1"]
    assert not cache.seen_or_add(keys, trio.current_time())
    await trio.sleep(299)
    assert cache.seen_or_add(keys, trio.current_time())
    await trio.sleep(2)
    assert not cache.seen_or_add(keys, trio.current_time())
