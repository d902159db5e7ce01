"""Non-model time of one turn: webhook in -> sendMessage out, with 1,000 and 100,000 entries.

For each journal size a fresh database gets the schema, the journal by COPY (``entries``
and ``entry_embeddings``, 256-d vectors of the fake embedder; indexes built after the load)
and chat histories; then the real process composition runs in this process
(``runtime.serve.serve`` + ``actors.system.BotSystem``: hypercorn, webhook, inbox writer,
router, chat actors, sender) with ``actors.agent.handler.sql_agent`` as the turn handler, the model
and the embedder replaced by fakes that answer at once:

* the fake LLM (a ``memory.llm.protocol.LLM``) first asks for ``search_entries`` with a query taken
  from the question, then answers from the tool result. It does what ``AnthropicLLM`` does
  around the network: encodes the request (messages, system prompt, tool definitions) as the
  Messages API JSON, decodes a JSON answer and writes the ``api_usage`` row through
  ``memory.llm.provider_calls.call_and_record``;
* the fake embedder returns a normalised sum of hashed word vectors, so the vector arm of the
  hybrid search runs against the stored vectors.

So a measured turn is: POST on a keep-alive connection to ``/api/telegram`` (real HTTP on
127.0.0.1) -> webhook checks and JSON -> inbox insert -> router -> chat actor (open rows and
claim, typing indicator) -> agent (user row and recent window, context, model call, hybrid
search over the journal, model call) -> the commit (assistant/tool rows, the outbox row, claimed
for its first send, inbox done: one statement) -> sender (pacing, ``sendMessage`` over httpx)
-> the clock stops when the stub Bot API has read the ``sendMessage`` request for that chat.

Telegram's side, the webhook sender and the stub Bot API, runs in a process of its own
(``bench/_turn_outside.py``), as the real one runs on other machines: it takes the start time,
POSTs, and takes the end time when its stub reads the reply; both processes read the same
monotonic clock. (Until 2026-11-24 it ran in the engram process, whose one Python thread then
also did its work, and read the ``sendMessage`` request only when that thread got to it.)

The journal is loaded by COPY after the migrations, so the ``entries`` trigger of migration
003 turns its unknown time zones (``Invalid/Zone``, about one entry in nine) into NULL, as an
import would; before that migration they stayed and every read checked them.

Turns are sequential, over ``--chats`` chats in rotation (each seeded with ``--history``
rows of conversation, with search tool calls and results), at least ``--spacing`` seconds
apart: the sender paces one message per chat per second and 30 per second overall
(``actors.sender.actor.SenderSettings``), and this keeps every turn clear of both, so pacing waits
are not in the figures. The first ``--warmup`` turns (at least one per chat: the chat actor is
created on a chat's first update) are not measured.

A last table compares the slowest tenth of the turns with the faster half, part by part:
what the tail is made of.

Where the time goes comes from wrappers around what the bench hands to the system: the
``Database`` (every query, transaction begin/commit, by statement), the turn handler, the
conversation store, the tool registry (and each tool handler), the LLM and embedder fakes and
the Bot API client. "context build" is the agent's CPU from the stored window rows to the
first model request (rows -> messages, patterns, tool definitions, system prompt with the
rendered window); "serialization" is the model request/answer JSON and the tool input
validation + result JSON; the rest (HTTP in and out, webhook parsing, router and actor hops,
trio <-> asyncio crossings outside the database wrapper, logging) is what remains.

    python bench/turn.py [--url postgresql://...] [--sizes 1000,100000] [--turns 200] [--smoke]

``--url`` must allow CREATE DATABASE: each size runs in its own new database, dropped after.
Without it a throwaway embedded PostgreSQL (pgserver) is used. Last line:
``turn p50_ms=<a> p95_ms=<b> entries=<n>`` for the largest size.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO, cast
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import attrs
import numpy as np
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _db import build_indexes, checkpoint, drop_secondary_indexes
from _smoke import add_smoke_flag, shrink
from _turn_data import (
    HISTORY_COLUMNS,
    THEMES,
    VOCAB,
    HashEmbedder,
    Journal,
    chat_history,
    user_message,
)
from _turn_outside import HOST, SECRET, TURN_TIMEOUT, Outside

from actors.agent.handler import sql_agent
from actors.agent.turn import TurnHandler, TurnInput, TurnReply
from actors.sender.policy import SenderSettings
from actors.settings import load_settings
from actors.system import BotSystem
from actors.telegram.client import BotApiClient
from memory.conversation.messages import ChatMessage, ConversationStore
from memory.embeddings.store import EmbeddingBackfill
from memory.embeddings.thresholds import thresholds_for
from memory.journal.tools import JOURNAL_TOOLS
from memory.llm.anthropic_provider import (
    DEFAULT_MODEL,
    message_params,
    system_param,
    tool_params,
)
from memory.llm.cost import DEFAULT_RATES
from memory.llm.protocol import (
    Completion,
    Message,
    OnEvent,
    System,
    TextBlock,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
)
from memory.llm.provider_calls import CallContext, call_and_record
from memory.llm.usage_writer import UsageWriter
from memory.patterns.canonical import canonical_hash
from memory.retrieval.retriever import SqlPatternRetriever
from memory.tools.memory_tools import memory_tools
from memory.tools.registry import Tool, ToolContext, ToolOutcome, ToolRegistry
from runtime import db as dbmod
from runtime.embedded_pg import DEFAULT_SHARED_BUFFERS, tune
from runtime.logs import configure_logging
from runtime.migrate import apply_migrations
from runtime.serve import serve
from runtime.shutdown import Shutdown

TOKEN = "123456789:BENCH_fake-token_for-local-stub_only"
CHAT_BASE = 910_000_000
GOAL_P95_MS = 30.0
OUTSIDE = Path(__file__).resolve().parent / "_turn_outside.py"
now = time.perf_counter


class BenchError(Exception):
    pass


# --- what one turn did ---------------------------------------------------------------------------


@attrs.define(eq=False)
class TurnRecord:
    """Timestamps (perf_counter seconds) and the calls seen while one turn was in flight."""

    chat_id: int
    t0: float = 0.0  # POST written
    t_ack: float = 0.0  # 200 read
    t_start: float = 0.0  # run_turn entered
    t_end: float = 0.0  # run_turn returned
    t_sent: float = 0.0  # the stub (another process) read sendMessage for the chat
    reply: str = ""
    results: int = -1
    db: list[tuple[float, float, str]] = attrs.field(factory=list)  # start, seconds, site
    spans: list[tuple[str, float, float]] = attrs.field(factory=list)  # name, start, end
    bot: list[tuple[str, float, float]] = attrs.field(factory=list)  # method, start, seconds
    #: the chat's previous reply was sent less than the sender's per-chat interval before
    paced: bool = False

    @property
    def total(self) -> float:
        return self.t_sent - self.t0

    def spans_named(self, name: str) -> list[tuple[float, float]]:
        return [(a, b) for n, a, b in self.spans if n == name]

    def span_s(self, name: str) -> float:
        return sum(b - a for a, b in self.spans_named(name))

    def db_within(self, windows: Sequence[tuple[float, float]]) -> float:
        """Seconds during which at least one query was running, inside ``windows`` (calls of
        background tasks overlapping the turn's own are not counted twice)."""
        pieces = sorted(
            (max(t, a), min(t + s, b))
            for t, s, _ in self.db
            for a, b in windows
            if t < b and t + s > a
        )
        covered, reach = 0.0, -math.inf
        for a, b in pieces:
            if b > reach:
                covered += b - max(a, reach)
                reach = b
        return covered


@attrs.define
class Recorder:
    """Routes observations to the turn in flight (turns are sequential)."""

    current: TurnRecord | None = None

    def db(self, site: str, start: float, seconds: float) -> None:
        if self.current is not None and start >= self.current.t0:
            self.current.db.append((start, seconds, site))

    def span(self, name: str, start: float, end: float) -> None:
        if self.current is not None and start >= self.current.t0:
            self.current.spans.append((name, start, end))

    def bot(self, method: str, start: float, seconds: float) -> None:
        if self.current is not None and start >= self.current.t0:
            self.current.bot.append((method, start, seconds))


# --- SQL statement -> a short site name ----------------------------------------------------------

_SITES: tuple[tuple[str, str], ...] = (
    (r"AS text_ids", "search: both arms (full-text pool + kNN), one statement"),
    (r"SELECT count\(\*\) AS n FROM \(SELECT 1 FROM le", "search: filter size (filtered only)"),
    (r"<=>", "search: vector arm (kNN over entry_embeddings)"),
    (r"ts_rank_cd", "search: text arm (full-text, ranked)"),
    (r"ts_headline", "search: result rows + headlines"),
    (r"INSERT INTO inbox", "webhook: inbox insert"),
    (r"UPDATE inbox SET status = 'processing'[\s\S]*AS claimed", "chat: open rows + claim"),
    (r"reply AS \(\s*INSERT INTO outbox", "commit: transcript + outbox row + inbox done"),
    (r"UPDATE outbox SET status = 'sending'[\s\S]*AS claimed", "sender: next + mark sending"),
    (r"WITH ins AS", "agent: user row + recent window"),
    (r"SET status = 'processing'", "chat: claim inbox rows"),
    (r"SELECT chat_id FROM inbox", "router: recovery sweep (every 30 s)"),
    (r"FROM inbox", "chat: open inbox rows"),
    (r"UPDATE inbox SET status = 'done'", "commit: inbox rows done"),
    (r"INSERT INTO chat_messages[^;]*'user'", "agent: user row"),
    (r"INSERT INTO chat_messages", "commit: assistant/tool rows"),
    (r"FROM chat_messages", "agent: recent window"),
    (r"INSERT INTO api_usage", "llm: api_usage row"),
    (r"INSERT INTO outbox", "commit: outbox row"),
    (r"SET status = 'sending'", "sender: mark sending"),
    (r"SET chunks_sent", "sender: record chunk"),
    (r"SET status = 'sent'", "sender: mark sent"),
    (r"SELECT chat_id FROM outbox", "sender: sweep (every 30 s)"),
    (r"FROM outbox", "sender: next pending"),
)
_site_cache: dict[str, str] = {}


def site_of(query: str) -> str:
    site = _site_cache.get(query)
    if site is None:
        for pattern, name in _SITES:
            if re.search(pattern, query):
                site = name
                break
        else:
            site = " ".join(query.split())[:60]
        _site_cache[query] = site
    return site


# --- wrappers around what the system is given ----------------------------------------------------


class TimedQueries:
    """Times every query of a ``runtime.db`` Database/Connection; the rest is delegated."""

    def __init__(self, inner: Any, rec: Recorder) -> None:
        self._inner = inner
        self._rec = rec

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def _timed(self, fn: Callable[..., Awaitable[Any]], query: str, *args: Any) -> Any:
        start = now()
        try:
            return await fn(query, *args)
        finally:
            self._rec.db(site_of(query), start, now() - start)

    async def execute(self, query: str, *args: Any) -> str:
        return cast(str, await self._timed(self._inner.execute, query, *args))

    async def executemany(self, query: str, args: Sequence[Sequence[Any]]) -> None:
        await self._timed(self._inner.executemany, query, args)

    async def fetch(self, query: str, *args: Any) -> list[Any]:
        return cast(list[Any], await self._timed(self._inner.fetch, query, *args))

    async def fetchrow(self, query: str, *args: Any) -> Any:
        return await self._timed(self._inner.fetchrow, query, *args)

    async def fetchval(self, query: str, *args: Any) -> Any:
        return await self._timed(self._inner.fetchval, query, *args)


class TimedConnection(TimedQueries):
    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[TimedConnection]:
        start = now()
        async with self._inner.transaction():
            self._rec.db("tx: BEGIN", start, now() - start)
            yield self
            start = now()
        self._rec.db("tx: COMMIT", start, now() - start)


class TimedDatabase(dbmod.Database):
    """The pool, every statement timed. A ``Database`` itself (on the same pool), not a
    wrapper: code that runs statements at once only on a pool (``search_entries``' two arms)
    must see a pool here, as it does in production. (Until 2026-11-24 it was a wrapper, and
    the bench ran those arms one after the other.)"""

    def __init__(self, inner: dbmod.Database, rec: Recorder) -> None:
        super().__init__(inner._pool, inner.url)
        self._rec = rec

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        start = now()
        try:
            return await super()._call(method, *args, **kwargs)
        finally:
            self._rec.db(site_of(str(args[0])), start, now() - start)

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[TimedConnection]:  # type: ignore[override]
        start = now()
        async with super().connection() as conn:
            self._rec.db("pool: acquire", start, now() - start)
            yield TimedConnection(conn, self._rec)
            start = now()
        self._rec.db("pool: reset + release", start, now() - start)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[TimedConnection]:  # type: ignore[override]
        start = now()
        async with dbmod.Database.connection(self) as conn, conn.transaction():
            self._rec.db("tx: acquire + BEGIN", start, now() - start)
            yield TimedConnection(conn, self._rec)
            start = now()
        self._rec.db("tx: COMMIT + release", start, now() - start)


@attrs.define
class TimedTurns:
    """The turn handler given to the chat actors: the agent, timed."""

    inner: TurnHandler
    rec: Recorder

    async def run_turn(self, turn: TurnInput) -> TurnReply:
        current = self.rec.current
        if current is not None:
            current.t_start = now()
        try:
            return await self.inner.run_turn(turn)
        finally:
            if current is not None:
                current.t_end = now()


@attrs.define
class TimedConversation:
    """The agent's conversation store, timed per call."""

    inner: ConversationStore
    rec: Recorder

    async def add_user(
        self, chat_id: int, text: str, external_id: str | None, created_at: datetime
    ) -> int:
        start = now()
        try:
            return await self.inner.add_user(chat_id, text, external_id, created_at)
        finally:
            self.rec.span("add_user", start, now())

    async def recent(self, chat_id: int, limit: int) -> list[ChatMessage]:
        start = now()
        try:
            return await self.inner.recent(chat_id, limit)
        finally:
            self.rec.span("recent", start, now())

    async def add_user_and_recent(
        self, chat_id: int, text: str, external_id: str | None, created_at: datetime, limit: int
    ) -> tuple[int, list[ChatMessage]]:
        start = now()
        try:
            return await self.inner.add_user_and_recent(
                chat_id, text, external_id, created_at, limit
            )
        finally:
            self.rec.span("recent", start, now())

    async def add_rows(self, conn: Any, chat_id: int, rows: Sequence[ChatMessage]) -> None:
        await self.inner.add_rows(conn, chat_id, rows)


class TimedRegistry(ToolRegistry):
    """The journal tools with every call and every handler timed."""

    def __init__(self, tools: Sequence[Tool[Any]], rec: Recorder) -> None:
        self._rec = rec
        super().__init__([attrs.evolve(t, handler=self._timed(t.handler)) for t in tools])

    def _timed(self, handler: Callable[[ToolContext, Any], Awaitable[object]]) -> Any:
        async def timed(ctx: ToolContext, inp: Any) -> object:
            start = now()
            try:
                result = await handler(ctx, inp)
            finally:
                self._rec.span("tool handler", start, now())
            if isinstance(result, Mapping) and self._rec.current is not None:
                self._rec.current.results = int(result.get("count", -1))
            return result

        return timed

    def specs(self) -> list[dict[str, Any]]:
        start = now()
        try:
            return super().specs()
        finally:
            self._rec.span("tool specs", start, now())

    async def call(self, name: str, raw_input: object, ctx: ToolContext) -> ToolOutcome:
        start = now()
        try:
            return await super().call(name, raw_input, ctx)
        finally:
            self._rec.span("tool", start, now())


class TimedEmbedder:
    """The fake embedder, timed (a ``memory.embeddings.providers.Embedder``)."""

    def __init__(self, inner: HashEmbedder, rec: Recorder) -> None:
        self.inner, self.rec = inner, rec
        self.model, self.dims = inner.model, inner.dims

    async def embed(
        self, texts: Sequence[str], *, purpose: str, chat_id: int | None = None
    ) -> list[np.ndarray]:
        start = now()
        try:
            return await self.inner.embed(texts, purpose=purpose, chat_id=chat_id)
        finally:
            self.rec.span("embed", start, now())


class TimedBotApi(BotApiClient):
    """The real Bot API client (httpx), each call timed by method."""

    def __init__(self, token: str, *, base_url: str, rec: Recorder) -> None:
        super().__init__(token, base_url=base_url)
        self._rec = rec

    async def call(
        self,
        method: str,
        params: Mapping[str, object] | None = None,
        *,
        read_timeout: float | None = None,
        files: Mapping[str, tuple[str, bytes, str]] | None = None,
    ) -> object:
        start = now()
        try:
            return await super().call(method, params, read_timeout=read_timeout, files=files)
        finally:
            self._rec.bot(method, start, now() - start)


# --- the fake model ------------------------------------------------------------------------------

_WORD = re.compile(r"[a-z']+")
_VOCAB = frozenset(VOCAB)


class ScriptedLLM:
    """:class:`memory.llm.protocol.LLM` answering at once: a ``search_entries`` call, then the
    answer.

    Around the (absent) network it does what the Anthropic provider does: the request as
    Messages API JSON, the answer decoded from JSON, the ``api_usage`` row written by
    ``call_and_record``.
    """

    def __init__(self, db: Any, rec: Recorder, model: str = DEFAULT_MODEL) -> None:
        self.db, self.rec, self.model = db, rec, model
        self.ctx = CallContext("anthropic", model, ())
        self.calls = 0

    async def complete(
        self,
        *,
        system: System,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        max_tokens: int,
        purpose: str,
        chat_id: int | None,
        on_event: OnEvent | None = None,
    ) -> Completion:
        start = now()
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens,
            "messages": message_params(messages),
            "system": system_param(system),
            "tools": tool_params(tools),
        }
        request = json.dumps(params, ensure_ascii=False).encode()
        self.rec.span("llm encode", start, now())
        answer = json.dumps(self._answer(messages, len(request) // 4)).encode()
        self.calls += 1

        async def send() -> dict[str, Any]:
            began = now()
            try:
                return cast(dict[str, Any], json.loads(answer))
            finally:
                self.rec.span("llm decode", began, now())

        try:
            return await call_and_record(
                self.db,
                self.ctx,
                purpose=purpose,
                chat_id=chat_id,
                rates=DEFAULT_RATES,
                send=send,
                classify=lambda exc: None,
                usage=lambda raw: (raw["usage"]["input_tokens"], raw["usage"]["output_tokens"]),
                parse=self._parse,
            )
        finally:
            self.rec.span("llm", start, now())

    def _answer(self, messages: Sequence[Message], input_tokens: int) -> dict[str, Any]:
        last = messages[-1]
        results = [b for b in last.blocks if isinstance(b, ToolResultBlock)]
        if results:
            found = json.loads(results[0].content)
            items = found.get("results") or []
            text = f"I found {found.get('count', 0)} entries about that."
            if items:
                top = items[0]
                text += f" The closest is from {top['date']}: “{top['snippet'][:160]}”"
            content: list[dict[str, Any]] = [{"type": "text", "text": text}]
            stop = "end_turn"
        else:
            question = last.text.lower()
            words = [w for w in _WORD.findall(question) if w in _VOCAB][:3] or ["today"]
            self_id = f"toolu_bench_{self.calls:06d}"
            content = [
                {"type": "text", "text": "Let me look that up in your journal."},
                {
                    "type": "tool_use",
                    "id": self_id,
                    "name": "search_entries",
                    "input": {"query": " ".join(words)},
                },
            ]
            stop = "tool_use"
        return {
            "id": f"msg_bench_{self.calls}",
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": stop,
            "usage": {"input_tokens": input_tokens, "output_tokens": 60},
        }

    def _parse(self, raw: dict[str, Any]) -> Completion:
        blocks: list[TextBlock | ToolUseBlock] = []
        for block in raw["content"]:
            if block["type"] == "text":
                blocks.append(TextBlock(block["text"]))
            else:
                blocks.append(ToolUseBlock(block["id"], block["name"], block["input"]))
        return Completion(
            blocks=tuple(blocks),
            stop_reason=raw["stop_reason"],
            input_tokens=raw["usage"]["input_tokens"],
            output_tokens=raw["usage"]["output_tokens"],
            model=raw["model"],
        )


# --- building a database -------------------------------------------------------------------------


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def admin(url: str, sql: str) -> None:
    """One statement outside any transaction (CREATE/DROP DATABASE), with plain asyncpg."""

    async def go() -> None:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(go())


async def load_journal(
    db: dbmod.Database, size: int, embedder: HashEmbedder, seed: int, chat_id: int
) -> dict[str, float]:
    """COPY ``size`` entries and their vectors into ``chat_id``'s journal (each chat owns its
    journal); secondary indexes are (re)built afterwards."""
    took: dict[str, float] = defaultdict(float)
    indexes = await drop_secondary_indexes(db, ("entries",))
    journal = Journal(embedder, seed=seed)
    loaded = 0
    chunks = journal.chunks(size)
    while True:
        start = now()
        chunk = next(chunks, None)
        took["generate"] += now() - start
        if chunk is None:
            break
        rows, vectors = chunk
        start = now()
        await db.copy_records(
            "entries", [(*r, chat_id) for r in rows], (*Journal.COLUMNS, "chat_id")
        )
        took["copy entries"] += now() - start
        start = now()
        await db.copy_records(
            "entry_embeddings",
            [(*v, chat_id) for v in vectors],
            ("entry_id", "model", "dims", "embedding", "chat_id"),
        )
        took["copy vectors"] += now() - start
        loaded += len(rows)
        if size >= 20_000:
            print(f"  loaded {loaded}/{size} entries", flush=True)
    await db.execute("SELECT setval(pg_get_serial_sequence('entries', 'id'), $1)", size)
    async with db.connection() as conn:
        took["entries indexes"], took["HNSW index"] = await build_indexes(
            conn,
            db.url,
            indexes,
            work_mem="512MB",
            vectors="entry_embeddings",
            model=embedder.model,
            dims=embedder.dims,
        )
    hnsw = await db.fetchval(
        "SELECT count(*) FROM pg_indexes WHERE tablename = 'entry_embeddings'"
        " AND indexdef LIKE '%hnsw%' AND indexdef LIKE $1",
        f"%{embedder.model}%",
    )
    if not hnsw:
        raise BenchError(f"no HNSW index for {embedder.model} on entry_embeddings")
    start = now()
    await db.execute("VACUUM ANALYZE entries")
    await db.execute("VACUUM ANALYZE entry_embeddings")
    took["vacuum analyze"] = now() - start
    start = now()
    await checkpoint(db, " after the load")
    took["checkpoint"] = now() - start
    return took


PATTERN_KINDS = ("behavior", "emotion", "belief", "goal", "preference", "temporal", "causal")


async def load_patterns(
    db: dbmod.Database, chats: Sequence[int], embedder: HashEmbedder, per_chat: int, seed: int
) -> None:
    """``per_chat`` patterns per chat (claims over the journal's theme words, of every kind and
    age), with their vectors, so every turn's retrieval has something to rank."""
    rng = np.random.default_rng(seed + 2)
    words = [w for theme in THEMES.values() for w in theme]
    at = datetime.now(UTC)
    for chat in chats:
        texts = [
            "User " + " ".join(str(w) for w in rng.choice(words, size=5, replace=False)) + f" ({i})"
            for i in range(per_chat)
        ]
        rows = []
        for i, text in enumerate(texts):
            seen = at - timedelta(days=int(rng.integers(0, 400)))
            rows.append(
                (
                    chat,
                    text,
                    PATTERN_KINDS[i % len(PATTERN_KINDS)],
                    0.7,
                    float(rng.uniform(1, 8)),
                    canonical_hash(text),
                    seen,
                    seen,
                )
            )
        await db.copy_records(
            "patterns",
            rows,
            [
                "chat_id",
                "content",
                "kind",
                "confidence",
                "strength",
                "canonical_hash",
                "first_seen",
                "last_seen",
            ],
        )
        ids = [
            r["id"]
            for r in await db.fetch("SELECT id FROM patterns WHERE chat_id = $1 ORDER BY id", chat)
        ]
        vectors = await embedder.embed(texts, purpose="bench")
        await db.copy_records(
            "pattern_embeddings",
            [
                (pid, embedder.model, chat, embedder.dims, v)
                for pid, v in zip(ids, vectors, strict=True)
            ],
            ["pattern_id", "model", "chat_id", "dims", "embedding"],
        )
    await db.execute("VACUUM ANALYZE patterns")
    await db.execute("VACUUM ANALYZE pattern_embeddings")


async def load_chats(db: dbmod.Database, chats: Sequence[int], history: int, seed: int) -> None:
    rng = np.random.default_rng(seed + 1)
    at = datetime.now(UTC)
    rows = [r for chat in chats for r in chat_history(chat, history, rng, at)]
    await db.copy_records("chat_messages", rows, HISTORY_COLUMNS)
    await db.execute("VACUUM ANALYZE chat_messages")


# --- one size ------------------------------------------------------------------------------------


async def drive(
    outside: Outside, port: int, rec: Recorder, chats: Sequence[int], args: argparse.Namespace
) -> tuple[list[TurnRecord], dict[str, int]]:
    """Sequential turns driven by the outside process; the measured ones after the warm-up,
    and the stub's calls by method."""
    warmup = max(args.warmup, len(chats))
    await outside.send(
        webhook_port=port,
        chats=list(chats),
        warmup=warmup,
        turns=args.turns,
        spacing=args.spacing,
        seed=args.seed,
        interval=SenderSettings().chat_interval,
    )
    measured: list[TurnRecord] = []
    try:
        while "end" not in (msg := await outside.receive()):
            turn = TurnRecord(msg["chat"], t0=now())  # provisional: before the POST
            rec.current = turn
            await outside.send()
            done = await outside.receive()
            if done["status"] != 200:
                raise BenchError(f"webhook answered {done['status']}")
            if math.isnan(done["t_sent"]):
                raise BenchError(f"no sendMessage for {turn.chat_id} within {TURN_TIMEOUT:g} s")
            turn.t0, turn.t_ack, turn.t_sent = done["t0"], done["t_ack"], done["t_sent"]
            turn.reply, turn.paced = done["reply"], done["paced"]
            await trio.sleep(0.01)  # the sender records the delivery; not part of the turn
            rec.current = None
            if done["done"] >= warmup:
                measured.append(turn)
            await outside.send()
    finally:
        rec.current = None
    return measured, dict(msg["counts"])


async def measure(
    database: dbmod.Database,
    embedder: HashEmbedder,
    chats: Sequence[int],
    args: argparse.Namespace,
) -> tuple[list[TurnRecord], dict[str, int], tuple[float, float, float, float]]:
    rec = Recorder()
    timed_db = TimedDatabase(database, rec)
    db = cast(dbmod.Database, timed_db)
    measured: list[TurnRecord] = []
    counts: dict[str, int] = {}
    cpu_per_turn = (math.nan, math.nan, math.nan, math.nan)
    process = await trio.lowlevel.open_process(
        [sys.executable, str(OUTSIDE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    outside = Outside(process)
    try:
        async with trio.open_nursery() as nursery:
            stub_port = (await outside.receive())["port"]
            base_url = f"http://{HOST}:{stub_port}"
            settings = load_settings(
                {
                    "ENGRAM_HOST": HOST,
                    "ENGRAM_PORT": "0",
                    "TELEGRAM_BOT_TOKEN": TOKEN,
                    "TELEGRAM_SECRET_TOKEN": SECRET,
                    "TELEGRAM_ALLOWED_CHAT_IDS": ",".join(str(c) for c in chats),
                    "TELEGRAM_API_BASE_URL": base_url,
                    "SHUTDOWN_DEADLINE": "10",
                    # sequential turns rotate over the chats faster than a person writes: the
                    # per-chat rate limit would hold them (it is not what this bench measures)
                    "CHAT_TURNS_PER_MINUTE": "0",
                },
                dotenv=None,
            )
            timed_embedder = TimedEmbedder(embedder, rec)
            thresholds = thresholds_for(timed_embedder.model, settings)
            extra = memory_tools(thresholds=thresholds)
            usage = await nursery.start(UsageWriter(db).run)  # as open_bot: rows written behind
            agent = sql_agent(  # as actors.wiring.open_bot builds it
                db,
                ScriptedLLM(usage, rec),
                timezone=settings.timezone,
                embedder=timed_embedder,
                context_token_budget=settings.context_token_budget,
                retriever=SqlPatternRetriever(db, timed_embedder, thresholds),
                extra_tools=extra,
            )
            agent.conversation = TimedConversation(agent.conversation, rec)
            agent.tools = TimedRegistry([*JOURNAL_TOOLS, *extra], rec)
            turns = TimedTurns(agent, rec)

            def build(s: Any, d: dbmod.Database, sh: Shutdown) -> BotSystem:
                return BotSystem(
                    s,
                    d,
                    sh,
                    turns=turns,
                    bot_factory=lambda: TimedBotApi(TOKEN, base_url=base_url, rec=rec),
                    background=[EmbeddingBackfill(d, timed_embedder).run],
                )

            shutdown = Shutdown(deadline=10, signals=())
            listening = trio.Event()
            binds: list[str] = []
            stopped = trio.Event()

            def on_listening(found: list[str]) -> None:
                binds.extend(found)
                listening.set()

            async def run_serve() -> None:
                try:
                    await serve(settings, db, build, on_listening=on_listening, shutdown=shutdown)
                finally:
                    stopped.set()

            nursery.start_soon(run_serve)
            with trio.fail_after(30):
                await listening.wait()
            port = int(binds[0].rsplit(":", 1)[1])
            try:
                cpu = CpuMeter()
                measured, counts = await drive(outside, port, rec, chats, args)
                cpu_per_turn = cpu.per_turn(max(args.warmup, len(chats)) + args.turns)
            finally:
                shutdown.request_stop("bench done")
                with trio.move_on_after(20):
                    await stopped.wait()
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await outside.send()  # the outside process may stop its stub now
                with trio.move_on_after(5):
                    await process.wait()
                nursery.cancel_scope.cancel()
    finally:
        if process.poll() is None:
            process.kill()
        with trio.move_on_after(5, shield=True):
            await process.wait()
    counts.setdefault("(unmatched sendMessage)", 0)
    return measured, counts, cpu_per_turn


# --- CPU ---------------------------------------------------------------------------------------


def _postgres_cpu() -> float:
    """CPU seconds of this machine's ``postgres`` processes (Linux ``/proc``): their own
    time and that of their exited children (a closed connection's backend), 0 elsewhere."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name = text[text.find("(") + 1 : text.rfind(")")]
        if name == "postgres":
            fields = text[text.rfind(")") + 2 :].split()
            total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return total / tick


_ECHO = "import os\nwhile (b := os.read(0, 1)):\n    os.write(1, b)\n"


def reference_ms() -> tuple[float, float]:
    """How fast this machine is at the moment, best of 5: a fixed pure-Python workload (JSON,
    arithmetic), and 2,000 one-byte round trips through pipes with another process (wake-ups,
    as every database query and HTTP call costs). Shared virtual machines vary by tens of
    percent from one run to the next, and the turn's CPU time with them."""
    doc = {"rows": [{"id": i, "text": f"entry {i} " * 20, "tags": ["a", "b"]} for i in range(200)]}
    compute = wakeups = math.inf
    with subprocess.Popen(
        [sys.executable, "-c", _ECHO], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
    ) as echo:
        assert echo.stdin is not None and echo.stdout is not None
        w, r = echo.stdin.fileno(), echo.stdout.fileno()
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(20):
                json.loads(json.dumps(doc))
                sum(i * i for i in range(20_000))
            compute = min(compute, time.perf_counter() - start)
            start = time.perf_counter()
            for _ in range(2000):
                os.write(w, b"x")
                os.read(r, 1)
            wakeups = min(wakeups, time.perf_counter() - start)
        echo.stdin.close()
    return compute * 1000, wakeups * 1000


@attrs.define
class CpuMeter:
    """CPU used from its creation: this process, and the database server's processes."""

    reference: tuple[float, float] = attrs.field(factory=reference_ms)
    own: float = attrs.field(factory=time.process_time)
    server: float = attrs.field(factory=_postgres_cpu)

    def per_turn(self, turns: int) -> tuple[float, float, float, float]:
        """(this process, the server) CPU seconds per turn since creation, and the reference
        workloads' times (ms; the mean of their runs before and after)."""
        own, server = time.process_time() - self.own, _postgres_cpu() - self.server
        after = reference_ms()
        compute, wakeups = ((a + b) / 2 for a, b in zip(self.reference, after, strict=True))
        return own / turns, server / turns, compute, wakeups


# --- figures -------------------------------------------------------------------------------------


def pct(values: Sequence[float], q: float) -> float:
    """The q-th percentile (linear interpolation between closest ranks)."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    k = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.2f}"


@attrs.frozen
class Breakdown:
    """One turn split into parts that add up to its total (seconds)."""

    parts: dict[str, float]
    timeline: dict[str, float]


def breakdown(t: TurnRecord) -> Breakdown:
    db_total = t.db_within([(t.t0, t.t_sent)])
    recent = t.spans_named("recent")
    llm_spans = t.spans_named("llm")
    first_llm = min((a for a, _ in llm_spans), default=t.t_end)
    recent_end = max((b for _, b in recent), default=first_llm)
    context = (t.span_s("recent") - t.db_within(recent)) + max(0.0, first_llm - recent_end)
    encode = t.span_s("llm encode") + t.span_s("llm decode")
    tool_json = t.span_s("tool") - t.span_s("tool handler")
    handler = t.spans_named("tool handler")
    embed = t.span_s("embed")
    tool_cpu = t.span_s("tool handler") - t.db_within(handler) - embed
    fakes = embed + t.span_s("llm") - encode - t.db_within(llm_spans)
    parts = {
        "database (wall time with a query running)": db_total,
        "context build (window rows -> system prompt)": context,
        "serialization (model JSON, tool input/result JSON)": encode + tool_json,
        "search tool CPU (excl. database, embedding)": tool_cpu,
        "fake model + fake embedder": fakes,
    }
    parts["rest: HTTP in/out, webhook, router, actors, logs"] = t.total - sum(parts.values())
    timeline = {
        "webhook POST -> turn start": t.t_start - t.t0,
        "turn (agent)": t.t_end - t.t_start,
        "turn end -> sendMessage at the stub": t.t_sent - t.t_end,
    }
    return Breakdown(parts, timeline)


def agent_steps(t: TurnRecord) -> dict[str, float]:
    llm = t.spans_named("llm")
    steps = {
        "user row (alone)": t.span_s("add_user"),
        "user row + recent window (query + rows)": t.span_s("recent"),
        "model call 1 (JSON, usage row)": llm[0][1] - llm[0][0] if llm else 0.0,
        "search_entries tool": t.span_s("tool"),
        "model call 2 (JSON, usage row)": llm[1][1] - llm[1][0] if len(llm) > 1 else 0.0,
    }
    recent = t.spans_named("recent")
    if recent and llm:
        steps["context build (after the window)"] = llm[0][0] - recent[-1][1]
    steps["rest of the turn (loop, transcript rows, log)"] = (t.t_end - t.t_start) - sum(
        steps.values()
    )
    return steps


def table(title: str, rows: dict[str, list[float]], total_mean: float | None = None) -> None:
    print(f"  {title}")
    print(f"    {'':52} {'mean':>7} {'p50':>7} {'p95':>7}  ms{'   share' if total_mean else ''}")
    for name, values in rows.items():
        mean = statistics.fmean(values)
        share = f"  {mean / total_mean * 100:5.1f}%" if total_mean else ""
        print(f"    {name:52} {ms(mean)} {ms(pct(values, 50))} {ms(pct(values, 95))}{share}")


def tail(turns: list[TurnRecord], splits: list[Breakdown], steps: list[dict[str, float]]) -> None:
    """What the slowest tenth of the turns spends more time on than the faster half."""
    totals = [t.total for t in turns]
    slow = [i for i, x in enumerate(totals) if x >= pct(totals, 90)]
    fast = [i for i, x in enumerate(totals) if x <= pct(totals, 50)]
    rows: dict[str, list[float]] = {"the whole turn": totals}
    rows.update({k: [b.timeline[k] for b in splits] for k in splits[0].timeline})
    rows.update({k: [b.parts[k] for b in splits] for k in splits[0].parts})
    rows.update({k: [s[k] for s in steps] for k in steps[0]})
    sites: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(turns))
    for i, t in enumerate(turns):
        for start, seconds, site in t.db:
            if start < t.t_sent:
                sites[site][i] += seconds
    rows.update(sorted(sites.items()))
    print(f"  the slowest tenth ({len(slow)} turns) against the faster half, mean ms")
    print(f"    {'':52} {'slow':>7} {'fast':>7} {'extra':>7}")
    for name, values in rows.items():
        a = statistics.fmean(values[i] for i in slow)
        b = statistics.fmean(values[i] for i in fast)
        print(f"    {name[:52]:52} {ms(a)} {ms(b)} {ms(a - b)}")


def report(
    size: int,
    turns: list[TurnRecord],
    counts: dict[str, int],
    log_lines: int,
    cpu: tuple[float, float, float, float],
) -> None:
    totals = [t.total for t in turns]
    p50, p95 = pct(totals, 50), pct(totals, 95)
    mean_total = statistics.fmean(totals)
    verdict = "met" if p95 * 1000 <= GOAL_P95_MS else "NOT met"
    print(
        f"entries={size}: {len(turns)} turns: p50 {p50 * 1000:.2f} ms, p95 {p95 * 1000:.2f} ms, "
        f"mean {mean_total * 1000:.2f} ms, max {max(totals) * 1000:.2f} ms "
        f"(goal p95 <= {GOAL_P95_MS:g} ms: {verdict})"
    )
    acks = [t.t_ack - t.t0 for t in turns]
    print(
        f"  webhook ack (200): p50 {pct(acks, 50) * 1000:.2f} ms, p95 {pct(acks, 95) * 1000:.2f} ms"
    )
    print(
        f"  CPU per turn (warm-up included; {os.cpu_count()} cores): the engram process "
        f"{cpu[0] * 1000:.1f} ms, PostgreSQL {cpu[1] * 1000:.1f} ms"
    )
    print(
        f"  machine speed now (lower is faster): reference compute {cpu[2]:.1f} ms, 2,000 pipe "
        f"round trips with another process {cpu[3]:.1f} ms"
    )
    splits = [breakdown(t) for t in turns]
    table(
        "timeline (adds up to the turn)",
        {k: [b.timeline[k] for b in splits] for k in splits[0].timeline},
        mean_total,
    )
    table(
        "by kind (adds up to the turn)",
        {k: [b.parts[k] for b in splits] for k in splits[0].parts},
        mean_total,
    )
    steps = [agent_steps(t) for t in turns]
    table("inside the agent", {k: [s[k] for s in steps] for k in steps[0]}, mean_total)
    per_site: dict[str, list[float]] = defaultdict(list)
    for t in turns:
        for start, seconds, site in t.db:
            if start < t.t_sent:
                per_site[site].append(seconds)
    print("  database statements (before sendMessage)")
    print(f"    {'':52} {'/turn':>6} {'mean':>7} {'p50':>7} {'p95':>7}  ms per call, ms/turn")
    for site, values in sorted(per_site.items(), key=lambda kv: -sum(kv[1])):
        per_turn = len(values) / len(turns)
        print(
            f"    {site[:52]:52} {per_turn:6.2f} {ms(statistics.fmean(values))} "
            f"{ms(pct(values, 50))} {ms(pct(values, 95))}  {ms(sum(values) / len(turns))}"
        )
    bot: dict[str, list[float]] = defaultdict(list)
    for t in turns:
        for method, _, seconds in t.bot:
            bot[method].append(seconds)
    calls = ", ".join(
        f"{m} {len(v) / len(turns):.2f}/turn {statistics.fmean(v) * 1000:.2f} ms"
        for m, v in sorted(bot.items())
    )
    results = [t.results for t in turns]
    print(f"  Bot API client calls (httpx, round trip): {calls}")
    print(
        f"  search results per turn: mean {statistics.fmean(results):.1f}, "
        f"min {min(results)}; log lines per turn ~{log_lines / max(1, len(turns)):.0f}; "
        f"stub calls {counts}"
    )
    tail(turns, splits, steps)
    paced = sum(t.paced for t in turns)
    if paced:
        print(f"  WARNING: {paced} turns came within the sender's per-chat pacing interval")
    print(f"  sample reply: {turns[-1].reply[:140]!r}")


# --- main ----------------------------------------------------------------------------------------


async def run_size(
    url: str, size: int, args: argparse.Namespace, log: TextIO
) -> tuple[list[TurnRecord], dict[str, int], tuple[float, float, float, float], int]:
    """Build the database for ``size`` entries, then measure: (turns, stub calls, CPU per
    turn, log offset where the measurement started)."""
    embedder = HashEmbedder(args.dims)
    chats = [CHAT_BASE + i for i in range(args.chats)]
    async with dbmod.asyncio_loop(), dbmod.open_database(url, max_size=10) as database:
        await apply_migrations(database)
        start = now()
        # the journal is the first chat's: turns in the other chats search an empty one
        took = await load_journal(database, size, embedder, args.seed, chats[0])
        await load_chats(database, chats, args.history, args.seed)
        await load_patterns(database, chats, embedder, args.patterns, args.seed)
        parts = ", ".join(f"{k} {v:.1f} s" for k, v in took.items())
        print(f"entries={size}: built in {now() - start:.1f} s ({parts})", flush=True)
        rng = np.random.default_rng(args.seed + 3)
        hits = [
            await database.fetchval(
                "SELECT count(*) FROM entries WHERE text_search @@ "
                "websearch_to_tsquery('english', $1)",
                user_message(rng)[1],
            )
            / size
            for _ in range(40)
        ]
        print(
            f"  the questions' two-word queries match {pct(hits, 50) * 100:.2f} % of the "
            f"entries (median; p90 {pct(hits, 90) * 100:.2f} %)",
            flush=True,
        )
        log.flush()
        before = log.tell()
        turns, counts, cpu = await measure(database, embedder, chats, args)
    return turns, counts, cpu, before


def run_all(url: str, args: argparse.Namespace, log: TextIO) -> None:
    """Each size in its own new database (dropped after), then the summary line."""
    last: tuple[int, list[TurnRecord]] | None = None
    for size in args.sizes:
        name = f"engram_bench_turn_{size}_{secrets.token_hex(3)}"
        admin(url, f'CREATE DATABASE "{name}"')
        try:
            turns, counts, cpu, before = trio.run(
                run_size, with_database(url, name), size, args, log
            )
        finally:
            if args.keep:
                print(f"  kept database {name}", flush=True)
            else:
                admin(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        log.flush()
        with open(log.name, "rb") as f:
            f.seek(before)
            lines = f.read().count(b"\n")
        report(size, turns, counts, lines, cpu)
        last = (size, turns)
    assert last is not None
    size, turns = last
    totals = [t.total for t in turns]
    print(
        f"turn p50_ms={pct(totals, 50) * 1000:.2f} p95_ms={pct(totals, 95) * 1000:.2f} "
        f"entries={size}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="", help="PostgreSQL URL (default: embedded server)")
    parser.add_argument(
        "--sizes", default="1000,100000", help="journal sizes, comma-separated (%(default)s)"
    )
    parser.add_argument("--turns", type=int, default=200, help="measured turns per size")
    parser.add_argument("--warmup", type=int, default=40, help="unmeasured turns (>= --chats)")
    parser.add_argument("--chats", type=int, default=40, help="chats the turns rotate over")
    parser.add_argument("--history", type=int, default=60, help="chat_messages rows per chat")
    parser.add_argument("--patterns", type=int, default=500, help="patterns per chat")
    parser.add_argument("--spacing", type=float, default=0.05, help="min seconds between turns")
    parser.add_argument("--dims", type=int, default=256, help="fake embedding dimensions")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the databases (with --url)")
    parser.add_argument(
        "--log-level", default="INFO", help="engram log level (JSON lines to a temp file)"
    )
    add_smoke_flag(parser)
    args = parser.parse_args()
    shrink(
        parser,
        args,
        sizes="200",
        turns=6,
        warmup=2,
        chats=2,
        history=10,
        patterns=20,
        spacing=0.55,
        log_level="WARNING",
    )
    args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if not args.sizes or min(args.sizes) < 1 or max(args.sizes) > 1_000_000:
        parser.error("--sizes: between 1 and 1,000,000 entries each")
    if not 1 <= args.turns <= 10_000 or not 1 <= args.chats <= 1000:
        parser.error("--turns 1..10000, --chats 1..1000")
    if args.spacing < 0 or args.history < 0:
        parser.error("--spacing and --history must be >= 0")
    pacing = SenderSettings()
    if args.chats * args.spacing < pacing.chat_interval or args.spacing < 1 / pacing.global_rate:
        print(
            f"note: --chats x --spacing < {pacing.chat_interval:g} s or --spacing < "
            f"1/{pacing.global_rate} s: the sender's pacing may add waits to the turns",
            file=sys.stderr,
        )
    with (
        tempfile.TemporaryDirectory(prefix="engram-bench-turn-") as tmp,
        open(Path(tmp) / "engram.log", "w", encoding="utf-8") as log,
    ):
        configure_logging(args.log_level, "json", [TOKEN, SECRET], stream=log)
        if args.url:
            run_all(args.url, args, log)
            return
        with warnings.catch_warnings():  # platformdirs warns about XDG_RUNTIME_DIR
            warnings.simplefilter("ignore")
            import pgserver

            server = pgserver.get_server(  # type: ignore[attr-defined]
                Path(tmp) / "pg", cleanup_mode="delete"
            )
            tune(server, DEFAULT_SHARED_BUFFERS)  # as engram serve runs its embedded server
        try:
            run_all(server.get_uri(), args, log)
        finally:
            server.cleanup()


if __name__ == "__main__":
    main()
