"""API cost math and the rate-override parser."""

from __future__ import annotations

import pytest

from memory.llm.cost import (
    DEFAULT_RATES,
    Cost,
    Rate,
    billed_input_tokens,
    configured_rates,
    duration_cost,
    lookup,
    parse_rates,
    token_cost,
    with_overrides,
)
from runtime.errors import SettingsError


def test_default_rates() -> None:
    assert DEFAULT_RATES["claude-sonnet-4-6"] == Rate(3.0, 15.0)
    assert DEFAULT_RATES["claude-sonnet-4-5"] == Rate(3.0, 15.0)
    assert DEFAULT_RATES["claude-sonnet-4-5-20250514"] == Rate(3.0, 15.0)
    assert DEFAULT_RATES["claude-haiku-4-5"] == Rate(1.0, 5.0)
    assert DEFAULT_RATES["text-embedding-3-small"] == Rate(0.02, 0.0)
    assert DEFAULT_RATES["whisper-1"] == Rate(per_minute=0.006)


def test_token_cost() -> None:
    c = token_cost(DEFAULT_RATES, "claude-sonnet-4-5", 10_000, 2_000)
    assert c.known and c.usd == pytest.approx(0.03 + 0.03)
    c = token_cost(DEFAULT_RATES, "claude-haiku-4-5", 1_000_000, 1_000_000)
    assert c.usd == pytest.approx(6.0)
    c = token_cost(DEFAULT_RATES, "text-embedding-3-small", 500_000, 0)
    assert c.usd == pytest.approx(0.01)
    assert token_cost(DEFAULT_RATES, "claude-sonnet-4-5", 0, 0) == Cost(0.0, known=True)


def test_cache_reads_and_writes_are_priced_by_ttl() -> None:
    # 10,000 prompt tokens: 6,000 read from the cache, 3,000 written (1,000 of them for 1 h),
    # 1,000 uncached; Sonnet 4.6 at $3/$15
    billed = billed_input_tokens(
        10_000, cache_read_tokens=6_000, cache_write_tokens=3_000, cache_write_1h_tokens=1_000
    )
    assert billed == pytest.approx(1_000 + 6_000 * 0.1 + 2_000 * 1.25 + 1_000 * 2.0)
    c = token_cost(
        DEFAULT_RATES,
        "claude-sonnet-4-6",
        10_000,
        100,
        cache_read_tokens=6_000,
        cache_write_tokens=3_000,
        cache_write_1h_tokens=1_000,
    )
    assert c.usd == pytest.approx((6_100 * 3 + 100 * 15) / 1e6)
    # the whole prompt read from the cache costs a tenth; written for 5 min 1.25x, for 1 h 2x
    full = token_cost(DEFAULT_RATES, "claude-haiku-4-5", 10**6, 0).usd
    assert token_cost(
        DEFAULT_RATES, "claude-haiku-4-5", 10**6, 0, cache_read_tokens=10**6
    ).usd == pytest.approx(full * 0.1)
    assert token_cost(
        DEFAULT_RATES, "claude-haiku-4-5", 10**6, 0, cache_write_tokens=10**6
    ).usd == pytest.approx(full * 1.25)
    assert token_cost(
        DEFAULT_RATES,
        "claude-haiku-4-5",
        10**6,
        0,
        cache_write_tokens=10**6,
        cache_write_1h_tokens=10**6,
    ).usd == pytest.approx(full * 2)
    assert billed_input_tokens(500) == 500
    with pytest.raises(ValueError, match="exceed"):
        billed_input_tokens(100, cache_read_tokens=80, cache_write_tokens=30)
    with pytest.raises(ValueError, match="cache_write_1h_tokens"):
        billed_input_tokens(100, cache_write_tokens=10, cache_write_1h_tokens=20)


def test_dated_model_names_fall_back_to_base() -> None:
    c = token_cost(DEFAULT_RATES, "claude-haiku-4-5-20251001", 1_000_000, 0)
    assert c.known and c.usd == pytest.approx(1.0)
    assert lookup(DEFAULT_RATES, "claude-sonnet-4-5-20250929") == Rate(3.0, 15.0)


def test_duration_cost() -> None:
    assert duration_cost(DEFAULT_RATES, "whisper-1", 90).usd == pytest.approx(0.009)
    assert duration_cost(DEFAULT_RATES, "whisper-1", 0).usd == 0.0
    with pytest.raises(ValueError):
        duration_cost(DEFAULT_RATES, "whisper-1", -1)


def test_unknown_and_local_models() -> None:
    unknown = token_cost(DEFAULT_RATES, "gpt-9-ultra", 1000, 1000)
    assert unknown == Cost(0.0, known=False)
    assert duration_cost(DEFAULT_RATES, "mystery-asr", 60) == Cost(0.0, known=False)
    local = token_cost(DEFAULT_RATES, "wordllama-l2-supercat", 10**6, 0)
    assert local == Cost(0.0, known=True)
    assert token_cost(DEFAULT_RATES, "local:bge-small", 10**6, 10**6) == Cost(0.0, known=True)
    with pytest.raises(ValueError):
        token_cost(DEFAULT_RATES, "claude-haiku-4-5", -1, 0)


def test_parse_rates() -> None:
    parsed = parse_rates(" my-model = 0.5/2 , whisper-2=0.01/min,claude-sonnet-4-5=3/15.5")
    assert parsed == {
        "my-model": Rate(0.5, 2.0),
        "whisper-2": Rate(per_minute=0.01),
        "claude-sonnet-4-5": Rate(3.0, 15.5),
    }
    assert parse_rates("") == {}
    assert parse_rates(" , ") == {}


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("claude", "expected model=input/output"),
        ("=1/2", "expected model=input/output"),
        ("m=1", "is not input/output"),
        ("m=a/b", "is not input/output"),
        ("m=-1/2", "is not input/output"),
        ("m=1/2/3", "is not input/output"),
        ("m=1/2,m=3/4", "given twice"),
    ],
)
def test_parse_rates_errors(spec: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        parse_rates(spec)


def test_with_overrides() -> None:
    rates = with_overrides(DEFAULT_RATES, "claude-haiku-4-5=0.8/4,new=1/1")
    assert rates["claude-haiku-4-5"] == Rate(0.8, 4.0)
    assert rates["new"] == Rate(1.0, 1.0)
    assert rates["claude-sonnet-4-5"] == Rate(3.0, 15.0)
    assert DEFAULT_RATES["claude-haiku-4-5"] == Rate(1.0, 5.0)  # base untouched
    assert token_cost(rates, "new", 10**6, 10**6).usd == pytest.approx(2.0)


def test_configured_rates_name_the_setting() -> None:
    rates = configured_rates("claude-sonnet-4-6=3/15, whisper-1=0.01/min")
    assert rates["claude-sonnet-4-6"] == Rate(3.0, 15.0)
    assert rates["whisper-1"] == Rate(per_minute=0.01)
    assert configured_rates("") == DEFAULT_RATES
    with pytest.raises(SettingsError, match=r"^MODEL_RATES: .*'claude-sonnet-4-6=3'"):
        configured_rates("claude-sonnet-4-6=3")
