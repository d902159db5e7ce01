"""API cost math (seed 000, "API cost tracking"): rates are config, cost is computed per call.

Token models are priced in USD per 1M input/output tokens; audio models (``whisper-1``) in USD
per minute. Lookup is exact first, then without a trailing ``-YYYYMMDD`` snapshot date (the
APIs echo dated names such as ``claude-haiku-4-5-20251001``). Local models — names starting
with ``local:``/``local/`` or ``wordllama`` — cost 0. Any other unknown model costs 0 with
``known=False`` so the caller can log a warning.

Prompt caching (Anthropic's prices; an OpenAI-compatible server's cached tokens are priced the
same way): a token read from the cache costs 0.1x the input rate, a token written to it 1.25x
with the 5-minute TTL and 2x with the 1-hour TTL. ``input_tokens`` counts every prompt token;
the cached ones are the parts of it given as ``cache_read_tokens`` and ``cache_write_tokens``
(of which ``cache_write_1h_tokens`` were written with the 1-hour TTL).

Override syntax (a settings string)::

    "claude-sonnet-4-6=3/15, my-model=0.5/2, whisper-1=0.006/min"
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from types import MappingProxyType

import attrs

from runtime.errors import SettingsError


@attrs.frozen
class Rate:
    """USD per 1M input tokens, per 1M output tokens, and per audio minute."""

    input_per_mtok: float = 0.0
    output_per_mtok: float = 0.0
    per_minute: float = 0.0


@attrs.frozen
class Cost:
    """A computed cost; ``known`` is False when the model had no rate (cost then 0)."""

    usd: float
    known: bool = True


RateTable = Mapping[str, Rate]

_SONNET = Rate(3.0, 15.0)
_HAIKU = Rate(1.0, 5.0)

#: a prompt-cache read, as a share of the input rate
CACHE_READ_FACTOR = 0.1
#: a prompt-cache write, as a share of the input rate, by TTL
CACHE_WRITE_FACTORS: Mapping[str, float] = MappingProxyType({"5m": 1.25, "1h": 2.0})

DEFAULT_RATES: RateTable = MappingProxyType(
    {
        "claude-sonnet-4-6": _SONNET,
        "claude-sonnet-4-5": _SONNET,
        "claude-sonnet-4-5-20250514": _SONNET,
        "claude-haiku-4-5": _HAIKU,
        "text-embedding-3-small": Rate(0.02, 0.0),
        "whisper-1": Rate(per_minute=0.006),
    }
)

LOCAL_PREFIXES = ("local:", "local/", "wordllama")

_DATE_SUFFIX = re.compile(r"-\d{8}$")
_NUMBER = r"\s*(\d+(?:\.\d*)?|\.\d+)\s*"
_TOKEN_RATE = re.compile(rf"{_NUMBER}/{_NUMBER}")
_MINUTE_RATE = re.compile(rf"{_NUMBER}/\s*min\s*")


def is_local(model: str) -> bool:
    """True for models that run in-process and cost nothing."""
    return model.startswith(LOCAL_PREFIXES)


def lookup(rates: RateTable, model: str) -> Rate | None:
    """The rate of ``model`` (exact, then without a date suffix); zero for local models."""
    if model in rates:
        return rates[model]
    base = _DATE_SUFFIX.sub("", model)
    if base in rates:
        return rates[base]
    if is_local(model):
        return Rate()
    return None


def _check_count(name: str, value: float) -> None:
    if value < 0 or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number >= 0, got {value}")


def billed_input_tokens(
    input_tokens: int,
    *,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
    cache_write_1h_tokens: int = 0,
) -> float:
    """The prompt in full-price input token equivalents: uncached tokens at 1, cache reads at
    0.1, cache writes at 1.25 (5-minute TTL) or 2 (1-hour TTL).

    Raises ValueError when the cached parts exceed their totals."""
    for name, value in (
        ("input_tokens", input_tokens),
        ("cache_read_tokens", cache_read_tokens),
        ("cache_write_tokens", cache_write_tokens),
        ("cache_write_1h_tokens", cache_write_1h_tokens),
    ):
        _check_count(name, value)
    if cache_write_1h_tokens > cache_write_tokens:
        raise ValueError(
            f"cache_write_1h_tokens ({cache_write_1h_tokens}) > cache_write_tokens "
            f"({cache_write_tokens})"
        )
    uncached = input_tokens - cache_read_tokens - cache_write_tokens
    if uncached < 0:
        raise ValueError(
            f"cached tokens ({cache_read_tokens} read + {cache_write_tokens} written) exceed "
            f"input_tokens ({input_tokens})"
        )
    return (
        uncached
        + cache_read_tokens * CACHE_READ_FACTOR
        + (cache_write_tokens - cache_write_1h_tokens) * CACHE_WRITE_FACTORS["5m"]
        + cache_write_1h_tokens * CACHE_WRITE_FACTORS["1h"]
    )


def token_cost(
    rates: RateTable,
    model: str,
    input_tokens: int,
    output_tokens: int,
    *,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
    cache_write_1h_tokens: int = 0,
) -> Cost:
    """Cost of one token-billed call (``input_tokens`` includes the cached parts; see the
    module docstring)."""
    _check_count("output_tokens", output_tokens)
    billed = billed_input_tokens(
        input_tokens,
        cache_read_tokens=cache_read_tokens,
        cache_write_tokens=cache_write_tokens,
        cache_write_1h_tokens=cache_write_1h_tokens,
    )
    rate = lookup(rates, model)
    if rate is None:
        return Cost(0.0, known=False)
    usd = (billed * rate.input_per_mtok + output_tokens * rate.output_per_mtok) / 1e6
    return Cost(usd)


def duration_cost(rates: RateTable, model: str, seconds: float) -> Cost:
    """Cost of one duration-billed call (transcription), pro rata per second."""
    _check_count("seconds", seconds)
    rate = lookup(rates, model)
    if rate is None:
        return Cost(0.0, known=False)
    return Cost(seconds / 60.0 * rate.per_minute)


def parse_rates(spec: str) -> dict[str, Rate]:
    """Parse ``"model=in/out,model2=usd/min"``; an empty string gives ``{}``.

    Raises ValueError naming the bad entry.
    """
    out: dict[str, Rate] = {}
    for raw in spec.split(","):
        entry = raw.strip()
        if not entry:
            continue
        model, sep, value = entry.partition("=")
        model = model.strip()
        if not sep or not model:
            raise ValueError(
                f"rate override {entry!r}: expected model=input/output (USD per 1M tokens) "
                "or model=usd/min"
            )
        if model in out:
            raise ValueError(f"rate override {entry!r}: model {model!r} given twice")
        if m := _MINUTE_RATE.fullmatch(value):
            out[model] = Rate(per_minute=float(m.group(1)))
        elif m := _TOKEN_RATE.fullmatch(value):
            out[model] = Rate(float(m.group(1)), float(m.group(2)))
        else:
            raise ValueError(
                f"rate override {entry!r}: value {value.strip()!r} is not input/output "
                "(two non-negative numbers, USD per 1M tokens) or usd/min"
            )
    return out


def with_overrides(base: RateTable, spec: str) -> RateTable:
    """``base`` updated by the parsed override ``spec`` (a new read-only table)."""
    return MappingProxyType({**base, **parse_rates(spec)})


@functools.lru_cache(maxsize=8)
def configured_rates(spec: str) -> RateTable:
    """The built-in table with the ``MODEL_RATES`` overrides; a bad entry is a
    :class:`~runtime.errors.SettingsError` naming the setting. Parsed once per spec (every
    priced client of a command asks for it; the table is read-only)."""
    try:
        return with_overrides(DEFAULT_RATES, spec)
    except ValueError as exc:
        raise SettingsError("MODEL_RATES", str(exc)) from None
