"""Re-embedding every memory row for the current embedding model (``engram memory reembed``).

Walks the four side tables (entries, patterns, aliases, episodes) in id order, embeds the owner
rows in batches and upserts their vectors for ``embedder.model``. It is resumable: by default
only rows lacking a vector for the model are embedded, so an interrupted run picks up where it
stopped. ``all_rows=True`` re-embeds every row whose vector predates the run (the database
clock at the start), so rows stored by the run itself are not embedded twice.

The model's partial HNSW indexes are created *after* the vectors are written (building an
index once is far cheaper than maintaining it row by row during a bulk load).

A retryable embedding failure (outage, rate limit) stops the run with ``EmbeddingError`` after
storing what succeeded; a permanent one is narrowed down to the rows that cause it, which are
logged, counted and skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import attrs
import numpy as np

from memory.embeddings.providers import PURPOSE, Embedder
from memory.embeddings.store import check_model, ensure_vector_index, store_vectors
from memory.embeddings.tables import ALL_TABLES, VectorTable, vector_table
from memory.errors import EmbeddingError
from runtime.db import Queries
from runtime.logs import get_logger
from runtime.progress import Progress

log = get_logger(__name__)

DEFAULT_BATCH = 64


@attrs.frozen
class ReembedReport:
    """What a run did: vectors stored per table, rows skipped, indexes created."""

    model: str
    dims: int
    embedded: dict[str, int]
    failed: tuple[str, ...] = ()
    indexes_created: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        return sum(self.embedded.values())


def _pending_where(spec: VectorTable, cutoff_arg: str | None) -> str:
    """Owner rows without a vector for the model ($1) (or with one older than the cutoff)."""
    fresh = f" AND v.created_at >= {cutoff_arg}" if cutoff_arg else ""
    return (
        f"NOT EXISTS (SELECT 1 FROM {spec.name} v WHERE v.{spec.owner_col} = o.id "
        f"AND v.model = $1{fresh})"
    )


async def count_pending(
    db: Queries, model: str, *, tables: Sequence[str] = ALL_TABLES, cutoff: datetime | None = None
) -> dict[str, int]:
    """Rows per table that a run would embed (``cutoff``: also those with an older vector)."""
    out: dict[str, int] = {}
    for table in tables:
        spec = vector_table(table)
        args: list[Any] = [check_model(model)]
        if cutoff is not None:
            args.append(cutoff)
        where = _pending_where(spec, "$2" if cutoff is not None else None)
        out[table] = int(
            await db.fetchval(
                "/* all chats: operator re-embedding sweep */ "
                f"SELECT count(*) FROM {spec.owner_table} o WHERE {where}",
                *args,
            )
        )
    return out


async def _pending_rows(
    db: Queries,
    spec: VectorTable,
    model: str,
    *,
    after: int,
    limit: int,
    cutoff: datetime | None,
) -> list[tuple[int, str, int | None]]:
    chat = "o.chat_id" if spec.chat_scoped else "NULL::bigint"
    args: list[Any] = [model, after, limit]
    if cutoff is not None:
        args.append(cutoff)
    where = _pending_where(spec, "$4" if cutoff is not None else None)
    rows = await db.fetch(
        "/* all chats: operator re-embedding sweep */ "
        f"SELECT o.id, coalesce(o.{spec.text_col}, '') AS text, {chat} AS chat_id "
        f"FROM {spec.owner_table} o WHERE o.id > $2 AND {where} ORDER BY o.id LIMIT $3",
        *args,
    )
    return [(int(r["id"]), str(r["text"]), r["chat_id"]) for r in rows]


async def _embed_batch(
    db: Queries,
    embedder: Embedder,
    spec: VectorTable,
    rows: list[tuple[int, str, int | None]],
) -> int:
    vectors = await embedder.embed([r[1] for r in rows], purpose=PURPOSE)
    for v in vectors:
        if np.asarray(v).reshape(-1).shape[0] != embedder.dims:
            raise EmbeddingError(f"{embedder.model} returned a vector of the wrong size")
    stored = [(r[0], v, r[2]) for r, v in zip(rows, vectors, strict=True)]
    # indexes are built once after the whole load (see reembed)
    return await store_vectors(
        db, spec.name, spec.owner_col, stored, embedder.model, ensure_index=False
    )


async def reembed(
    db: Queries,
    embedder: Embedder,
    *,
    tables: Sequence[str] = ALL_TABLES,
    all_rows: bool = False,
    batch: int = DEFAULT_BATCH,
    progress: Progress | None = None,
) -> ReembedReport:
    """Embed the rows of ``tables`` for ``embedder.model``; see the module docstring."""
    if batch < 1:
        raise ValueError("batch must be >= 1")
    model = check_model(embedder.model)
    specs = [vector_table(t) for t in tables]
    cutoff: datetime | None = await db.fetchval("SELECT now()") if all_rows else None
    if progress is not None:
        pending = await count_pending(db, model, tables=tables, cutoff=cutoff)
        progress.start(sum(pending.values()))
    embedded: dict[str, int] = {}
    failed: list[str] = []
    for spec in specs:
        done, after = 0, 0
        while True:
            rows = await _pending_rows(db, spec, model, after=after, limit=batch, cutoff=cutoff)
            if not rows:
                break
            after = rows[-1][0]
            try:
                stored = await _embed_batch(db, embedder, spec, rows)
            except EmbeddingError as exc:
                if exc.retryable:
                    embedded[spec.name] = done
                    raise EmbeddingError(
                        f"stopped after {sum(embedded.values())} vector(s): {exc}; "
                        "run again to resume",
                        retryable=True,
                    ) from exc
                stored = 0
                for row in rows:  # a permanent failure: find the rows that cause it
                    try:
                        stored += await _embed_batch(db, embedder, spec, [row])
                    except EmbeddingError as row_exc:
                        if row_exc.retryable:
                            raise
                        log.warning(
                            "reembed.row_failed",
                            table=spec.name,
                            owner_id=row[0],
                            error=str(row_exc),
                        )
                        failed.append(f"{spec.name}:{row[0]}")
            done += stored
            if progress is not None:
                progress.advance(len(rows))
        embedded[spec.name] = done
    created = []
    for spec in specs:
        if await ensure_vector_index(db, spec.name, model, embedder.dims):
            created.append(spec.name)
    report = ReembedReport(model, embedder.dims, embedded, tuple(failed), tuple(created))
    log.info(
        "reembed.done",
        model=model,
        embedded=report.total,
        failed=len(failed),
        indexes_created=list(created),
    )
    return report
