"""Settings, read from environment variables and an optional ``.env`` file.

Each package declares the variables it reads in a *section*: an attrs class derived from
:class:`SettingsSection` with one attribute per variable and a ``fields`` tuple of :class:`Field`
(name, default, parser, meaning). The process's own section (database, HTTP server, logging,
actor kernel) is :class:`runtime.process_settings.ProcessSettings`; the Telegram, LLM and
memory sections live in their packages, and ``actors.settings`` combines them all into the one
``Settings`` class by multiple inheritance. The README's configuration table lists every name.

:func:`load_settings` builds any section class from its ``fields``. A missing or invalid value
raises :class:`~runtime.errors.SettingsError` naming the variable, and the CLI turns that into one
line on stderr and exit code 2. The value parsers the sections share, and :class:`Secret` (which
keeps a secret out of every repr, log line and error message), are :mod:`runtime.parsers`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Self, TypeVar

import attrs

from runtime.errors import SettingsError, settings_error


@attrs.frozen
class Field:
    """One environment variable: its name, default (raw string), parser and meaning.

    ``aliases`` are other names accepted for it (used when the variable itself is unset or
    empty). ``show`` is how ``engram config`` shows a value that is not secret as a whole but
    holds secrets (DATABASE_URL's password), and ``secrets_in`` gives those secret pieces, for
    the log scrubber (:meth:`SettingsSection.secrets`).
    """

    env: str
    attr: str
    default: str | Callable[[], str]
    parse: Callable[[str], Any]
    doc: str
    secret: bool = False
    aliases: tuple[str, ...] = ()
    show: Callable[[Any], str] | None = None
    secrets_in: Callable[[Any], Iterable[str]] | None = None


@attrs.frozen(kw_only=True, slots=False)
class SettingsSection:
    """The base of every settings section.

    A section declares its variables twice over: as attrs attributes and as ``fields`` (in the
    README table's order); ``tests/actors/test_settings.py`` checks the two agree. Sections combine
    by multiple inheritance (hence ``slots=False``); the combined class's ``fields`` is the
    concatenation of its bases' and :meth:`validate` runs every section's checks.
    """

    fields: ClassVar[tuple[Field, ...]] = ()

    def check(self) -> list[SettingsError]:
        """This section's own cross-field problems (a section overrides it; no super call)."""
        return []

    def validate(self) -> None:
        """Every section's :meth:`check`, raising one SettingsError naming every problem."""
        problems: list[SettingsError] = []
        for cls in type(self).__mro__:
            own = cls.__dict__.get("check")
            if own is not None:
                problems += own(self)
        error = settings_error(problems)
        if error is not None:
            raise error

    def secrets(self) -> list[str]:
        """Every non-empty secret value and secret piece of a value, for log scrubbing."""
        out = []
        for f in type(self).fields:
            value = getattr(self, f.attr)
            if f.secret and value:
                out.append(value.reveal())
            elif f.secrets_in is not None:
                out += f.secrets_in(value)
        return out

    def shown(self, f: Field) -> str:
        """The value of ``f`` as ``engram config`` prints it: secrets as set / not set, a value
        holding secrets through ``f.show``, chat ids comma-separated."""
        value = getattr(self, f.attr)
        if f.secret:
            return "(set)" if value else "(not set)"
        if f.show is not None:
            return f.show(value)
        if isinstance(value, frozenset):
            return ",".join(str(v) for v in sorted(value))
        return str(value)

    def replace(self, **changes: Any) -> Self:
        return attrs.evolve(self, **changes)


def read_dotenv(path: Path) -> dict[str, str]:
    """Parse a ``.env`` file: ``NAME=value`` lines, ``#`` comments, optional quotes."""
    values: dict[str, str] = {}
    if not path.is_file():
        return values
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :]
        name, sep, value = line.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name.strip()):
            raise SettingsError(str(path), f"line {lineno} is not NAME=value")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[name.strip()] = value
    return values


S = TypeVar("S", bound=SettingsSection)


def load_settings(
    cls: type[S],
    environ: Mapping[str, str] | None = None,
    *,
    dotenv: Path | None = Path(".env"),
) -> S:
    """Build the section class ``cls`` from ``environ`` (default ``os.environ``) over ``.env``.

    The process environment wins over the file. Every bad variable is reported, not just the
    first: one raises SettingsError naming it, several raise
    :class:`~runtime.errors.SettingsErrors` (in ``cls.fields`` order) carrying the settings
    loaded with defaults in their place (``partial``), so a command's own checks can add theirs.
    The cross-field checks (``validate``) run when every value parsed.
    """
    settings, problems = _load(cls, environ, dotenv)
    error = settings_error(problems, settings if problems else None)
    if error is not None:
        raise error
    return settings


def _load(
    cls: type[S], environ: Mapping[str, str] | None, dotenv: Path | None
) -> tuple[S, list[SettingsError]]:
    try:
        env: dict[str, str] = read_dotenv(dotenv) if dotenv is not None else {}
    except SettingsError as exc:
        env, problems = {}, [exc]
    else:
        problems = []
    env.update(os.environ if environ is None else environ)
    for f in cls.fields:
        for alias in f.aliases:
            if alias in env and not env.get(f.env):
                env[f.env] = env[alias]
    values: dict[str, Any] = {}
    for f in cls.fields:
        raw = env.get(f.env)
        default = f.default() if callable(f.default) else f.default
        if raw is None or (raw.strip() == "" and not f.secret):
            raw = default
        try:
            values[f.attr] = f.parse(raw)
        except ValueError as exc:
            # a secret's parser never quotes the value; should one slip in, it is cut out
            problem = str(exc)
            if f.secret and raw.strip():
                problem = problem.replace(raw.strip(), "***")
            problems.append(SettingsError(f.env, problem))
            values[f.attr] = f.parse(default)
    settings = cls(**values)
    if not problems:
        try:
            settings.validate()
        except SettingsError as exc:
            problems.append(exc)
    return settings, problems
