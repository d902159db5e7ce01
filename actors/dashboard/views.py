"""What each dashboard page shows, read from :mod:`memory` (the same functions as the chat's
commands and the model's tools) and shaped for its template."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
from markupsafe import Markup

from actors.dashboard.auth import Login
from actors.dashboard.context import DashboardDeps
from actors.dashboard.svg import Node, relation_graph, stacked_bars
from memory.conversation.episodes import Episode, SqlEpisodes
from memory.extraction.claims import KINDS
from memory.llm.usage import UsageSummary, usage_summary
from memory.llm.usage_stats import Latency, latency_by_purpose, series, usage_by_day
from memory.patterns.browse import Browse, browse_patterns
from memory.patterns.stats import ChatStats, chat_stats
from memory.patterns.views import STATUSES, Item, search_patterns
from memory.patterns.why import PatternDetail, explain
from memory.vault.settings import chat_folder
from runtime.clock import zone

MAX_QUERY = 500
#: the furthest page offset asked for (a larger one is clamped, not a database error)
MAX_OFFSET = 10_000_000
EPISODES_SHOWN = 100
MAX_DAYS = 365


@attrs.frozen
class MemoryView:
    query: str
    kind: str | None
    status: str | None
    kinds: tuple[str, ...]
    statuses: tuple[str, ...]
    items: tuple[Item, ...]
    counts: Mapping[str, int]
    degraded: bool
    offset: int
    more: bool
    done: str | None


def _choice(value: str | None, options: tuple[str, ...]) -> str | None:
    return value if value in options else None


async def memory_view(deps: DashboardDeps, chat_id: int, args: Mapping[str, str]) -> MemoryView:
    """The memory page: a search through the product's retrieval, or a filtered list."""
    query = " ".join(str(args.get("q", "")).split())[:MAX_QUERY]
    kind = _choice(args.get("kind"), KINDS)
    status = _choice(args.get("status"), STATUSES)
    try:
        offset = min(max(0, int(args.get("offset", "0"))), MAX_OFFSET)
    except ValueError:
        offset = 0
    s = deps.services
    done = _choice(args.get("done"), ("forgotten",))
    browse: Browse = await browse_patterns(s.db, chat_id, kind=kind, status=status, offset=offset)
    if query:
        items, degraded = await search_patterns(
            s.db,
            s.embedder,
            chat_id,
            query,
            now=deps.clock(),
            timezone=s.timezone,
            thresholds=s.thresholds,
            lexicons=s.lexicons,
            planner=s.planner,
            limit=20,
        )
        found = tuple(
            i
            for i in items
            if (kind is None or i.kind == kind) and (status is None or i.status == status)
        )
        return MemoryView(
            query, kind, status, KINDS, STATUSES, found, browse.counts, degraded, 0, False, done
        )
    return MemoryView(
        query,
        kind,
        status,
        KINDS,
        STATUSES,
        browse.items,
        browse.counts,
        False,
        browse.offset,
        browse.more,
        done,
    )


@attrs.frozen
class PatternView:
    p: PatternDetail
    graph: Markup | None


async def pattern_view(deps: DashboardDeps, chat_id: int, pattern_id: int) -> PatternView | None:
    """A pattern's page: evidence, relations (as a graph), entry links and audit history;
    None when it is not one of the chat's patterns."""
    detail = await explain(deps.db, chat_id, pattern_id)
    if detail is None:
        return None
    graph = None
    if detail.relations:
        others = [
            Node(
                r.other_id,
                r.other_content,
                r.relation,
                r.direction,
                f"/dashboard/chats/{chat_id}/patterns/{r.other_id}",
            )
            for r in detail.relations
        ]
        graph = Markup(relation_graph(Node(detail.id, detail.content), others))
    return PatternView(detail, graph)


@attrs.frozen
class ConversationView:
    episodes: tuple[Episode, ...]
    days: tuple[str, ...]  # the vault's daily pages, newest first
    day: str | None
    page: str | None  # the chosen day's page (markdown, shown as text)


def _daily_pages(folder: Path) -> tuple[str, ...]:
    daily = folder / "daily"
    if not daily.is_dir():
        return ()
    names = sorted((p.stem for p in daily.glob("*.md")), reverse=True)
    return tuple(n for n in names if _is_day(n))


def _is_day(text: str) -> bool:
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return len(text) == 10


async def conversation_view(
    deps: DashboardDeps, chat_id: int, day: str | None
) -> ConversationView | None:
    """The episode timeline and, when the vault exists, its daily pages (None: a day asked
    for that has no page)."""
    episodes = tuple(await SqlEpisodes(deps.db).recent(chat_id, EPISODES_SHOWN))
    days: tuple[str, ...] = ()
    page = None
    if deps.vault_root is not None:
        folder = chat_folder(deps.vault_root, chat_id)
        days = _daily_pages(folder)
        if day is not None:
            if day not in days:
                return None
            page = (folder / "daily" / f"{day}.md").read_text(encoding="utf-8")
    elif day is not None:
        return None
    return ConversationView(episodes, days, day, page)


