"""A chat with a row in every table a snapshot holds (:func:`fill_chat`), written with SQL as the
product's writers leave them, plus its vectors for the fake embedding model; and
:func:`normalized`, a snapshot with its ids replaced by positions (the round trip's equality)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from fakes.memory import FakeEmbedder
from memory.embeddings.store import store_vectors
from memory.export.sections import INTS, SECTIONS
from memory.patterns.canonical import canonical_hash
from runtime.db import Database

T0 = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)


async def _id(db: Database, sql: str, *args: Any) -> int:
    return int(await db.fetchval(sql, *args))


async def fill_chat(db: Database, chat_id: int, *, tag: str = "") -> dict[str, int]:
    """One or more rows of ``chat_id`` in every snapshot section (``tag`` varies the texts);
    the ids by name."""
    t = T0
    ids: dict[str, int] = {}
    ins_msg = (
        "INSERT INTO chat_messages (chat_id, external_message_id, role, content, tool_calls, "
        "tool_call_id, tool_name, compacted_at, created_at, source, routine_name, summary) "
        "VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9, $10, $11, $12) RETURNING id"
    )
    ids["m1"] = await _id(
        db, ins_msg, chat_id, "update:1", "user", f"I ran 5 km today{tag}", None, None, None,
        t, t, "conversation", None, None,
    )  # fmt: skip
    ids["m2"] = await _id(
        db, ins_msg, chat_id, None, "assistant", "Well done!",
        json.dumps([{"id": "tu1", "name": "search_journal", "input": {"q": "run"}}]),
        None, None, None, t + timedelta(seconds=5), "conversation", None, None,
    )  # fmt: skip
    ids["m3"] = await _id(
        db, ins_msg, chat_id, None, "tool_result", '{"entries": []}', None, "tu1",
        "search_journal", None, t + timedelta(seconds=6), "conversation", None, None,
    )  # fmt: skip
    ids["m4"] = await _id(
        db, ins_msg, chat_id, None, "assistant", "Good evening — how did the day go?", None,
        None, None, None, t + timedelta(hours=12), "routine", "nightly-reflection",
        "Asked about the day.",
    )  # fmt: skip
    ins_pat = (
        "INSERT INTO patterns (chat_id, content, kind, confidence, strength, times_seen, status, "
        "status_reason, source, temporal, canonical_hash, first_seen, last_seen, occurs_on, "
        "occurs_at, is_core_tenet, pinned_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, "
        "$10::jsonb, $11, $12, $13, $14, $15, $16, $17) RETURNING id"
    )
    contents = [f"Runs 5 km most mornings{tag}", f"Team offsite in Lisbon{tag}", f"Likes tea{tag}"]
    ids["p1"] = await _id(
        db, ins_pat, chat_id, contents[0], "behavior", 0.8, 1.5, 3, "active", None,
        "compaction", json.dumps({"cadence": "daily"}), canonical_hash(contents[0]), t, t,
        None, None, True, t,
    )  # fmt: skip
    ids["p2"] = await _id(
        db, ins_pat, chat_id, contents[1], "event", 0.9, 1.0, 1, "active", None, "explicit",
        None, canonical_hash(contents[1]), t, t, datetime(2026, 3, 15).date(),
        datetime(2026, 1, 1, 9, 0).time(), False, None,
    )  # fmt: skip
    ids["p3"] = await _id(
        db, ins_pat, chat_id, contents[2], "preference", 0.4, 0.7, 1, "superseded",
        "replaced", "compaction", None, canonical_hash(contents[2]), t, t, None, None, False,
        None,
    )  # fmt: skip
    await db.execute(
        "INSERT INTO pattern_observations (pattern_id, chat_id, chat_message_ids, evidence, "
        "evidence_roles, signal, confidence, observed_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        ids["p1"], chat_id, [ids["m1"], ids["m2"]], "I ran 5 km today", ["user"], "explicit",
        0.8, t,
    )  # fmt: skip
    await db.execute(
        "INSERT INTO pattern_relations (chat_id, from_pattern_id, to_pattern_id, relation) "
        "VALUES ($1, $2, $3, 'supports')",
        chat_id,
        ids["p1"],
        ids["p2"],
    )
    ids["a1"] = await _id(
        db,
        "INSERT INTO pattern_aliases (pattern_id, chat_id, content) VALUES ($1, $2, $3) "
        "RETURNING id",
        ids["p1"],
        chat_id,
        f"jogs every morning{tag}",
    )
    await db.execute(
        "INSERT INTO pattern_entries (pattern_id, entry_uuid, chat_id, source, confidence) "
        "VALUES ($1, $2, $3, 'compaction', 0.7)",
        ids["p1"],
        "E1",
        chat_id,
    )
    ins_audit = (
        "INSERT INTO pattern_audit (chat_id, pattern_id, action, old_status, new_status, reason, "
        "actor, other_pattern_id, at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
    )
    await db.execute(
        ins_audit, chat_id, ids["p3"], "supersede", "active", "superseded", "newer", "model",
        ids["p1"], t,
    )  # fmt: skip
    forgotten = await _id(db, "SELECT nextval(pg_get_serial_sequence('patterns', 'id'))")
    await db.execute(
        ins_audit, chat_id, forgotten, "forget", "active", "deprecated", "asked to", "person",
        None, t + timedelta(minutes=1),
    )  # fmt: skip
    ids["e1"] = await _id(
        db,
        "INSERT INTO episodes (chat_id, summary, started_at, ended_at, message_count, "
        "first_message_id, last_message_id) VALUES ($1, $2, $3, $4, 3, $5, $6) RETURNING id",
        chat_id,
        f"Talked about running{tag}",
        t,
        t + timedelta(seconds=6),
        ids["m1"],
        ids["m3"],
    )
    ids["j1"] = await _id(
        db,
        "INSERT INTO entries (chat_id, uuid, created_at, modified_at, timezone, text, tags, city, "
        "country, place_name, latitude, longitude, location, weather, photo_count, word_count) "
        "VALUES ($1, 'E1', $2, $3, 'Europe/Lisbon', $4, $5, 'Lisbon', 'Portugal', 'Alfama', "
        "38.71, -9.13, $6::jsonb, $7::jsonb, 1, 4) RETURNING id",
        chat_id,
        t - timedelta(days=2),
        t - timedelta(days=1),
        f"A long walk today{tag}",
        ["walk", "lisbon"],
        json.dumps({"localityName": "Lisbon", "country": "Portugal", "latitude": 38.71}),
        json.dumps({"temperatureCelsius": 17.5, "conditionsDescription": "Sunny"}),
    )
    await db.execute(
        "INSERT INTO daily_metrics (chat_id, date, weight_kg) VALUES ($1, '2026-03-01', 71.5)",
        chat_id,
    )
    await db.execute(
        "INSERT INTO chat_turn_stats (chat_id, day, turns, retrieval_degraded) "
        "VALUES ($1, '2026-03-01', 4, 1)",
        chat_id,
    )
    await db.execute(
        "INSERT INTO chat_proactive (chat_id, active, quiet_start, quiet_end, digest) "
        "VALUES ($1, true, 22, 8, 'daily')",
        chat_id,
    )
    ids["job"] = await _id(
        db,
        "INSERT INTO cron_jobs (chat_id, name, kind, schedule, timezone, payload, next_run_at) "
        "VALUES ($1, 'nightly-reflection', 'routine', '0 21 * * *', 'Europe/Lisbon', "
        '\'{"style": "short"}\'::jsonb, $2) RETURNING id',
        chat_id,
        t + timedelta(days=1),
    )
    await db.execute(
        "INSERT INTO proactive_runs (chat_id, job_id, name, due_at, outcome, reason, model_calls, "
        "at) VALUES ($1, $2, 'nightly-reflection', $3, 'sent', NULL, 1, $3)",
        chat_id,
        ids["job"],
        t + timedelta(hours=12),
    )
    embedder = FakeEmbedder()
    for table, owner_col, key, text in (
        ("pattern_embeddings", "pattern_id", "p1", contents[0]),
        ("pattern_embeddings", "pattern_id", "p2", contents[1]),
        ("alias_embeddings", "alias_id", "a1", "jogs every morning"),
        ("episode_embeddings", "episode_id", "e1", "Talked about running"),
        ("entry_embeddings", "entry_id", "j1", "A long walk today"),
    ):
        [vec] = await embedder.embed([text], purpose="test")
        await store_vectors(db, table, owner_col, [(ids[key], vec, chat_id)], embedder.model)
    return ids


def normalized(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` without its export time, each id replaced by its row's position in its section
    (references likewise; an id no row has by the order it first appears)."""
    out = {k: v for k, v in doc.items() if k != "exported_at"}
    positions = {
        s.name: {row["id"]: i for i, row in enumerate(doc[s.name])} for s in SECTIONS if s.has_id
    }
    unknown: dict[int, str] = {}
    for section in SECTIONS:
        rows = []
        for row in doc[section.name]:
            row = dict(row)
            if section.has_id:
                row["id"] = positions[section.name][row["id"]]
            for col in section.cols:
                if col.ref is None or row[col.name] is None:
                    continue
                where = positions[col.ref]

                def pos(v: int, where: dict[int, int] = where) -> Any:
                    return where[v] if v in where else unknown.setdefault(v, f"?{len(unknown)}")

                row[col.name] = (
                    [pos(v) for v in row[col.name]] if col.kind == INTS else pos(row[col.name])
                )
            rows.append(row)
        out[section.name] = rows
    return out
