"""The memory snapshot on a real PostgreSQL: export → import into a fresh database → export is
the same document (ids and export time aside); merging dedups; a bad file changes nothing and
names the JSON path of its first problem; every chat-scoped table is placed."""

from __future__ import annotations

import copy
import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from fakes.memory import MODEL, FakeEmbedder
from fakes.snapshot import fill_chat, normalized
from jsonschema import Draft202012Validator

from memory.errors import SnapshotError
from memory.export.document import build_snapshot, dump
from memory.export.importer import import_snapshot, parse
from memory.export.schema import ROW_KEYWORDS, check, shipped_schema, snapshot_schema
from memory.export.sections import LEFT_OUT, SECTIONS, VECTOR_TABLES
from runtime import db as dbmod

CHAT = 7001


@pytest.fixture
def fresh_url(pg_server: Any, migrated_template: str) -> Iterator[str]:
    """A second migrated database (the one a snapshot is restored into); opened in the test,
    under the asyncio loop the ``db`` fixture runs."""
    name = f"fresh_{secrets.token_hex(5)}"
    pg_server.psql(f'CREATE DATABASE "{name}" TEMPLATE "{migrated_template}";')
    try:
        yield pg_server.get_uri(name)
    finally:
        pg_server.psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE);')


async def snapshot(db: dbmod.Database, chat: int = CHAT, vectors: bool = True) -> dict[str, Any]:
    return await build_snapshot(
        db, chat, engram_version="test", embedding_model=MODEL, with_vectors=vectors
    )


async def counts(db: dbmod.Database) -> dict[str, int]:
    """Rows per table of every table the snapshot touches (any chat)."""
    tables = [s.table for s in SECTIONS] + list(VECTOR_TABLES) + ["chat_pattern_counts"]
    return {t: int(await db.fetchval(f"SELECT count(*) FROM {t}")) for t in tables}


def test_shipped_schema_is_the_generated_one() -> None:
    assert shipped_schema() == snapshot_schema()
    Draft202012Validator.check_schema(shipped_schema())


