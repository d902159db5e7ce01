"""The SQL the code sends, recorded from the test side, and the one-chat rule it must keep.

:class:`SqlRecorder` wraps the query methods of :class:`runtime.db.Database` and
:class:`runtime.db.Connection` (monkeypatched: runtime/db.py is not changed) and keeps every
statement sent from the packages (runtime, memory, actors), with where it was sent from; the
tests' own statements (helpers that read state) are left out.

The rule (issue 26: every table with a ``chat_id`` column is distributed by it on Citus, so a
query that touches chat data must reach one shard): a DML statement that mentions a chat-scoped
table (after FROM, JOIN, UPDATE, INTO or USING) must pin ``chat_id`` to one value — the text
holds ``chat_id = $n`` (any qualifier, any cast, either side) — or, for an INSERT/COPY of rows,
name ``chat_id`` among the columns it writes (Citus routes each row by its value) and read no
chat-scoped table without the pin. ``chat_id = ANY(...)`` is several chats, not one, and so is
``$n IS NULL OR chat_id = $n`` (every chat when NULL). A deliberate cross-chat statement (a
sweep, an operator overview) carries the marker comment ``/* all chats: <reason> */`` and is
listed, not failed. Statements other than SELECT, INSERT, UPDATE, DELETE and WITH (DDL, SET,
LISTEN) are not checked; nor are migrations. The rule is textual: one pin anywhere in the
statement passes it (a CTE that writes another table by id alone would slip through; the ones
found were pinned too).

The shared conftest records every run (``SESSION``) and runs :data:`ONE_CHAT_JUDGE` last;
``ENGRAM_SQL_RECORD=/tmp/sql.txt pytest -p sql_recorder tests/...`` also appends the statements
to that file."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest

from runtime import db as dbmod

ROOT = Path(dbmod.__file__).resolve().parent.parent
PACKAGES = tuple(str(ROOT / p) + os.sep for p in ("runtime", "memory", "actors"))
SKIPPED_ORIGINS = (str(ROOT / "runtime" / "db.py"), str(ROOT / "runtime" / "migrate.py"))
METHODS = frozenset({"execute", "executemany", "fetch", "fetchrow", "fetchval"})
MARKER = re.compile(r"/\*\s*all chats:\s*([^*]+?)\s*\*/", re.IGNORECASE)
_COMMENT = re.compile(r"/\*.*?\*/|--[^\n]*", re.DOTALL)
_STRING = re.compile(r"'(?:[^']|'')*'")
_TABLE = re.compile(
    r"\b(?:FROM|JOIN|UPDATE|INTO|USING)\s+(?:ONLY\s+)?([A-Za-z_][A-Za-z0-9_]*)", re.I
)
_PINNED = re.compile(
    r"(?:\bchat_id\s*=\s*\(?\s*\$\d+)|(?:\$\d+(?:::\w+)?\s*=\s*(?:\w+\.)?chat_id\b)", re.I
)
#: "one chat, or every chat when $n is NULL": not a pin (the NULL case reads every shard)
_OPTIONAL = re.compile(r"\$\d+(?:::\w+)?\s+IS\s+NULL\s+OR\s+(?:\w+\.)?chat_id\s*=\s*\$\d+", re.I)
_INSERT = re.compile(r"^\s*INSERT\s+INTO\s+(\w+)(?:\s+AS\s+\w+)?\s*\(([^)]*)\)", re.I)
_DML = re.compile(r"^\s*\(?\s*(SELECT|INSERT|UPDATE|DELETE|WITH|COPY)\b", re.I)

CHAT_TABLES_SQL = """
SELECT DISTINCT c.table_name::text AS t
FROM information_schema.columns c
JOIN information_schema.tables t
  ON t.table_schema = c.table_schema AND t.table_name = c.table_name
