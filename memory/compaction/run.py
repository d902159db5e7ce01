"""Compaction: the oldest uncompacted messages of a chat become patterns and an episode.

:func:`compact_chat` (seed 000, "Concurrency safety", "Extraction reliability"):

1. ``pg_try_advisory_lock(compaction_lock_key(chat_id))`` on one held connection (a session
   lock: it spans the LLM call, and it is released in ``finally`` even when cancelled). Another
   holder, in this process or another -> ``skipped`` at once (a ``compaction_runs`` row says so).
2. Inside the lock the compaction rule (:class:`memory.conversation.window.CompactionRule`:
   rows beyond the next window, tokens over the budget, or idle with rows beyond
   ``keep_recent``) is re-checked on the caller's ``estimate`` of the chat's window: a
   compaction that finished meanwhile may have made this one unnecessary -> ``not_needed``. So
   is a chat with nothing beyond its ``keep_recent`` newest rows.
3. :func:`select_chunk` picks the rows; the chat's top patterns (by strength x confidence) and
   their linked entry uuids are loaded; :func:`memory.extraction.extractor.extract` is called.
   ``None``
   (invalid JSON twice) or an LLM error -> a ``failed`` run row, every message left as it was.
4. The texts to store are embedded in one call *before* the transaction (an embedding failure
   stores them without vectors: the backfill job adds them later, and dedup uses the canonical
   hash only), and each new/replacement/meta pattern gets its
   :func:`memory.patterns.dedup.find_duplicate` decision (the adjudication LLM call happens here,
   never inside a transaction).
5. ONE transaction (:func:`memory.compaction.transaction.apply_extraction`): patterns, observations,
   reinforcements, contradictions, supersedes, meta patterns, entry links, the episode row,
   ``compacted_at = now()`` on exactly the chunk's rows, and the ``ok`` run row with its counts.

A ``running`` row that a dead process left behind (crash, kill) is closed as ``failed``
(:data:`INTERRUPTED`) by the next compaction of its chat, which holds the lock.

:func:`store_explicit_pattern` is the ``remember`` tool's write: same dedup, source
``explicit``, signal explicit.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import attrs
import trio

from memory.compaction.transaction import apply_extraction, chunk_message, plan_patterns
from memory.conversation.messages import ChatMessage, from_record
from memory.conversation.window import CompactionRule, WindowState
from memory.embeddings.providers import Embedder
from memory.embeddings.thresholds import Thresholds, thresholds_for
from memory.extraction.claims import KnownPattern
from memory.extraction.extractor import extract
from memory.extraction.guardrails import Rejection
from memory.llm.protocol import LLM
from memory.patterns.canonical import lock_key
from memory.patterns.dedup import Adjudicator, LLMAdjudicator
from memory.patterns.writes import ensure_indexes
from runtime import metrics
from runtime.db import Connection, Database
from runtime.logs import get_logger

log = get_logger(__name__)

KNOWN_PATTERNS = 50  # the "current top patterns" shown to the extractor
#: the chat's window as the compaction rule sees it (rows, tokens, idle time)
Estimate = Callable[[int], Awaitable[WindowState]]


# --- the chunk (pure) ---------------------------------------------------------------------------


def _pairs(rows: Sequence[ChatMessage]) -> list[tuple[int, int]]:
    """(assistant index, tool_result index) of every answered tool call."""
    calls: dict[str, int] = {}
    pairs = []
    for i, row in enumerate(rows):
        if row.role == "assistant":
            for call in row.tool_calls:
                calls.setdefault(call.id, i)
        elif row.role == "tool_result" and row.tool_call_id in calls:
            pairs.append((calls[row.tool_call_id], i))
    return pairs


def select_chunk(
    rows: Sequence[ChatMessage], keep_recent: int, max_messages: int
) -> list[ChatMessage]:
    """The rows to compact from ``rows`` (a chat's uncompacted rows, oldest first).

    At most ``max_messages`` of the oldest, never any of the ``keep_recent`` newest, and never
    a cut between an assistant ``tool_use`` row and a ``tool_result`` row answering it: the
    cut moves back to the nearest safe place; when there is none (one tool exchange longer
    than the chunk), it moves forward to the end of that exchange instead. Empty when there
    is nothing to compact.
    """
    limit = min(max_messages, len(rows) - keep_recent)
    if limit <= 0:
        return []
    pairs = _pairs(rows)

    def safe(cut: int) -> bool:
        return not any(a < cut <= r for a, r in pairs)

    for cut in range(limit, 0, -1):
        if safe(cut):
            return list(rows[:cut])
    for cut in range(limit + 1, len(rows) + 1):
        if safe(cut):
            return list(rows[:cut])
    return []  # pragma: no cover - len(rows) is always a safe cut


# --- the run ------------------------------------------------------------------------------------


@attrs.frozen
class CompactionOptions:
    """Knobs of :func:`compact_chat` (from the settings in production)."""

    timezone: str = "UTC"
    keep_recent: int = 20
    max_messages: int = 40
    rule: CompactionRule | None = None  # re-checked inside the lock when ``estimate`` is given
    thresholds: Thresholds | None = None  # default: the embedder model's calibrated ones
    known_patterns: int = KNOWN_PATTERNS


@attrs.frozen
class CompactionOutcome:
    """What one :func:`compact_chat` call did; ``status``: ok | failed | skipped | not_needed."""

    status: str
    chat_id: int
    run_id: int | None = None
    messages_compacted: int = 0
    patterns_created: int = 0
    patterns_reinforced: int = 0
    patterns_contradicted: int = 0
    patterns_superseded: int = 0
    meta_patterns: int = 0
    episode_id: int | None = None
    compacted_ids: tuple[int, ...] = ()
    rejections: tuple[Rejection, ...] = ()
    error: str | None = None
    reason: str | None = None  # the rule's reason (rows, tokens, idle) when it was checked


def compaction_lock_key(chat_id: int) -> int:
    """The chat's advisory lock key: a signed 64-bit hash of ``engram:compaction:<chat_id>``."""
    return lock_key("compaction", chat_id)


_UNCOMPACTED = """
SELECT id, role, content, tool_calls, tool_call_id, tool_name, external_message_id, created_at,
       count(*) OVER () AS total
FROM chat_messages WHERE chat_id = $1 AND compacted_at IS NULL ORDER BY created_at, id
"""
#: rows read beyond a chunk: room to extend a cut to the end of a tool exchange (a turn makes
#: at most 15 tool calls, so at most 31 rows)
EXTENSION_ROWS = 64


async def oldest_uncompacted(
    conn: Connection, chat_id: int, keep_recent: int, max_messages: int
) -> list[ChatMessage]:
    """:func:`select_chunk` over the chat's uncompacted rows, reading only the oldest
    ``max_messages + keep_recent + EXTENSION_ROWS`` of them (a backlog is not loaded whole)."""
    limit = max_messages + keep_recent + EXTENSION_ROWS
    records = await conn.fetch(_UNCOMPACTED + " LIMIT $2", chat_id, limit)
    if not records:
        return []
    unread = int(records[0]["total"]) - len(records)  # newer rows beyond the ones read
    rows = [from_record(r) for r in records]
    return select_chunk(rows, max(0, keep_recent - unread), max_messages)


_KNOWN = """
SELECT id, content, kind, strength, confidence, occurs_on, occurs_at FROM patterns
WHERE chat_id = $1 AND status IN ('active', 'disputed')
ORDER BY strength * confidence DESC, last_seen DESC, id DESC LIMIT $2
"""


INTERRUPTED = "interrupted: the process stopped during the compaction"

# A 'running' row of the chat while we hold its lock is an orphan: its process died mid-way
# (a crash, a kill; the session lock went with its connection) and nothing will finish it.
_START_RUN = f"""
WITH orphans AS (
    UPDATE compaction_runs SET status = 'failed', finished_at = now(), error = '{INTERRUPTED}'
    WHERE chat_id = $1 AND status = 'running'
)
INSERT INTO compaction_runs (chat_id, status) VALUES ($1, 'running') RETURNING id
"""


async def _record_run(conn: Connection, chat_id: int, status: str, error: str | None) -> int:
    if status == "running":  # only under the chat's lock
        return int(await conn.fetchval(_START_RUN, chat_id))
    return int(
        await conn.fetchval(
            "INSERT INTO compaction_runs (chat_id, status, error, finished_at) "
            "VALUES ($1, $2, $3, now()) RETURNING id",
            chat_id,
            status,
            error,
        )
    )


async def _fail_run(conn: Connection, chat_id: int, run_id: int, error: str) -> None:
    with trio.move_on_after(10, shield=True):
        await conn.execute(
            "UPDATE compaction_runs SET status = 'failed', finished_at = now(), error = $2 "
            "WHERE chat_id = $3 AND id = $1",
            run_id,
            error[:2000],
            chat_id,
        )


async def compact_chat(
    db: Database,
    llm: LLM,
    embedder: Embedder,
    chat_id: int,
    *,
    options: CompactionOptions | None = None,
    estimate: Estimate | None = None,
    adjudicator: Adjudicator | None = None,
) -> CompactionOutcome:
    """Compact the oldest chunk of ``chat_id`` (see the module docstring); counted in
    ``engram_compactions`` by outcome (``error``: it raised)."""
    try:
        outcome = await _compact_chat(
            db, llm, embedder, chat_id, options=options, estimate=estimate, adjudicator=adjudicator
        )
    except Exception:
        metrics.compaction_finished("error")
        raise
    metrics.compaction_finished(
        outcome.status,
        created=outcome.patterns_created,
        reinforced=outcome.patterns_reinforced,
        contradicted=outcome.patterns_contradicted,
    )
    return outcome


async def _compact_chat(
    db: Database,
    llm: LLM,
    embedder: Embedder,
    chat_id: int,
    *,
    options: CompactionOptions | None,
    estimate: Estimate | None,
    adjudicator: Adjudicator | None,
) -> CompactionOutcome:
    opts = options or CompactionOptions()
    key = compaction_lock_key(chat_id)
    async with db.connection() as conn:
        if not await conn.fetchval("SELECT pg_try_advisory_lock($1)", key):
            run_id = await _record_run(
                conn, chat_id, "skipped", "another compaction holds the lock"
            )
            log.info("compaction.skipped", chat_id=chat_id, reason="locked")
            return CompactionOutcome("skipped", chat_id, run_id)
        try:
            return await _locked(conn, llm, embedder, chat_id, opts, estimate, adjudicator)
        finally:
            with trio.move_on_after(10, shield=True):
                await conn.execute("SELECT pg_advisory_unlock($1)", key)


async def _locked(
    conn: Connection,
    llm: LLM,
    embedder: Embedder,
    chat_id: int,
    opts: CompactionOptions,
    estimate: Estimate | None,
    adjudicator: Adjudicator | None,
) -> CompactionOutcome:
    reason = None
    if estimate is not None and opts.rule is not None:
        state = await estimate(chat_id)
        reason = opts.rule.reason(state)
        if reason is None:
            log.info(
                "compaction.not_needed",
                chat_id=chat_id,
                rows=state.rows,
                tokens=state.tokens,
                budget=opts.rule.token_budget,
            )
            return CompactionOutcome("not_needed", chat_id)
    chunk = await oldest_uncompacted(conn, chat_id, opts.keep_recent, opts.max_messages)
    if not chunk:
        log.info("compaction.nothing_to_compact", chat_id=chat_id)
        return CompactionOutcome("not_needed", chat_id)
    run_id = await _record_run(conn, chat_id, "running", None)
    started = trio.current_time()
    try:
        known = [
            KnownPattern(
                r["id"],
                r["content"],
                r["kind"],
                r["strength"],
                r["confidence"],
                r["occurs_on"],
                r["occurs_at"],
            )
            for r in await conn.fetch(_KNOWN, chat_id, opts.known_patterns)
        ]
        uuids = await conn.fetch(
            "SELECT DISTINCT entry_uuid FROM pattern_entries "
            "WHERE chat_id = $2 AND pattern_id = ANY($1)",
            [p.id for p in known],
            chat_id,
        )
        messages = [chunk_message(r) for r in chunk]
        result = await extract(
            llm,
            messages,
            known,
            {r["entry_uuid"] for r in uuids},
            chat_id=chat_id,
            timezone=opts.timezone,
        )
        if result is None:
            await _fail_run(conn, chat_id, run_id, "extraction: invalid JSON twice")
            return CompactionOutcome("failed", chat_id, run_id, error="invalid JSON twice")
        extraction, rejections = result
        thresholds = opts.thresholds or thresholds_for(embedder.model)
        plan = await plan_patterns(
            conn,
            embedder,
            extraction,
            messages,
            chat_id=chat_id,
            thresholds=thresholds,
            adjudicator=adjudicator or LLMAdjudicator(llm),
            known=known,
        )
        await ensure_indexes(conn, plan.vectors)
        async with conn.transaction():
            counts = await apply_extraction(conn, plan, chunk, chat_id=chat_id, run_id=run_id)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        log.error("compaction.failed", chat_id=chat_id, run_id=run_id, error=error)
        await _fail_run(conn, chat_id, run_id, error)
        return CompactionOutcome("failed", chat_id, run_id, error=error)
    except BaseException:
        await _fail_run(conn, chat_id, run_id, "cancelled")
        raise
    log.info(
        "compaction.ok",
        chat_id=chat_id,
        run_id=run_id,
        messages=len(chunk),
        reason=reason,
        seconds=round(trio.current_time() - started, 3),
        rejected=len(rejections),
        **attrs.asdict(counts),
    )
    return CompactionOutcome(
        "ok",
        chat_id,
        run_id,
        messages_compacted=len(chunk),
        patterns_created=counts.created,
        patterns_reinforced=counts.reinforced,
        patterns_contradicted=counts.contradicted,
        patterns_superseded=counts.superseded,
        meta_patterns=counts.meta,
        episode_id=counts.episode_id,
        compacted_ids=tuple(r.id for r in chunk if r.id is not None),
        rejections=tuple(rejections),
        reason=reason,
    )


__all__ = [
    "CompactionOptions",
    "CompactionOutcome",
    "compact_chat",
    "compaction_lock_key",
    "select_chunk",
]
