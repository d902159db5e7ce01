"""The parsers a setting's raw string goes through, shared by every settings section: each takes
the raw string and returns the value or raises ValueError (the loader names the variable); and
:class:`Secret`, the wrapper that keeps a secret out of every repr, log line and error message.
Pure. The sections and the loader are :mod:`runtime.settings`.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from typing import TypeVar
from urllib.parse import urlsplit

import attrs

_Number = TypeVar("_Number", int, float)


@attrs.frozen(repr=False)
class Secret:
    """A secret string; shows as ``Secret('***')`` everywhere except ``.reveal()``."""

    _value: str

    def reveal(self) -> str:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        return "Secret('***')" if self._value else "Secret('')"

    __str__ = __repr__


def text(raw: str) -> str:
    return raw.strip()


def secret(raw: str) -> Secret:
    return Secret(raw.strip())


def _number_range(
    convert: Callable[[str], _Number], noun: str, spec: str, lo: _Number, hi: _Number
) -> Callable[[str], _Number]:
    """A parser of ``convert``-able values within [lo, hi]; ``spec`` formats them in errors."""

    def parse(raw: str) -> _Number:
        try:
            value = convert(raw.strip())
        except ValueError:
            raise ValueError(f"expected {noun}, got {raw.strip()!r}") from None
        if not lo <= value <= hi:
            raise ValueError(f"must be between {lo:{spec}} and {hi:{spec}}, got {value:{spec}}")
        return value

    return parse


def int_range(lo: int, hi: int) -> Callable[[str], int]:
    return _number_range(int, "an integer", "", lo, hi)


def float_range(lo: float, hi: float) -> Callable[[str], float]:
    return _number_range(float, "a number", "g", lo, hi)


def choice(*options: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in options:
            raise ValueError(f"must be one of {', '.join(options)}, got {raw.strip()!r}")
        return value

    return parse


def web_url_problem(value: str, schemes: tuple[str, ...] = ("http", "https")) -> str | None:
    """Why ``value`` is not a URL of ``schemes`` with a host and a valid port (None if it is)."""
    if re.search(r"\s", value):
        return "must not contain spaces"
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        return "has a bad host or port (the port must be a number from 0 to 65535)"
    if parts.scheme not in schemes or not parts.hostname:
        return f"must be an {'/'.join(schemes)}:// URL with a host"
    return None


def http_url(raw: str) -> str:
    """Empty, or an http(s) URL with a host and a valid port (a trailing / dropped)."""
    value = raw.strip().rstrip("/")
    if value and (problem := web_url_problem(value)) is not None:
        raise ValueError(problem)  # not quoted: a URL may carry a password
    return value


#: Telegram's ids fit in 52 bits (16 digits); negative for groups and channels
_CHAT_ID_RE = re.compile(r"-?[0-9]{1,16}")


def chat_ids(raw: str) -> frozenset[int]:
    ids: set[int] = set()
    for part in raw.split(","):
        part = part.strip()
        if not part:
            continue
        if not _CHAT_ID_RE.fullmatch(part):
            raise ValueError(
                f"expected comma-separated chat ids (ASCII digits, - for groups), got {part!r}"
            )
        ids.add(int(part))
    return frozenset(ids)


def optional_chat_id(raw: str) -> int | None:
    """One Telegram chat id (ASCII digits, ``-`` for groups), or empty for none."""
    value = raw.strip()
    if not value:
        return None
    if not _CHAT_ID_RE.fullmatch(value):
        raise ValueError(
            f"expected a chat id (ASCII digits, - for groups; or empty), got {value!r}"
        )
    return int(value)


_HOSTNAME_RE = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?")


def host(raw: str) -> str:
    """An IP address or a host name to bind to."""
    value = raw.strip()
    try:
        ipaddress.ip_address(value.strip("[]"))
    except ValueError:
        if len(value) > 253 or not _HOSTNAME_RE.fullmatch(value):
            raise ValueError(f"must be an IP address or a host name, got {value!r}") from None
    return value.strip("[]")


def visible(what: str) -> Callable[[str], str]:
    """A parser of one word of printable ASCII (a model name, an API key): no spaces or
    control characters, which an HTTP header or request body would carry broken."""

    def parse(raw: str) -> str:
        value = raw.strip()
        if len(value) > 256 or not re.fullmatch(r"[!-~]*", value):
            raise ValueError(f"must be {what}: up to 256 printable ASCII characters, no spaces")
        return value

    return parse


def secret_word(raw: str) -> Secret:
    """An API key: one word of printable ASCII (the error never quotes it)."""
    return Secret(visible("a key as its provider issued it")(raw))


def secret_token(raw: str) -> Secret:
    value = raw.strip()
    if value and not re.fullmatch(r"[A-Za-z0-9_-]{1,256}", value):
        raise ValueError("must be 1-256 characters of A-Z, a-z, 0-9, _ and -")
    return Secret(value)


def optional_unit(raw: str) -> float | None:
    """A similarity threshold in [0, 1], or empty for the embedding model's default."""
    value = raw.strip()
    if not value:
        return None
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"expected a number between 0 and 1 (or empty), got {value!r}") from None
    if not 0.0 <= number <= 1.0:
        raise ValueError(f"must be between 0 and 1, got {value!r}")
    return number


def cost_limit(raw: str) -> float | None:
    """An amount of US dollars (a cost limit or alert), or empty for none."""
    value = raw.strip()
    if not value:
        return None
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"expected an amount in US dollars (or empty), got {value!r}") from None
    if not 0.0 < number <= 1_000_000.0:
        raise ValueError(f"must be above 0 and at most 1000000 (or empty), got {value!r}")
    return number
