"""Every table with a ``chat_id`` column filled for one chat, as the product writes its rows (a
conversation, compaction, the journal, routines, usage, the queues, pairing): for the erase
tests (:mod:`memory.erase`)."""

from __future__ import annotations

from actors.chat.callbacks import keyboard
from actors.queues import inbox, outbox
from actors.telegram.access import allow_chat
from memory.patterns.canonical import canonical_hash
from runtime.db import Database

VEC = [0.1, 0.2, 0.3]


async def message(db: Database, chat: int, update_id: int) -> int:
    """A text update of ``chat`` in the inbox; its row id."""
    payload = {"update_id": update_id, "message": {"message_id": 1, "chat": {"id": chat}}}
    row = await inbox.insert_update(db, f"update:{update_id}", update_id, chat, "message", payload)
    assert row is not None
    return row


async def fill(db: Database, chat: int) -> None:
    """At least one row of ``chat`` in every table with ``chat_id`` (as the product writes
    them: a conversation, compaction, the journal, routines, usage, the queues, pairing)."""
    x = db.execute
    inbox_id = await message(db, chat, chat)
    await outbox.enqueue_reply(db, chat, "hello", inbox_ids=[inbox_id])
    await allow_chat(db, chat, "pairing", 7)
    await keyboard(db, chat, [[("Keep", {"name": "forget_keep"})]])
    await x(
        "INSERT INTO held_updates (chat_id, update_key, kind, payload) "
        "VALUES ($1, $2, 'message', '{}')",
        chat,
        f"held:{chat}",
    )
    await x("INSERT INTO stranger_notices (chat_id, notified_at) VALUES ($1, now())", chat)
    await x("INSERT INTO erase_requests (chat_id, user_id) VALUES ($1, 7)", chat)
    # a dashboard login and a one-time link scoped to the chat
    await x(
        "INSERT INTO dashboard_sessions (sid_hash, chat_id, csrf, expires_at) "
        "VALUES ('sid' || $1::bigint::text, $1::bigint, 'csrf', now() + interval '1 hour')",
        chat,
    )
    await x(
        "INSERT INTO dashboard_links (secret_hash, chat_id, expires_at) "
        "VALUES ('link' || $1::bigint::text, $1::bigint, now() + interval '1 hour')",
        chat,
    )
    await x("INSERT INTO forget_flows (chat_id, topic) VALUES ($1, 'SingPass')", chat)
    await x(
        "INSERT INTO chat_leases (chat_id, owner, incarnation, expires_at) "
        "VALUES ($1, 'host:8080', 'run1', now() + interval '10 seconds')",
        chat,
    )
    message_id = await db.fetchval(
        "INSERT INTO chat_messages (chat_id, role, content) "
        "VALUES ($1, 'user', 'I live in Lisbon') RETURNING id",
        chat,
    )
    await x(
        "INSERT INTO chat_photos (chat_id, message_id, position, media_type, data) "
        "VALUES ($1, $2, 1, 'image/png', '\\x89504e47')",
        chat,
        message_id,
    )
    pids = []
    for text in ("User lives in Lisbon", "User likes fado"):
        pids.append(
            await db.fetchval(
                "INSERT INTO patterns (chat_id, content, canonical_hash, first_seen, last_seen) "
                "VALUES ($1, $2, $3, now(), now()) RETURNING id",
                chat,
                text,
                canonical_hash(text),
            )
        )
    p, q = pids
    await x(
        "INSERT INTO pattern_observations (pattern_id, chat_id, evidence) VALUES ($1, $2, 'said')",
        p,
        chat,
    )
    await x(
        "INSERT INTO pattern_relations (chat_id, from_pattern_id, to_pattern_id, relation) "
        "VALUES ($1, $2, $3, 'supports')",
        chat,
        p,
        q,
    )
    alias = await db.fetchval(
        "INSERT INTO pattern_aliases (pattern_id, chat_id, content) VALUES ($1, $2, 'Lisboa') "
        "RETURNING id",
        p,
        chat,
    )
    for table, owner, oid in (
        ("pattern_embeddings", "pattern_id", p),
        ("alias_embeddings", "alias_id", alias),
    ):
        await x(
            f"INSERT INTO {table} ({owner}, model, chat_id, dims, embedding) "
            "VALUES ($1, 'm', $2, 3, $3)",
            oid,
            chat,
            VEC,
        )
    await x(
        "INSERT INTO pattern_audit (chat_id, pattern_id, action, old_status, new_status, reason, "
        "actor) VALUES ($1, $2, 'pin', 'active', 'active', 'test', 'person')",
        chat,
        q,
    )
    episode = await db.fetchval(
        "INSERT INTO episodes (chat_id, summary, started_at, ended_at, message_count) "
        "VALUES ($1, 'Talked about Lisbon', now(), now(), 2) RETURNING id",
        chat,
    )
    await x(
        "INSERT INTO episode_embeddings (episode_id, model, chat_id, dims, embedding) "
        "VALUES ($1, 'm', $2, 3, $3)",
        episode,
        chat,
        VEC,
    )
    await x("INSERT INTO compaction_runs (chat_id, status) VALUES ($1, 'ok')", chat)
    entry = await db.fetchval(
        "INSERT INTO entries (chat_id, uuid, created_at, text) VALUES ($1, $2, now(), 'Diary') "
        "RETURNING id",
        chat,
        f"uuid-{chat}",
    )
    await x(
        "INSERT INTO entry_embeddings (entry_id, chat_id, model, dims, embedding) "
        "VALUES ($1, $2, 'm', 3, $3)",
        entry,
        chat,
        VEC,
    )
    await x(
        "INSERT INTO pattern_entries (pattern_id, entry_uuid, chat_id) VALUES ($1, $2, $3)",
        p,
        f"uuid-{chat}",
        chat,
    )
    await x("INSERT INTO daily_metrics (chat_id, date) VALUES ($1, current_date)", chat)
    await x("INSERT INTO chat_turn_stats (chat_id, day) VALUES ($1, current_date)", chat)
    await x("INSERT INTO chat_proactive (chat_id, active) VALUES ($1, true)", chat)
    job = await db.fetchval(
        "INSERT INTO cron_jobs (chat_id, name, kind, schedule, timezone) "
        "VALUES ($1, 'weekly-recap', 'routine', '0 9 * * 1', 'UTC') RETURNING id",
        chat,
    )
    await x(
        "INSERT INTO proactive_runs (chat_id, job_id, name, due_at, outcome) "
        "VALUES ($1, $2, 'weekly-recap', now(), 'sent')",
        chat,
        job,
    )
    await x(
        "INSERT INTO api_usage (chat_id, provider, model, purpose) "
        "VALUES ($1, 'anthropic', 'm', 'chat')",
        chat,
    )
