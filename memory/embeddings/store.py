"""Vectors in the per-model side tables, their HNSW indexes, and the backfill job.

Side tables (``entry_embeddings``, ``pattern_embeddings``, ``alias_embeddings``,
``episode_embeddings``) hold one row per (owner, model) with the model's ``dims``; each model
gets its own HNSW index on ``embedding::vector(dims)``, partial on ``model``. Migrations create
the indexes of ``text-embedding-3-small``; :func:`ensure_vector_index` creates any other model's
at run time (``store_vectors`` calls it). Table and column names only ever come from the
allow-list :data:`memory.embeddings.tables.VECTOR_TABLES`; model names must match
:data:`MODEL_NAME`.

:class:`EmbeddingBackfill` embeds rows that lack a vector for the current model, forever: a
failed pass is logged and retried with exponential backoff (never silently dropped).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import trio

from memory.embeddings.providers import PURPOSE, Embedder
from memory.embeddings.tables import ALL_TABLES, VectorTable, vector_table
from memory.errors import EmbeddingError
from runtime.backoff import backoff_delay
from runtime.db import Queries
from runtime.errors import IntegrityViolation, QueryError
from runtime.logs import get_logger

log = get_logger(__name__)

MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/\-]{0,99}")
HNSW_MAX_DIMS = 2000  # pgvector's limit for an HNSW index on ``vector``


def check_model(model: str) -> str:
    if not MODEL_NAME.fullmatch(model):
        raise ValueError(f"invalid embedding model name: {model!r}")
    return model


def index_name(table: str, model: str, dims: int) -> str:
    """A stable PostgreSQL identifier (<= 63 bytes) for the model's index on ``table``."""
    slug = re.sub(r"[^a-z0-9]+", "_", model.lower()).strip("_")
    name = f"idx_{table}_{slug}_{dims}"
    if len(name) > 63:
        digest = hashlib.sha1(f"{model}/{dims}".encode()).hexdigest()[:10]
        name = f"idx_{table}_{slug}"[: 63 - 12] + f"_{digest}"
    return name


# --- indexes -----------------------------------------------------------------------------------

_ensured: set[tuple[str, str, str, int]] = set()


async def _has_index(db: Queries, table: str, model: str, dims: int) -> bool:
    found = await db.fetchval(
        "SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema() AND tablename = $1"
        " AND indexdef LIKE $2 AND indexdef LIKE $3",
        table,
        f"%USING hnsw%::vector({dims})%",
        "%model = '" + model.replace("_", "\\_") + "'::text%",
    )
    return bool(found)


async def ensure_vector_index(db: Queries, table: str, model: str, dims: int) -> bool:
    """Create the model's partial HNSW index on ``table`` unless one exists; True if created.

    Idempotent (an equivalent index made by a migration counts) and race-safe between
    processes. Models over :data:`HNSW_MAX_DIMS` get no index (exact search still works).
    """
    vector_table(table)
    check_model(model)
    key = (str(getattr(db, "url", None) or id(db)), table, model, dims)
    if key in _ensured:
        return False
    if dims > HNSW_MAX_DIMS:
        log.warning("embedding.index_skipped", table=table, model=model, dims=dims)
        _ensured.add(key)
        return False
    created = False
    if not await _has_index(db, table, model, dims):
        name = index_name(table, model, dims)
        try:
            await db.execute(
                f"CREATE INDEX IF NOT EXISTS {name} ON {table} "
                f"USING hnsw ((embedding::vector({dims})) vector_cosine_ops) "
                f"WITH (m = 16, ef_construction = 64) WHERE model = '{model}'"
            )
            created = True
            log.info("embedding.index_created", table=table, model=model, dims=dims, index=name)
        except (IntegrityViolation, QueryError):  # another process created it at the same time
            if not await _has_index(db, table, model, dims):
                raise
    _ensured.add(key)
    return created


# --- vectors -----------------------------------------------------------------------------------