def _keywords(schema: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(schema, dict):
        for key, value in schema.items():
            found.add(key)
            if key == "properties":
                for sub in value.values():
                    found |= _keywords(sub)
            elif key == "items":
                found |= _keywords(value)
    return found


def test_the_fast_row_check_reads_every_keyword_the_rows_use() -> None:
    for row_schema in shipped_schema()["$defs"].values():
        assert _keywords(row_schema) <= ROW_KEYWORDS


ROW_CORRUPTIONS: list[tuple[str, int, str, Any]] = [
    ("patterns", 1, "confidence", "high"),
    ("patterns", 0, "confidence", 1.5),
    ("patterns", 2, "kind", "hobby"),
    ("patterns", 0, "first_seen", "yesterday"),
    ("patterns", 0, "strength", True),
    ("messages", 1, "tool_calls", {"any": "json"}),  # JSON columns take any value: fine
    ("messages", 0, "role", None),
    ("observations", 0, "chat_message_ids", [1, "2"]),
    ("journal_entries", 0, "tags", "walk"),
    ("daily_metrics", 0, "date", "1 March"),
    ("proactive_settings", 0, "quiet_start", 24),
    ("scheduled_jobs", 0, "payload", None),
    ("patterns", 0, "embedding", []),
    ("patterns", 0, "colour", "red"),
    ("aliases", 0, "id", 1.0),  # jsonschema: an integral float is an integer
]


@pytest.mark.parametrize(("section", "index", "column", "value"), ROW_CORRUPTIONS)
async def test_the_fast_row_check_agrees_with_jsonschema(
    db: dbmod.Database, section: str, index: int, column: str, value: Any
) -> None:
    await fill_chat(db, CHAT)
    doc = await snapshot(db, vectors=False)
    doc[section][index][column] = value
    error = next(Draft202012Validator(shipped_schema()).iter_errors(doc), None)
    if error is None:
        check(doc)  # neither finds a problem
        return
    with pytest.raises(SnapshotError) as caught:
        check(doc)
    assert (caught.value.path, caught.value.problem) == (error.json_path, error.message)
    row = doc[section][index]
    del row[next(k for k in row if k != column)]  # and a required key missing
    error = next(Draft202012Validator(shipped_schema()).iter_errors(doc))
    with pytest.raises(SnapshotError) as caught:
        check(doc)
    assert caught.value.path == error.json_path


async def test_every_chat_table_is_placed(db: dbmod.Database) -> None:
    rows = await db.fetch(
        "SELECT table_name FROM information_schema.columns WHERE column_name = 'chat_id' "
        "AND table_schema = current_schema()"
    )
    chat_tables = {r["table_name"] for r in rows}
    placed = {s.table for s in SECTIONS} | set(VECTOR_TABLES) | set(LEFT_OUT)
    assert chat_tables - placed == set(), "a chat-scoped table neither exported nor left out"
    assert {s.table for s in SECTIONS} <= chat_tables


async def test_round_trip_into_a_fresh_database(db: dbmod.Database, fresh_url: str) -> None:
    async with dbmod.open_database(fresh_url, max_size=2) as fresh_db:
        await round_trip(db, fresh_db)


async def round_trip(db: dbmod.Database, fresh_db: dbmod.Database) -> None:
    await fill_chat(db, CHAT)
    await fill_chat(db, CHAT + 1, tag=" (other chat)")
    first = await snapshot(db)
    Draft202012Validator(shipped_schema()).validate(first)
    assert all(first[s.name] for s in SECTIONS), "the filled chat has rows in every section"
    assert all("(other chat)" not in json.dumps(first[s.name]) for s in SECTIONS)
    assert first["vectors"] == {"model": MODEL, "dims": 64}

    report = await import_snapshot(fresh_db, parse(dump(first)))  # no embedder: as they are
    assert report.vectors_stored == 5 and report.embedded == 0
    second = await snapshot(fresh_db)
    assert normalized(second) == normalized(first)
    # the ids are the new database's own, and forgetting's audit row kept a fresh pattern id
    ids = {p["id"] for p in second["patterns"]}
    forgotten = next(a for a in second["audit"] if a["action"] == "forget")
    assert forgotten["pattern_id"] not in ids
    count = await fresh_db.fetchval(
        "SELECT n FROM chat_pattern_counts WHERE chat_id = $1 AND status = 'active'", CHAT
    )
    assert count == 2


async def test_import_twice_adds_nothing_and_merges_by_hash(db: dbmod.Database) -> None:
    await fill_chat(db, CHAT)
    doc = await snapshot(db)
    before = await counts(db)
    report = await import_snapshot(db, copy.deepcopy(doc))
    assert sum(report.added.values()) == 0
    assert await counts(db) == before

    # into another chat that already remembers one of the patterns (other case and punctuation)
    other = CHAT + 5
    await db.execute(
        "INSERT INTO patterns (chat_id, content, canonical_hash, first_seen, last_seen) "
        "SELECT $1, 'LIKES TEA.', canonical_hash, now(), now() FROM patterns "
        "WHERE chat_id = $2 AND content = 'Likes tea'",
        other,
        CHAT,
    )
    report = await import_snapshot(db, copy.deepcopy(doc), chat_id=other)
    assert report.kept["patterns"] == 1 and report.added["patterns"] == 2
    rows = await db.fetch("SELECT content FROM patterns WHERE chat_id = $1 ORDER BY id", other)
    assert [r["content"] for r in rows] == [
        "LIKES TEA.",
        "Runs 5 km most mornings",
        "Team offsite in Lisbon",
    ]
    # the superseded pattern's audit row now points at the pattern the chat already had
    audit = await db.fetchrow(
        "SELECT a.pattern_id, p.content FROM pattern_audit a "
        "JOIN patterns p ON p.id = a.pattern_id "
        "WHERE a.chat_id = $1 AND a.action = 'supersede'",
        other,
    )
    assert audit is not None and audit["content"] == "LIKES TEA."


async def test_vectors_absent_or_of_another_model_are_embedded_again(
    db: dbmod.Database, fresh_url: str
) -> None:
    async with dbmod.open_database(fresh_url, max_size=2) as fresh_db:
        await vectors_again(db, fresh_db)


async def vectors_again(db: dbmod.Database, fresh_db: dbmod.Database) -> None:
    await fill_chat(db, CHAT)
    doc = await snapshot(db, vectors=False)
    assert doc["vectors"] is None and "embedding" not in doc["patterns"][0]
    same = FakeEmbedder()
    report = await import_snapshot(fresh_db, doc, chat_id=CHAT + 1, embedder=same)
    assert report.embedded == 6 and report.vectors_stored == 0
    assert sorted(t for texts, _, _ in same.calls for t in texts)[:2] == [
        "A long walk today",
        "Likes tea",
    ]
    # with the file's vectors: only the pattern that had none is embedded
    same.calls.clear()
    report = await import_snapshot(fresh_db, await snapshot(db), chat_id=CHAT + 2, embedder=same)
    assert report.vectors_stored == 5 and report.embedded == 1
    assert [texts for texts, _, _ in same.calls] == [["Likes tea"]]

    embedder = FakeEmbedder(model="fake-other-64")
    with_vectors = await snapshot(db)
    report = await import_snapshot(fresh_db, with_vectors, embedder=embedder)
    assert report.vectors_stored == 0 and report.vectors_other_model == 5
    # every imported pattern, alias, episode and entry: 3 + 1 + 1 + 1
    assert report.embedded == 6 and report.embedding_error is None
    models = await fresh_db.fetch(
        "SELECT DISTINCT model FROM pattern_embeddings WHERE chat_id = $1", CHAT
    )
    assert [r["model"] for r in models] == ["fake-other-64"]


def _truncated(doc: dict[str, Any]) -> bytes:
    data = dump(doc)
    return data[: len(data) // 2]


def _wrong_version(doc: dict[str, Any]) -> bytes:
    return json.dumps({**doc, "schema_version": 2}).encode()


def _wrong_type(doc: dict[str, Any]) -> bytes:
    bad = copy.deepcopy(doc)
    bad["patterns"][1]["confidence"] = "high"
    return json.dumps(bad).encode()


def _duplicated(doc: dict[str, Any]) -> bytes:
    bad = copy.deepcopy(doc)
    bad["patterns"] = [bad["patterns"][0]] * 10_000
    return json.dumps(bad).encode()


def _dangling(doc: dict[str, Any]) -> bytes:
    bad = copy.deepcopy(doc)
    bad["relations"][0]["to_pattern_id"] = 10**12
    return json.dumps(bad).encode()


def _no_date(doc: dict[str, Any]) -> bytes:
    bad = copy.deepcopy(doc)
    bad["daily_metrics"][0]["date"] = "2026-02-30"
    return json.dumps(bad).encode()


def _nul(doc: dict[str, Any]) -> bytes:
    bad = copy.deepcopy(doc)
    bad["messages"][2]["tool_calls"] = {"note": "a\u0000b"}
    return json.dumps(bad).encode()


def _too_big(doc: dict[str, Any]) -> bytes:
    bad = copy.deepcopy(doc)
    bad["patterns"][0]["times_seen"] = 2**31
    return json.dumps(bad).encode()


def _check_the_schema_cannot_say(doc: dict[str, Any]) -> bytes:
    bad = copy.deepcopy(doc)
    bad["patterns"][1]["occurs_on"] = None  # an event without its day
    return json.dumps(bad).encode()


@pytest.mark.parametrize(
    ("corrupt", "path", "words"),
    [
        (_nul, "$.messages[2].tool_calls", "NUL character"),
        (_too_big, "$.patterns[0].times_seen", "greater than the maximum"),
        (_check_the_schema_cannot_say, "$.patterns", "the database refused these rows"),
        (_truncated, "$", "truncated"),
        (_wrong_version, "$.schema_version", "schema version 2"),
        (_wrong_type, "$.patterns[1].confidence", "'high' is not of type"),
        (_duplicated, "$.patterns[1].id", "duplicate id"),
        (_dangling, "$.relations[0].to_pattern_id", "not in $.patterns"),
        (_no_date, "$.daily_metrics[0].date", "day is out of range"),
    ],
)
async def test_a_bad_file_changes_nothing(
    db: dbmod.Database, corrupt: Any, path: str, words: str
) -> None:
    await fill_chat(db, CHAT)
    doc = await snapshot(db)
    await fill_chat(db, CHAT + 1, tag=" b")  # a chat a merge would add to
    before = await counts(db)
    with pytest.raises(SnapshotError) as caught:
        await import_snapshot(db, parse(corrupt(doc)), chat_id=CHAT + 2)
    assert caught.value.path == path
    assert words in caught.value.problem
    assert str(caught.value).startswith(path + ": ")
    assert await counts(db) == before


async def test_duplicates_inside_the_file_are_kept_once(db: dbmod.Database) -> None:
    await fill_chat(db, CHAT)
    doc = await snapshot(db, vectors=False)
    twin = {**doc["patterns"][0], "id": 10**9, "content": "RUNS 5 km most mornings!"}
    doc["patterns"].append(twin)  # the same memory under another id: one pattern
    doc["observations"].append({**doc["observations"][0], "id": 10**9, "pattern_id": 10**9})
    doc["daily_metrics"].append(dict(doc["daily_metrics"][0]))  # a day twice: once
    report = await import_snapshot(db, doc, chat_id=CHAT + 9)
    assert report.added["patterns"] == 3 and report.kept["patterns"] == 1
    assert report.added["daily_metrics"] == 1 and report.kept["daily_metrics"] == 1
    # the twin's observation is the same evidence at the same time on the same pattern: once
    assert report.added["observations"] == 1
