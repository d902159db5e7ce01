"""The time-aware side of patterns (seed 000, "Time-aware retrieval boost"): the vocabulary of a
pattern's ``temporal`` hints and the moment a turn happens in, as those hints name it.

A pattern's ``temporal`` JSONB is the extractor's free-form object of simple values
(:mod:`memory.extraction.claims`); four of its keys are recognised, each with fixed values::

    time_of_day  morning (05-12) | afternoon (12-17) | evening (17-23) | night (23-05)
    day_of_week  monday .. sunday | weekday | weekend
    season       spring | summer | autumn (or fall) | winter   (meteorological, by hemisphere)
    month        january .. december

:func:`moment` is the present in a time zone as the accepted values per key (``{"day_of_week":
("tuesday", "weekday"), ...}``). A pattern's hints *match* the moment when it has at least one
recognised key and every recognised key's value (case and spaces ignored) is accepted
(:func:`matches`); other keys are ignored. The retrieval weight multiplies a match by
:data:`memory.retrieval.ranking.TEMPORAL_BOOST`. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import date, datetime, time
from types import MappingProxyType
from typing import Any
from zoneinfo import ZoneInfo

from runtime.clock import clock_text

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
#: (first hour, name): a part of the day runs from its hour to the next part's
DAY_PARTS = ((0, "night"), (5, "morning"), (12, "afternoon"), (17, "evening"), (23, "night"))
#: month -> season in the northern hemisphere (meteorological: December to February is winter)
NORTH_SEASONS = ("winter",) * 2 + ("spring",) * 3 + ("summer",) * 3 + ("autumn",) * 3 + ("winter",)
SEASON_ALIASES: Mapping[str, tuple[str, ...]] = MappingProxyType({"autumn": ("autumn", "fall")})
OPPOSITE_SEASON: Mapping[str, str] = MappingProxyType(
    {"winter": "summer", "summer": "winter", "spring": "autumn", "autumn": "spring"}
)
#: time zones south of the equator (their seasons are the opposite ones)
SOUTHERN_PREFIXES = ("Australia/", "Antarctica/", "America/Argentina/")
SOUTHERN_ZONES = frozenset(
    {
        "Pacific/Auckland",
        "Pacific/Chatham",
        "Pacific/Fiji",
        "Pacific/Tongatapu",
        "Pacific/Apia",
        "Pacific/Noumea",
        "Pacific/Port_Moresby",
        "America/Santiago",
        "America/Sao_Paulo",
        "America/Montevideo",
        "America/Asuncion",
        "America/La_Paz",
        "America/Lima",
        "America/Punta_Arenas",
        "Africa/Johannesburg",
        "Africa/Maputo",
        "Africa/Harare",
        "Africa/Lusaka",
        "Africa/Windhoek",
        "Africa/Gaborone",
        "Africa/Maseru",
        "Africa/Mbabane",
        "Africa/Luanda",
        "Africa/Lubumbashi",
        "Africa/Dar_es_Salaam",
        "Africa/Blantyre",
        "Atlantic/Stanley",
        "NZ",
        "Chile/Continental",
        "Brazil/East",
        "America/Buenos_Aires",
        "Indian/Mauritius",
        "Indian/Reunion",
        "Indian/Antananarivo",
        "Indian/Mayotte",
    }
)
TEMPORAL_KEYS = ("time_of_day", "day_of_week", "season", "month")

Moment = Mapping[str, tuple[str, ...]]


def southern(timezone: str) -> bool:
    """Whether ``timezone`` lies south of the equator (so its seasons are reversed)."""
    return timezone in SOUTHERN_ZONES or timezone.startswith(SOUTHERN_PREFIXES)


def part_of_day(hour: int) -> str:
    """``night`` / ``morning`` / ``afternoon`` / ``evening`` for a local hour (0-23)."""
    return [name for first, name in DAY_PARTS if first <= hour][-1]


def season(month: int, timezone: str) -> str:
    """The meteorological season of ``month`` (1-12) where ``timezone`` is."""
    name = NORTH_SEASONS[month - 1]
    return OPPOSITE_SEASON[name] if southern(timezone) else name


def moment(now: datetime, timezone: str) -> Moment:
    """The accepted hint values per recognised key at ``now`` in ``timezone``."""
    here = now.astimezone(ZoneInfo(timezone))
    day = WEEKDAYS[here.weekday()]
    name = season(here.month, timezone)
    return MappingProxyType(
        {
            "time_of_day": (part_of_day(here.hour),),
            "day_of_week": (day, "weekend" if here.weekday() >= 5 else "weekday"),
            "season": SEASON_ALIASES.get(name, (name,)),
            "month": (MONTHS[here.month - 1],),
        }
    )


def matches(temporal: Mapping[str, Any] | None, at: Moment) -> bool:
    """Whether a pattern's ``temporal`` hints match the moment ``at`` (module docstring)."""
    hints = {k: v for k, v in (temporal or {}).items() if k in TEMPORAL_KEYS and v is not None}
    if not hints:
        return False
    return all(_text(v).strip(" ").lower() in at[k] for k, v in hints.items())


def _text(value: Any) -> str:
    """A hint value as PostgreSQL's ``jsonb_each_text`` spells it."""
    return value if isinstance(value, str) else json.dumps(value)


def moment_json(at: Moment) -> str:
    """``at`` as the JSON object the SQL weight reads (``{"season": ["autumn", "fall"], ...}``)."""
    return json.dumps({k: list(v) for k, v in at.items()})


def event_day(occurs_on: date, occurs_at: time | None = None) -> str:
    """An event's day as the prompt shows it: ``Fri 7 Mar 2025`` (``, 10:00`` with a time, in
    the process's TIME_FORMAT: :func:`runtime.clock.clock_text`)."""
    day = f"{occurs_on:%a} {occurs_on.day} {occurs_on:%b %Y}"
    return day if occurs_at is None else f"{day}, {clock_text(occurs_at)}"