async def store_vectors(
    db: Queries,
    table: str,
    owner_col: str,
    rows: Iterable[tuple[int, np.ndarray] | tuple[int, np.ndarray, int | None]],
    model: str,
    *,
    ensure_index: bool = True,
) -> int:
    """Upsert ``(owner_id, vector[, chat_id])`` rows for ``model``; returns the rows given.

    ``chat_id`` defaults to the owner's. Owners deleted meanwhile are skipped silently.
    All vectors must have the same dims; the model's index is ensured first unless
    ``ensure_index`` is false (a bulk load builds it once afterwards).
    """
    spec = vector_table(table, owner_col)
    check_model(model)
    args: list[tuple[Any, ...]] = []
    dims = 0
    for row in rows:
        owner_id, vector = row[0], np.asarray(row[1], dtype=np.float32).reshape(-1)
        chat_id = row[2] if len(row) > 2 else None  # type: ignore[misc]
        if dims and vector.shape[0] != dims:
            raise ValueError(f"mixed vector dims in one call: {dims} and {vector.shape[0]}")
        dims = vector.shape[0]
        args.append(
            (owner_id, model, dims, vector, chat_id)
            if spec.chat_scoped
            else (owner_id, model, dims, vector)
        )
    if not args:
        return 0
    if ensure_index:
        await ensure_vector_index(db, table, model, dims)
    chat_col, chat_val, one_chat, sweep = "", "", "", ""
    if spec.chat_scoped and all(a[4] is not None for a in args):
        chat_col, chat_val, one_chat = ", chat_id", ", $5::bigint", "o.chat_id = $5 AND "
    elif spec.chat_scoped:  # a caller that does not know its rows' chats (bulk loads)
        chat_col, chat_val = ", chat_id", ", coalesce($5::bigint, o.chat_id)"
        sweep = "/* all chats: vectors stored by owner id, their chat read from the owner */ "
    conflict = f"chat_id, {spec.owner_col}" if spec.chat_scoped else spec.owner_col
    await db.executemany(
        f"{sweep}INSERT INTO {table} ({spec.owner_col}, model, dims, embedding{chat_col}) "
        f"SELECT o.id, $2::text, $3::int, $4::vector{chat_val} "
        f"FROM {spec.owner_table} o WHERE {one_chat}o.id = $1 "
        f"ON CONFLICT ({conflict}, model) DO UPDATE SET dims = EXCLUDED.dims, "
        "embedding = EXCLUDED.embedding, created_at = now()",
        args,
    )
    return len(args)


def _missing_sql(spec: VectorTable, columns: str) -> str:
    same_chat = "v.chat_id = o.chat_id AND " if spec.chat_scoped else ""
    return (
        "/* all chats: the embedding backfill's sweep */ "
        f"SELECT {columns} FROM {spec.owner_table} o WHERE o.id > $3 AND NOT EXISTS "
        f"(SELECT 1 FROM {spec.name} v WHERE {same_chat}v.{spec.owner_col} = o.id "
        "AND v.model = $1) "
        "ORDER BY o.id LIMIT $2"
    )


async def missing_owner_ids(
    db: Queries, table: str, owner_table: str, model: str, limit: int, *, after_id: int = 0
) -> list[int]:
    """Ids of ``owner_table`` rows (after ``after_id``, ascending) without a ``model`` vector."""
    spec = vector_table(table)
    if owner_table != spec.owner_table:
        raise ValueError(f"{table} belongs to {spec.owner_table}, not {owner_table!r}")
    rows = await db.fetch(_missing_sql(spec, "o.id"), check_model(model), limit, after_id)
    return [int(r["id"]) for r in rows]


async def missing_count(db: Queries, model: str, cap: int) -> int:
    """Rows of every side table's owners without a ``model`` vector (the backfill's backlog),
    counted up to ``cap`` per table: a bounded query however large the backlog."""
    check_model(model)
    total = 0
    for table in ALL_TABLES:
        query = _missing_sql(vector_table(table), "1")
        total += int(await db.fetchval(f"SELECT count(*) FROM ({query}) m", model, cap, 0))
    return total


async def _missing_rows(
    db: Queries, spec: VectorTable, model: str, limit: int, after_id: int
) -> list[tuple[int, str, int | None]]:
    chat = "o.chat_id" if spec.chat_scoped else "NULL::bigint"
    columns = f"o.id, coalesce(o.{spec.text_col}, '') AS text, {chat} AS chat_id"
    rows = await db.fetch(_missing_sql(spec, columns), model, limit, after_id)
    return [(int(r["id"]), str(r["text"]), r["chat_id"]) for r in rows]


# --- backfill ----------------------------------------------------------------------------------