WHERE c.table_schema = 'public' AND c.column_name = 'chat_id' AND t.table_type = 'BASE TABLE'
"""


def normalize(query: str) -> str:
    """One line, single spaces: the key a statement is counted by."""
    return " ".join(query.split())


@attrs.define
class Statement:
    sql: str
    origins: set[str] = attrs.field(factory=set)
    calls: int = 0


@attrs.define
class SqlRecorder:
    """Every distinct statement sent from the packages while installed."""

    statements: dict[str, Statement] = attrs.field(factory=dict)

    def record(self, sql: str) -> None:
        origin = _origin()
        if origin is None:
            return
        key = normalize(sql)
        entry = self.statements.setdefault(key, Statement(key))
        entry.origins.add(origin)
        entry.calls += 1

    @contextmanager
    def installed(self) -> Iterator[SqlRecorder]:
        with pytest.MonkeyPatch.context() as patch:
            for cls in (dbmod.Database, dbmod.Connection):
                patch.setattr(cls, "_call", self._wrap(cls._call))
            yield self

    def _wrap(self, call: Any) -> Any:
        recorder = self

        async def _call(conn: Any, method: str, *args: Any, **kwargs: Any) -> Any:
            if method in METHODS and args:
                recorder.record(str(args[0]))
            elif method == "copy_records_to_table":
                columns = ", ".join(kwargs.get("columns", ()))
                recorder.record(f"COPY {args[0]} ({columns})")
            return await call(conn, method, *args, **kwargs)

        return _call


def _origin() -> str | None:
    """``file:line`` of the package code that sent the statement; None for a test's own."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(SKIPPED_ORIGINS[0]) or name == __file__:
            frame = frame.f_back  # type: ignore[assignment]
            continue
        if name == SKIPPED_ORIGINS[1] or not name.startswith(PACKAGES):
            return None
        return f"{os.path.relpath(name, ROOT)}:{frame.f_lineno}"
    return None


async def chat_tables(db: dbmod.Queries) -> frozenset[str]:
    """The chat-scoped tables: every table of the public schema with a ``chat_id`` column."""
    return frozenset(str(r["t"]) for r in await db.fetch(CHAT_TABLES_SQL))


def touched(sql: str, tables: frozenset[str]) -> set[str]:
    """The chat-scoped tables ``sql`` mentions (comments and string literals ignored)."""
    bare = _STRING.sub("''", _COMMENT.sub(" ", sql))
    return {m.group(1).lower() for m in _TABLE.finditer(bare)} & tables


def verdict(sql: str, tables: frozenset[str]) -> str:
    """``ok`` (not chat data, or one chat), ``marked`` (a declared cross-chat statement) or
    ``offends``."""
    bare = _STRING.sub("''", _COMMENT.sub(" ", sql))
    if not _DML.match(bare):
        return "ok"
    hit = touched(sql, tables)
    if not hit:
        return "ok"
    if MARKER.search(sql):
        return "marked"
    if _PINNED.search(_OPTIONAL.sub(" ", bare)):
        return "ok"
    insert = _INSERT.match(bare) or re.match(r"^\s*COPY\s+(\w+)\s*\(([^)]*)\)", bare, re.I)
    if insert is not None:
        columns = {c.strip().lower() for c in insert.group(2).split(",")}
        reads = touched(bare[insert.end() :], tables)
        if "chat_id" in columns and not reads:
            return "ok"
    return "offends"


def judge(statements: Sequence[str], tables: frozenset[str]) -> dict[str, list[str]]:
    """The statements by verdict."""
    out: dict[str, list[str]] = {"ok": [], "marked": [], "offends": []}
    for sql in statements:
        out[verdict(sql, tables)].append(sql)
    return out


# --- as a pytest plugin (-p sql_recorder), over a whole run ---------------------------------------

#: the whole run's recorder (installed by the session fixture ``sql_seen`` of tests/conftest.py)
SESSION = SqlRecorder()
#: the test that judges it, run last
ONE_CHAT_JUDGE = "test_every_statement_this_run_sent_is_one_chat"


def pytest_unconfigure(config: pytest.Config) -> None:
    """``ENGRAM_SQL_RECORD=file``: the run's statements appended to ``file`` (to read them)."""
    path = os.environ.get("ENGRAM_SQL_RECORD")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            for st in SESSION.statements.values():
                out.write(f"{' '.join(sorted(st.origins))}\t{st.sql}\n")
