"""Database helpers shared by the benchmarks."""

from __future__ import annotations

from runtime import db as dbmod


class OnConnection:
    """A held connection as a :class:`runtime.db.Queries` for ``ensure_vector_index`` (whose
    cache of built indexes is keyed by the database URL)."""

    def __init__(self, conn: dbmod.Connection, url: str) -> None:
        self.url = url
        self.execute, self.executemany = conn.execute, conn.executemany
        self.fetch, self.fetchrow, self.fetchval = conn.fetch, conn.fetchrow, conn.fetchval