async def _embed_and_store(
    db: Queries, embedder: Embedder, spec: VectorTable, rows: list[tuple[int, str, int | None]]
) -> int:
    vectors = await embedder.embed([r[1] for r in rows], purpose=PURPOSE)
    stored = [(r[0], v, r[2]) for r, v in zip(rows, vectors, strict=True)]
    return await store_vectors(db, spec.name, spec.owner_col, stored, embedder.model)


async def backfill_once(
    db: Queries,
    embedder: Embedder,
    *,
    tables: Sequence[str] = ALL_TABLES,
    batch: int = 64,
    limit: int | None = None,
) -> int:
    """Embed every row of ``tables`` lacking a vector for ``embedder.model``; the count stored.

    A retryable failure (outage, rate limit) ends the pass at once. A permanent one (e.g. an
    input the API rejects) is narrowed down to the rows that fail, which are logged and
    skipped so the rest progresses. Either way ``EmbeddingError`` is raised at the end, after
    storing what succeeded, so the caller retries later.
    """
    done = 0
    failed: list[str] = []
    for table in tables:
        spec = vector_table(table)
        after = 0
        while limit is None or done < limit:
            size = batch if limit is None else min(batch, limit - done)
            rows = await _missing_rows(db, spec, embedder.model, size, after)
            if not rows:
                break
            after = rows[-1][0]
            try:
                done += await _embed_and_store(db, embedder, spec, rows)
                continue
            except EmbeddingError as exc:
                if exc.retryable:
                    raise EmbeddingError(
                        f"backfill stopped after {done} vector(s): {exc}", retryable=True
                    ) from exc
            for row in rows:  # a permanent failure: find the rows that cause it
                try:
                    done += await _embed_and_store(db, embedder, spec, [row])
                except EmbeddingError as exc:
                    log.warning(
                        "embedding.row_failed", table=table, owner_id=row[0], error=str(exc)
                    )
                    failed.append(f"{table}:{row[0]}")
                    if exc.retryable:
                        raise
    if failed:
        raise EmbeddingError(
            f"{len(failed)} row(s) could not be embedded: {', '.join(failed[:10])}",
            retryable=False,
        )
    return done


class EmbeddingBackfill:
    """Background job: keep every side table embedded for the current model.

    ``run`` makes a pass at start, then after each ``wake()`` or every ``interval`` seconds.
    A failed pass (embedding or database error) is logged and retried after
    ``retry_base * 2**n`` seconds, capped at ``retry_cap``; it never gives up.
    """

    def __init__(
        self,
        db: Queries,
        embedder: Embedder,
        *,
        tables: Sequence[str] = ALL_TABLES,
        batch: int = 64,
        interval: float = 300.0,
        retry_base: float = 1.0,
        retry_cap: float = 300.0,
    ) -> None:
        for table in tables:
            vector_table(table)
        self.db, self.embedder, self.tables, self.batch = db, embedder, tuple(tables), batch
        self.interval, self.retry_base, self.retry_cap = interval, retry_base, retry_cap
        self.passes = 0
        self.failures = 0  # consecutive failed passes
        self.embedded = 0  # total vectors stored
        self._wake = trio.Event()
        self._passed = trio.Event()

    def wake(self) -> None:
        """Start the next pass now (e.g. after an import or a compaction)."""
        self._wake.set()

    async def wait_passes(self, count: int) -> None:
        """Return once ``count`` passes have succeeded since the job started."""
        while self.passes < count:
            await self._passed.wait()

    def retry_delay(self, failures: int) -> float:
        """Seconds to wait after ``failures`` consecutive failed passes."""
        return backoff_delay(max(0, failures - 1), base=self.retry_base, cap=self.retry_cap)

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started(self)
        while True:
            self._wake = trio.Event()
            try:
                count = await backfill_once(
                    self.db, self.embedder, tables=self.tables, batch=self.batch
                )
            except Exception as exc:  # an outage must not end the job: log, back off, retry
                self.failures += 1
                delay = self.retry_delay(self.failures)
                log.warning(
                    "embedding.backfill_failed",
                    model=self.embedder.model,
                    attempt=self.failures,
                    retry_in=delay,
                    error=f"{type(exc).__name__}: {exc}",
                )
                await trio.sleep(delay)
                continue
            self.passes += 1
            self.embedded += count
            if count or self.failures:
                log.info("embedding.backfilled", model=self.embedder.model, count=count)
            self.failures = 0
            self._passed.set()
            self._passed = trio.Event()
            with trio.move_on_after(self.interval):
                await self._wake.wait()
