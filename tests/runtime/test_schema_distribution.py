"""The schema is ready to be distributed by chat (issue 26, item 5), read from the catalogue
of the migrated database: every table is a reference table (:data:`REFERENCE_TABLES`) or a
chat-scoped one with ``chat_id`` NOT NULL in its primary key, every unique index and every
foreign key to another chat-scoped table; reference tables point at no chat-scoped table; no
trigger on a chat-scoped table but the one that only rewrites its own row."""

from __future__ import annotations

from runtime.db import Database
from runtime.schema_layout import DISTRIBUTION_COLUMN, REFERENCE_TABLES, distributed_tables

#: triggers allowed on chat-scoped tables: BEFORE ROW, touching only NEW (safe per shard)
ROW_LOCAL_TRIGGERS = {("entries", "entries_known_timezone")}

_TABLES = """
SELECT c.relname AS t, a.attnotnull AS not_null, a.attnum AS chat,
       EXISTS (SELECT 1 FROM pg_index x WHERE x.indrelid = c.oid AND x.indisprimary) AS has_pk
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = $1 AND NOT a.attisdropped
WHERE c.relkind IN ('r', 'p')
"""

_UNIQUE = """
SELECT c.relname AS t, i.relname AS index, pg_get_indexdef(i.oid) AS def
FROM pg_index x
JOIN pg_class c ON c.oid = x.indrelid
JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
JOIN pg_class i ON i.oid = x.indexrelid
LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = $1
WHERE x.indisunique AND c.relname = ANY($2::text[])
  AND (a.attnum IS NULL OR NOT a.attnum = ANY(x.indkey::int2[]))
ORDER BY 1, 2
"""

_FOREIGN = """
SELECT f.conrelid::regclass::text AS t, f.confrelid::regclass::text AS parent,
       f.conname, pg_get_constraintdef(f.oid) AS def,
       EXISTS (SELECT 1 FROM unnest(f.conkey, f.confkey) AS k(child, par)
               JOIN pg_attribute ca ON ca.attrelid = f.conrelid AND ca.attnum = k.child
               JOIN pg_attribute pa ON pa.attrelid = f.confrelid AND pa.attnum = k.par
               WHERE ca.attname = $1 AND pa.attname = $1) AS by_chat
FROM pg_constraint f
JOIN pg_namespace n ON n.oid = f.connamespace AND n.nspname = 'public'
WHERE f.contype = 'f'
ORDER BY 1, 3
"""

_TRIGGERS = """
SELECT c.relname AS t, g.tgname AS name
FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
WHERE NOT g.tgisinternal
"""


async def layout(db: Database) -> tuple[list[str], list[str]]:
    """(chat-scoped tables, problems): what the catalogue says against the layout."""
    problems: list[str] = []
    rows = await db.fetch(_TABLES, DISTRIBUTION_COLUMN)
    tables = {str(r["t"]) for r in rows}
    scoped = distributed_tables(tables)
    for r in rows:
        if r["t"] in scoped and (r["chat"] is None or not r["not_null"]):
            problems.append(f"{r['t']}: not a reference table and no chat_id NOT NULL")
        if not r["has_pk"]:  # a shard move by logical replication needs a replica identity
            problems.append(f"{r['t']}: no primary key")
    for missing in sorted(REFERENCE_TABLES - tables):
        problems.append(f"{missing}: listed as a reference table, not in the database")
    for r in await db.fetch(_UNIQUE, DISTRIBUTION_COLUMN, scoped):
        problems.append(f"{r['t']}: unique index {r['index']} without chat_id: {r['def']}")
    for r in await db.fetch(_FOREIGN, DISTRIBUTION_COLUMN):
        child_scoped, parent_scoped = r["t"] in scoped, r["parent"] in scoped
        if child_scoped and parent_scoped and not r["by_chat"]:
            problems.append(f"{r['t']}: foreign key {r['conname']} without chat_id: {r['def']}")
        if not child_scoped and parent_scoped:
            problems.append(f"{r['t']}: reference table with a foreign key to {r['parent']}")
    for r in await db.fetch(_TRIGGERS):
        if r["t"] in scoped and (r["t"], r["name"]) not in ROW_LOCAL_TRIGGERS:
            problems.append(f"{r['t']}: trigger {r['name']} on a chat-scoped table")
    return scoped, problems


async def test_every_chat_scoped_key_includes_chat_id(db: Database) -> None:
    scoped, problems = await layout(db)
    assert problems == [], "\n".join(problems)
    # the check looked at the tables that matter (a typo in the query would see none)
    assert {"patterns", "inbox", "outbox", "chat_messages", "entries", "api_usage"} <= set(scoped)
    assert not set(scoped) & REFERENCE_TABLES


async def test_the_check_finds_a_key_without_chat_id(db: Database) -> None:
    """A new chat-scoped table keyed by id alone, an unscoped table, a reference table pointing
    at a chat's rows and a cross-chat foreign key are each reported."""
    await db.execute(
        "CREATE TABLE t_notes (id BIGSERIAL PRIMARY KEY, chat_id BIGINT NOT NULL,"
        " pattern_id BIGINT, UNIQUE (pattern_id));"
        "CREATE TABLE t_loose (k TEXT PRIMARY KEY);"
        "ALTER TABLE bot_state ADD COLUMN chat_id BIGINT, ADD COLUMN pid BIGINT,"
        " ADD FOREIGN KEY (chat_id, pid) REFERENCES patterns (chat_id, id);"
        "ALTER TABLE t_notes ADD CONSTRAINT t_notes_alias FOREIGN KEY (chat_id, pattern_id)"
        " REFERENCES pattern_aliases (id, chat_id)"
    )
    _, problems = await layout(db)
    text = "\n".join(problems)
    assert "t_notes: unique index t_notes_pkey without chat_id" in text
    assert "t_notes: unique index t_notes_pattern_id_key without chat_id" in text
    assert "t_loose: not a reference table" in text
    assert "bot_state: reference table with a foreign key to patterns" in text
    assert "t_notes: foreign key t_notes_alias without chat_id" in text
    assert "t_loose: unique index t_loose_pkey without chat_id" in text
    assert len(problems) == 6, text
    await db.execute("CREATE TABLE t_keyless (chat_id BIGINT NOT NULL)")
    _, more = await layout(db)
    assert [p for p in more if p not in problems] == ["t_keyless: no primary key"]


async def test_pattern_counts_need_no_trigger(db: Database) -> None:
    """chat_pattern_counts is what a count says, whatever wrote the patterns (no trigger)."""
    await db.execute(
        "INSERT INTO patterns (chat_id, content, canonical_hash, first_seen, last_seen, status) "
        "SELECT 7, 'p' || g, 'h' || g, now(), now(), "
        "CASE WHEN g % 4 = 0 THEN 'merged' ELSE 'active' END FROM generate_series(1, 20) g"
    )
    await db.execute("UPDATE patterns SET status = 'disputed' WHERE content = 'p1'")
    rows = await db.fetch("SELECT status, n FROM chat_pattern_counts WHERE chat_id = 7")
    assert {r["status"]: r["n"] for r in rows} == {"active": 14, "merged": 5, "disputed": 1}
    triggers = "SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'pattern_counts%'"
    assert await db.fetchval(triggers) == 0
