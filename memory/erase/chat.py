"""A whole chat erased (issue 24 item 5): every row of the chat in every table that has a
``chat_id`` column, and the rows hanging from them by foreign key, in ONE transaction; then its
vault folder.

The tables are read from the database catalogue when the erase runs (:func:`chat_tables`), so a
table a later migration adds is covered without a change here. They are emptied of the chat in
an order that suits the foreign keys (a table before the tables it references), the producers
first: ``cron_jobs`` before the inbox (a scheduler claiming a due job holds its row: the erase
waits for that transaction, then deletes the inbox row it made), the compaction's runs last.
A table without ``chat_id`` that references one of them by foreign key loses the rows that
point at the chat's rows before those go (today every such key cascades; this keeps a later
``NO ACTION`` key from failing the erase).

The transaction first takes the chat's compaction lock (:func:`compaction_lock_key`, the one
:func:`memory.compaction.run.compact_chat` holds across its model call): a compaction in
progress finishes before the erase (and is erased with the rest); one starting after finds no
messages. A turn in flight when the erase commits cannot write its rows afterwards: its commit
requires its inbox rows, which are gone (``engram_check``, :mod:`actors.queues.outbox`).

The vault folder (``chat_folder(vault_root(...), chat_id)``) is removed after the commit: a
failed erase leaves the folder as it was.
"""

from __future__ import annotations

import shutil
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

import attrs

from memory.compaction.run import compaction_lock_key
from runtime.db import Connection, Database, Queries
from runtime.logs import get_logger

log = get_logger(__name__)

#: emptied first (see the module docstring): the tables that make new rows of the chat
FIRST = ("cron_jobs", "erase_requests", "allowed_chats")
#: emptied last: a compaction skipped while the erase held its lock leaves its row here
LAST = ("compaction_runs",)

_CHAT_TABLES = """
SELECT c.table_name::text AS t
FROM information_schema.columns c
JOIN information_schema.tables t
  ON t.table_schema = c.table_schema AND t.table_name = c.table_name
WHERE c.table_schema = current_schema() AND c.column_name = 'chat_id'
  AND t.table_type = 'BASE TABLE'
ORDER BY 1
"""

# every foreign key between tables of the schema: child columns -> parent columns
_FOREIGN_KEYS = """
SELECT ch.relname::text AS child, pa.relname::text AS parent,
       ARRAY(SELECT a.attname::text FROM unnest(k.conkey) WITH ORDINALITY u(n, i)
             JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.n ORDER BY u.i)
         AS child_cols,
       ARRAY(SELECT a.attname::text FROM unnest(k.confkey) WITH ORDINALITY u(n, i)
             JOIN pg_attribute a ON a.attrelid = k.confrelid AND a.attnum = u.n ORDER BY u.i)
         AS parent_cols
FROM pg_constraint k
JOIN pg_class ch ON ch.oid = k.conrelid
JOIN pg_class pa ON pa.oid = k.confrelid
JOIN pg_namespace n ON n.oid = ch.relnamespace
WHERE k.contype = 'f' AND n.nspname = current_schema()
ORDER BY 1, 2
"""


def ident(name: str) -> str:
    """``name`` quoted as an SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


@attrs.frozen
class ForeignKey:
    child: str
    parent: str
    child_cols: tuple[str, ...]
    parent_cols: tuple[str, ...]


@attrs.frozen
class Step:
    """One DELETE of the erase: ``table``'s rows of the chat (``via`` None), or those pointing
    by ``via`` at the chat's rows of its parent."""

    table: str
    via: ForeignKey | None = None

    def sql(self) -> str:
        if self.via is None:
            return f"DELETE FROM {ident(self.table)} WHERE chat_id = $1"
        fk = self.via
        cols = ", ".join(ident(c) for c in fk.child_cols)
        pcols = ", ".join(ident(c) for c in fk.parent_cols)
        return (
            f"DELETE FROM {ident(self.table)} WHERE ({cols}) IN "
            f"(SELECT {pcols} FROM {ident(fk.parent)} WHERE chat_id = $1)"
        )


