"""Where a string still is in a database: every column of every table of the public schema
(read from the catalogue, so a table added later is scanned too), cast to text — vectors,
tsvectors (their lexemes), JSON, arrays included. For the tests of "forgetting forgets"."""

from __future__ import annotations

from collections.abc import Sequence

from runtime.db import Queries

_COLUMNS = """
SELECT c.table_name::text AS t, array_agg(c.column_name::text ORDER BY c.ordinal_position) AS cols
FROM information_schema.columns c
JOIN information_schema.tables t
  ON t.table_schema = c.table_schema AND t.table_name = c.table_name
WHERE c.table_schema = 'public' AND t.table_type = 'BASE TABLE'
GROUP BY c.table_name ORDER BY c.table_name
"""


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


async def tables(db: Queries) -> dict[str, list[str]]:
    """Every table of the public schema and its columns."""
    return {str(r["t"]): list(r["cols"]) for r in await db.fetch(_COLUMNS)}


async def rows_containing(db: Queries, needles: Sequence[str]) -> dict[str, int]:
    """Per table, how many rows hold any of ``needles`` (case-insensitive) in any column;
    only the tables where some do."""
    patterns = [
        "%" + n.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%" for n in needles
    ]
    found: dict[str, int] = {}
    for table, cols in (await tables(db)).items():
        row_text = " || ' ' || ".join(f"coalesce({_ident(c)}::text, '')" for c in cols)
        n = await db.fetchval(
            f"SELECT count(*) FROM {_ident(table)} WHERE ({row_text}) ILIKE ANY($1::text[])",
            patterns,
        )
        if n:
            found[table] = int(n)
    return found