@attrs.frozen
class UsageView:
    days: int
    summary: UsageSummary
    by_purpose: Markup
    by_model: Markup
    tokens: Markup
    latency: tuple[Latency, ...]


def _day_labels(since: datetime, until: datetime, tz: str) -> list[date]:
    first, last = since.astimezone(zone(tz)).date(), until.astimezone(zone(tz)).date()
    return [first + timedelta(days=i) for i in range((last - first).days + 1)]


def _plot(labels: list[str], values: dict[str, list[float]], title: str, unit: str) -> Markup:
    # the SVG escapes every label itself (actors.dashboard.svg)
    return Markup(stacked_bars(labels, values, title=title, unit=unit))


async def usage_view(deps: DashboardDeps, chat_id: int | None, days: int) -> UsageView:
    """Cost per day by purpose and by model, tokens with cache reads/writes, latency by
    purpose, over the last ``days`` days (of one chat, or all)."""
    days = min(max(days, 1), MAX_DAYS)
    until = deps.clock()
    since = until - timedelta(days=days)
    tz = deps.timezone
    summary = await usage_summary(deps.db, since=since, until=until, chat_id=chat_id, tz=tz)
    purposes = await usage_by_day(
        deps.db, since=since, until=until, key="purpose", chat_id=chat_id, tz=tz
    )
    models = await usage_by_day(
        deps.db, since=since, until=until, key="model", chat_id=chat_id, tz=tz
    )
    latency = await latency_by_purpose(deps.db, since=since, until=until, chat_id=chat_id)
    labels = _day_labels(since, until, tz)
    names = [d.isoformat() for d in labels]
    tokens: dict[str, list[float]] = {}
    for name, field in (
        ("input (uncached)", "input_tokens"),
        ("cache read", "cache_read_tokens"),
        ("cache write", "cache_write_tokens"),
        ("output", "output_tokens"),
    ):
        tokens[name] = [sum(v) for v in zip(*series(purposes, labels, field).values(), strict=True)]
        if not tokens[name]:
            tokens[name] = [0.0] * len(labels)
    reads, writes = tokens["cache read"], tokens["cache write"]
    tokens["input (uncached)"] = [
        max(0.0, t - r - w)
        for t, r, w in zip(tokens["input (uncached)"], reads, writes, strict=True)
    ]
    return UsageView(
        days,
        summary,
        Markup(
            stacked_bars(names, series(purposes, labels), title="USD per day by purpose", unit=" $")
        ),
        Markup(
            stacked_bars(names, series(models, labels), title="USD per day by model", unit=" $")
        ),
        Markup(stacked_bars(names, tokens, title="Tokens per day")),
        tuple(latency),
    )


@attrs.frozen
class HealthView:
    reports: Mapping[str, Any]
    inbox: Mapping[str, int]
    outbox: Mapping[str, int]
    compactions: Mapping[str, int]
    live_actors: int | None
    chats: tuple[tuple[int, ChatStats], ...]


_QUEUES = """
/* all chats: the dashboard's operator view when no chat is chosen */
SELECT 'inbox' AS q, status, count(*) AS n FROM inbox
WHERE status <> 'done' AND ($1::bigint IS NULL OR chat_id = $1) GROUP BY 1, 2
UNION ALL
SELECT 'outbox', status, count(*) FROM outbox
WHERE status NOT IN ('sent', 'failed') AND ($1::bigint IS NULL OR chat_id = $1) GROUP BY 1, 2
"""
_COMPACTIONS = """
/* all chats: the dashboard's operator view when no chat is chosen */
SELECT status, count(*) AS n FROM compaction_runs
WHERE started_at >= $1 AND ($2::bigint IS NULL OR chat_id = $2) GROUP BY 1
"""


async def health_view(deps: DashboardDeps, login: Login) -> HealthView:
    """The heartbeat's checks, the queues' backlogs, live actors, compactions in the last 7
    days and each visible chat's turns, degraded retrievals and reply latency."""
    scope = login.chat_id
    queues: dict[str, dict[str, int]] = {"inbox": {}, "outbox": {}}
    for r in await deps.db.fetch(_QUEUES, scope):
        queues[str(r["q"])][str(r["status"])] = int(r["n"])
    week = deps.clock() - timedelta(days=7)
    compactions = {
        str(r["status"]): int(r["n"]) for r in await deps.db.fetch(_COMPACTIONS, week, scope)
    }
    stats = []
    for chat in (await deps.visible_chats(login))[:50]:
        stats.append(
            (
                chat.chat_id,
                await chat_stats(deps.db, chat.chat_id, now=deps.clock(), timezone=deps.timezone),
            )
        )
    reports = {name: report() for name, report in deps.reports} if scope is None else {}
    live = deps.live_actors() if deps.live_actors is not None and scope is None else None
    return HealthView(reports, queues["inbox"], queues["outbox"], compactions, live, tuple(stats))