def erase_order(tables: list[str], keys: list[ForeignKey]) -> list[Step]:
    """The DELETEs, in order (pure): every table with ``chat_id``, each after the tables that
    reference it (a foreign key's child before its parent), :data:`FIRST` as early and
    :data:`LAST` as late as the keys allow; before a parent, the rows of a table without
    ``chat_id`` that point at it."""
    chat = set(tables)
    children: dict[str, set[str]] = {t: set() for t in tables}
    for fk in keys:
        if fk.parent in chat and fk.child in chat and fk.child != fk.parent:
            children[fk.parent].add(fk.child)

    def rank(t: str) -> tuple[int, int, str]:
        group = 0 if t in FIRST else 2 if t in LAST else 1
        return group, FIRST.index(t) if t in FIRST else 0, t

    steps: list[Step] = []
    done: set[str] = set()
    while len(done) < len(tables):
        ready = [t for t in tables if t not in done and children[t] <= done]
        if not ready:  # a cycle of keys: the rest in rank order (a cascade resolves it)
            ready = [t for t in tables if t not in done]
        table = min(ready, key=rank)
        for fk in keys:
            if fk.parent == table and fk.child not in chat:
                steps.append(Step(fk.child, fk))
        steps.append(Step(table))
        done.add(table)
    return steps


async def chat_tables(db: Queries) -> list[str]:
    """Every table of the schema with a ``chat_id`` column, from the catalogue."""
    return [str(r["t"]) for r in await db.fetch(_CHAT_TABLES)]


async def foreign_keys(db: Queries) -> list[ForeignKey]:
    return [
        ForeignKey(
            str(r["child"]), str(r["parent"]), tuple(r["child_cols"]), tuple(r["parent_cols"])
        )
        for r in await db.fetch(_FOREIGN_KEYS)
    ]


async def erase_plan(db: Queries) -> list[Step]:
    """The erase's DELETEs for the schema as it is now."""
    return erase_order(await chat_tables(db), await foreign_keys(db))


async def count_chat_rows(db: Queries, chat_id: int) -> dict[str, int]:
    """Per table with ``chat_id``, how many rows the chat has there (only tables with some)."""
    found: dict[str, int] = {}
    for table in await chat_tables(db):
        n = int(
            await db.fetchval(f"SELECT count(*) FROM {ident(table)} WHERE chat_id = $1", chat_id)
        )
        if n:
            found[table] = n
    return found


@attrs.frozen
class Erased:
    """What an erase deleted: rows per table (only tables that had some), and whether the
    vault folder existed and was removed."""

    chat_id: int
    rows: Mapping[str, int]
    folder_removed: bool = False

    @property
    def total(self) -> int:
        return sum(self.rows.values())

    def get(self, table: str) -> int:
        return int(self.rows.get(table, 0))


#: run in the erase's transaction after the deletes (e.g. queue the reply saying it is done)
Then = Callable[[Connection, dict[str, int]], Awaitable[None]]
#: run in the erase's transaction first; False: erase nothing (e.g. the request expired)
Check = Callable[[Connection], Awaitable[bool]]


async def erase_rows(conn: Connection, chat_id: int) -> dict[str, int]:
    """Delete every row of ``chat_id`` (see the module docstring) on ``conn``, which must be
    in a transaction; rows deleted per table."""
    await conn.execute("SELECT pg_advisory_xact_lock($1)", compaction_lock_key(chat_id))
    deleted: dict[str, int] = {}
    for step in await erase_plan(conn):
        status = await conn.execute(step.sql(), chat_id)
        n = int(status.rsplit(" ", 1)[-1]) if status.startswith("DELETE") else 0
        if n:
            deleted[step.table] = deleted.get(step.table, 0) + n
    return deleted


async def erase_chat(
    db: Database,
    chat_id: int,
    *,
    folder: Path | None = None,
    check: Check | None = None,
    then: Then | None = None,
) -> Erased | None:
    """Erase ``chat_id`` in one transaction (``check`` first, ``then`` last, both in it), then
    remove its vault ``folder``; None when ``check`` said no (nothing changed)."""
    async with db.transaction() as conn:
        if check is not None and not await check(conn):
            return None
        deleted = await erase_rows(conn, chat_id)
        if then is not None:
            await then(conn, deleted)
    removed = remove_folder(folder) if folder is not None else False
    log.info(
        "chat.erased",
        chat_id=chat_id,
        rows=sum(deleted.values()),
        tables=len(deleted),
        folder=removed,
    )
    return Erased(chat_id, deleted, removed)


def remove_folder(folder: Path) -> bool:
    """Remove the vault ``folder`` and everything in it; False when there was none, or when it
    could not be removed (logged: the rows are erased already, the folder is the operator's)."""
    if not folder.exists() and not folder.is_symlink():
        return False
    try:
        if folder.is_symlink() or not folder.is_dir():
            folder.unlink()
        else:
            shutil.rmtree(folder)
    except OSError as exc:
        log.error("chat.erase_folder_failed", folder=str(folder), error=str(exc))
        return False
    return True
