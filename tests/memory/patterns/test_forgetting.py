"""Forgetting forgets (issue 20, item 3): the topic rule (positive words only), and on a real
PostgreSQL what forgetting a pattern and deleting the messages that mention a topic leave —
nothing with the text, in any column of any table of the database — and the retention of the
queues' copies of message text."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

from db_scan import rows_containing
from hypothesis import given
from hypothesis import strategies as st

from actors.queues import inbox
from memory.conversation.purge import scrub_queues
from memory.patterns.controls import FORGOTTEN_BY_PERSON, forget_pattern, forget_patterns
from memory.patterns.forgetting import (
    REASON_GONE,
    RESULT_GONE,
    Mentions,
    count_messages_mentioning,
    delete_messages_mentioning,
    scrub_flow_copies,
)
from memory.patterns.topic import topic_tsquery, topic_words
from runtime.db import Database, Queries

CHAT, OTHER = 7001, 7002
WORD = "Zephyrine"  # the forgotten topic: in no other text of these tests
OPERATORS = ["-{w}", "!{w}", '"{w}"', "{w} or -{w}", "{w} OR {w}", "-{w} -{w}", "({w})", "{w}:*"]


# --- the topic rule ---------------------------------------------------------------------------


def test_a_topic_is_its_positive_words() -> None:
    assert topic_tsquery("SingPass login") == "singpass & login"
    for form in OPERATORS:
        assert topic_tsquery(form.format(w="SingPass")) == "singpass", form
    for nothing in ["", "-", "!", "OR", "or and not", '""', "- - -", "*:"]:
        assert topic_tsquery(nothing) == "" and topic_words(nothing) == []


words = st.text(st.characters(categories=["Ll", "Lu", "Nd"]), min_size=1, max_size=12).filter(
    lambda w: w.lower() not in ("or", "and", "not")
)


@given(words)
def test_operators_around_a_word_match_what_the_word_matches(word: str) -> None:
    plain = topic_tsquery(word)
    assert plain
    for form in OPERATORS:
        assert topic_tsquery(form.format(w=word)) == plain


@given(st.text(max_size=300))
def test_any_topic_becomes_words_joined_by_and_never_an_operator(topic: str) -> None:
    q = topic_tsquery(topic)
    assert re.fullmatch(r"([^\W_]+( & [^\W_]+)*)?", q), q
    assert not set(q) & set("!|-:*()'\"<>\\")


async def test_negation_or_operators_never_widen_the_messages_matched(db: Database) -> None:
    texts = ["I love hiking", "The weather is nice", "Coffee is great", "Noted.", "Cheers"]
    for text in texts:
        await add_message(db, CHAT, "user", text)
    for form in [*OPERATORS, "weather"]:
        topic = form.format(w="weather")
        assert await count_messages_mentioning(db, CHAT, topic) == Mentions(1, 0), topic
    odd = ["-zebra", "!zebra", "zebra or -zebra", "OR", "-", "², ٣ \u200f x\x00y", "a" * 4096]
    for topic in odd:  # nothing mentions them: nothing is offered (and no query error)
        assert await count_messages_mentioning(db, CHAT, topic) == Mentions(0, 0), topic
    assert await delete_messages_mentioning(db, CHAT, "-zebra") == Mentions(0, 0)
    assert await db.fetchval("SELECT count(*) FROM chat_messages") == len(texts)


# --- forgetting, on the database --------------------------------------------------------------


async def add_message(
    db: Queries, chat: int, role: str, text: str, *, calls: object = None, answers: str = ""
) -> int:
    return int(
        await db.fetchval(
            "INSERT INTO chat_messages"
            " (chat_id, role, content, tool_calls, tool_call_id, tool_name) "
            "VALUES ($1, $2, $3, $4::jsonb, NULLIF($5, ''), CASE WHEN $5 <> '' THEN 'recall' END) "
            "RETURNING id",
            chat,
            role,
            text,
            None if calls is None else json.dumps(calls),
            answers,
        )
    )


async def add_pattern(db: Queries, chat: int, content: str, *, status: str = "active") -> int:
    pid = int(
        await db.fetchval(
            "INSERT INTO patterns"
            " (chat_id, content, canonical_hash, first_seen, last_seen, status) "
            "VALUES ($1, $2, md5($2), now(), now(), $3) RETURNING id",
            chat,
            content,
            status,
        )
    )
    await db.execute(
        "INSERT INTO pattern_observations (pattern_id, chat_id, evidence) VALUES ($1, $2, $3)",
        pid,
        chat,
        f"I said: {content}",
    )
    await db.execute(
        "INSERT INTO pattern_embeddings (pattern_id, model, chat_id, dims, embedding) "
        "VALUES ($1, 'test', $2, 2, '[0.1, 0.2]')",
        pid,
        chat,
    )
    alias = await db.fetchval(
        "INSERT INTO pattern_aliases (pattern_id, chat_id, content) VALUES ($1, $2, $3) "
        "RETURNING id",
        pid,
        chat,
        f"also: {content}",
    )
    await db.execute(
        "INSERT INTO alias_embeddings (alias_id, model, chat_id, dims, embedding) "
        "VALUES ($1, 'test', $2, 2, '[0.3, 0.4]')",
        alias,
        chat,
    )
    return pid


async def seed(db: Database) -> dict[str, int]:
    """One chat's memory of the topic, everywhere it is copied, beside unrelated things and
    another chat's identical text."""
    ids = {
        "topic": await add_pattern(db, CHAT, f"User finds {WORD} login flows confusing"),
        "merged": await add_pattern(db, CHAT, f"User is confused by {WORD}", status="merged"),
        "hiking": await add_pattern(db, CHAT, "User enjoys hiking on weekends"),
        "theirs": await add_pattern(db, OTHER, f"User likes {WORD}"),
    }
    await db.execute(
        "INSERT INTO pattern_audit (chat_id, pattern_id, action, old_status, new_status, reason, "
        "actor, other_pattern_id) VALUES ($1, $2, 'merge', 'active', 'merged', $3, 'merge_job', "
        "$4)",
        CHAT,
        ids["merged"],
        f"same thing: {WORD} confusion",
        ids["topic"],
    )
    await db.execute(
        "INSERT INTO pattern_relations (chat_id, from_pattern_id, to_pattern_id, relation) "
        "VALUES ($1, $2, $3, 'supports')",
        CHAT,
        ids["topic"],
        ids["hiking"],
    )
    await db.execute(
        "INSERT INTO pattern_entries (pattern_id, entry_uuid, chat_id) VALUES ($1, 'E1', $2)",
        ids["topic"],
        CHAT,
    )
    await add_message(db, CHAT, "user", f"My {WORD} login failed again")
    await add_message(
        db, CHAT, "assistant", "", calls=[{"id": "t1", "name": "recall", "input": {"query": WORD}}]
    )
    await add_message(db, CHAT, "tool_result", "[no memories]", answers="t1")
    await add_message(db, CHAT, "tool_result", f'{{"content": "{WORD} again"}}', answers="t9")
    await add_message(db, CHAT, "assistant", f"Sorry about {WORD}.")
    ids["weather"] = await add_message(db, CHAT, "user", "The weather is nice")
    ids["their_message"] = await add_message(db, OTHER, "user", f"{WORD} in the other chat")
    episode = await db.fetchval(
        "INSERT INTO episodes (chat_id, summary, started_at, ended_at, message_count) "
        "VALUES ($1, $2, now(), now(), 3) RETURNING id",
        CHAT,
        f"They talked about {WORD}",
    )
    await db.execute(
        "INSERT INTO episode_embeddings (episode_id, model, chat_id, dims, embedding) "
        "VALUES ($1, 'test', $2, 2, '[0.5, 0.6]')",
        episode,
        CHAT,
    )
    for n, (kind, payload) in enumerate(
        [
            ("message", {"message": {"chat": {"id": CHAT}, "text": f"My {WORD} login failed"}}),
            ("message", {"message": {"chat": {"id": CHAT}, "text": f"/forget {WORD}"}}),
            (
                "callback_query",
                {
                    "callback_query": {
                        "data": "tok",
                        "message": {
                            "message_id": 77,
                            "text": "Memories:\n1. User finds Zeph… (#1)",
                        },
                    }
                },
            ),
        ]
    ):
        row = await inbox.insert_update(db, f"update:{n}", n, CHAT, kind, payload)
        assert row is not None
        await inbox.mark_done(db, CHAT, [row])
    await db.execute(
        "INSERT INTO outbox (chat_id, text, status, telegram_message_ids, reply_markup) VALUES "
        "($1, $2, 'sent', '{70}', NULL), ($1, 'Memories:\n1. User finds Zeph… (#1)', 'sent', "
        "'{77}', $3::jsonb)",
        CHAT,
        f"Sorry about {WORD}.",
        json.dumps(
            {"inline_keyboard": [[{"text": "Forget 1: User finds Zeph…", "callback_data": "tok"}]]}
        ),
    )
    return ids


async def test_forgetting_a_topic_leaves_its_text_in_no_table(db: Database) -> None:
    ids = await seed(db)
    assert set(await rows_containing(db, [WORD])) >= {
        "patterns",
        "pattern_observations",
        "pattern_aliases",
        "pattern_audit",
        "chat_messages",
        "episodes",
        "inbox",
        "outbox",
    }
    assert await count_messages_mentioning(db, CHAT, WORD) == Mentions(2, 1)
    async with db.transaction() as conn:
        done = await forget_patterns(
            conn, CHAT, [ids["topic"]], reason=FORGOTTEN_BY_PERSON, actor="person"
        )
        assert [f.outcome for f in done] == ["forgotten"]
        assert await delete_messages_mentioning(conn, CHAT, WORD) == Mentions(2, 1)
        await scrub_flow_copies(conn, CHAT, 77)

    # only the other chat's rows still say it
    assert await rows_containing(db, [WORD, "Zeph"]) == {
        "chat_messages": 1,
        "pattern_observations": 1,
        "pattern_aliases": 1,
        "patterns": 1,
    }
    assert await db.fetchval("SELECT count(*) FROM patterns WHERE chat_id = $1", OTHER) == 1
    # what was derived from the forgotten patterns went with them, vectors included
    gone = [ids["topic"], ids["merged"]]
    for table, col in [
        ("pattern_embeddings", "pattern_id"),
        ("pattern_observations", "pattern_id"),
        ("pattern_aliases", "pattern_id"),
        ("pattern_entries", "pattern_id"),
        ("pattern_relations", "from_pattern_id"),
    ]:
        assert await db.fetchval(f"SELECT count(*) FROM {table} WHERE {col} = ANY($1)", gone) == 0
    assert await db.fetchval("SELECT count(*) FROM alias_embeddings WHERE chat_id = $1", CHAT) == 1
    assert await db.fetchval("SELECT count(*) FROM episode_embeddings") == 0
    # the audit rows stay (id, action, who, when, why), with no text
    audit = await db.fetch(
        "SELECT pattern_id, action, reason, actor FROM pattern_audit "
        "WHERE chat_id = $1 ORDER BY id",
        CHAT,
    )
    assert [(r["pattern_id"], r["action"], r["reason"], r["actor"]) for r in audit] == [
        (ids["merged"], "merge", REASON_GONE, "merge_job"),
        (ids["topic"], "forget", FORGOTTEN_BY_PERSON, "person"),
    ]
    # the rest of the chat is kept: the unrelated pattern, message, and the rows' keys
    left = await db.fetch("SELECT id, role FROM chat_messages WHERE chat_id = $1", CHAT)
    assert [r["id"] for r in left] == [ids["weather"]]  # the call's result went with the call
    assert await db.fetchval("SELECT status FROM patterns WHERE id = $1", ids["hiking"]) == "active"
    keys = await db.fetch("SELECT update_key, payload FROM inbox ORDER BY id")
    assert [(r["update_key"], json.loads(r["payload"])) for r in keys] == [
        ("update:0", {}),
        ("update:1", {}),
        ("update:2", {}),
    ]
    assert await inbox.insert_update(db, "update:0", 0, CHAT, "message", {"x": 1}) is None


async def test_pending_rows_keep_their_text(db: Database) -> None:
    """A row not yet handled or sent is newer than the request: it is left to do its work."""
    row = await inbox.insert_update(
        db, "update:9", 9, CHAT, "message", {"message": {"text": f"{WORD} again"}}
    )
    await db.execute("INSERT INTO outbox (chat_id, text) VALUES ($1, $2)", CHAT, f"{WORD}!")
    await delete_messages_mentioning(db, CHAT, WORD)
    assert await rows_containing(db, [WORD]) == {"inbox": 1, "outbox": 1}
    assert row is not None


async def test_retention_drops_the_queues_text_and_keeps_the_keys(db: Database) -> None:
    now = datetime.now(UTC)
    old, recent = now - timedelta(days=8), now - timedelta(days=6)
    for key, status, at in [
        ("u:old", "done", old),
        ("u:new", "done", recent),
        ("u:open", "pending", old),
    ]:
        await db.execute(
            "INSERT INTO inbox (update_key, chat_id, kind, payload, status, received_at) "
            'VALUES ($1, $2, \'message\', \'{"message": {"text": "secret words"}}\', $3, $4)',
            key,
            CHAT,
            status,
            at,
        )
    for status, at in [("sent", old), ("sent", recent), ("pending", old)]:
        await db.execute(
            "INSERT INTO outbox (chat_id, text, status, created_at, reply_markup) "
            "VALUES ($1, 'secret words', $2, $3, '{\"inline_keyboard\": []}')",
            CHAT,
            status,
            at,
        )
    for n, at in enumerate([old, recent]):
        await db.execute(
            "INSERT INTO held_updates (chat_id, update_key, kind, payload, received_at) "
            "VALUES ($1, $2, 'message', '{\"text\": \"secret words\"}', $3)",
            9,
            f"h{n}",
            at,
        )
    assert await scrub_queues(db, 0) == 0  # 0 days: kept forever
    assert await scrub_queues(db, 7) == 3
    assert await scrub_queues(db, 7) == 0
    kept = await db.fetch(
        "SELECT update_key, payload = '{}'::jsonb AS empty FROM inbox ORDER BY id"
    )
    assert [(r["update_key"], r["empty"]) for r in kept] == [
        ("u:old", True),
        ("u:new", False),
        ("u:open", False),
    ]
    out = await db.fetch("SELECT text, reply_markup IS NULL AS bare FROM outbox ORDER BY id")
    assert [(r["text"], r["bare"]) for r in out] == [
        ("", True),
        ("secret words", False),
        ("secret words", False),
    ]
    assert await db.fetchval("SELECT array_agg(update_key) FROM held_updates") == ["h1"]
    assert await inbox.insert_update(db, "u:old", None, CHAT, "message", {"x": 1}) is None


async def test_forgetting_only_the_memory_removes_it_from_stored_tool_results(
    db: Database,
) -> None:
    """The person kept the messages: the memory still goes from what recall results stored
    (the next turn's window would show it), the messages stay."""
    content = f'User calls the {WORD} app "a maze"'
    pid = await add_pattern(db, CHAT, content)
    other = await add_pattern(db, CHAT, "User enjoys hiking on weekends")
    said = await add_message(db, CHAT, "user", "How do I log in again?")
    await add_message(db, CHAT, "assistant", "", calls=[{"id": "t1", "name": "recall"}])
    quoted = json.dumps({"memories": [{"id": pid, "content": content}]}, ensure_ascii=False)
    result = await add_message(db, CHAT, "tool_result", quoted, answers="t1")
    kept = await add_message(db, CHAT, "tool_result", '{"content": "User enjoys hiking"}')
    done = await forget_pattern(db, CHAT, pid, reason=FORGOTTEN_BY_PERSON, actor="person")
    assert done is not None and done.outcome == "forgotten"
    assert await rows_containing(db, [WORD, "a maze"]) == {}
    assert await db.fetchval("SELECT content FROM chat_messages WHERE id = $1", result) == (
        RESULT_GONE
    )
    rows = await db.fetch("SELECT id FROM chat_messages WHERE chat_id = $1 ORDER BY id", CHAT)
    assert rows[0]["id"] == said and len(rows) == 4
    assert "hiking" in await db.fetchval("SELECT content FROM chat_messages WHERE id = $1", kept)
    assert await db.fetchval("SELECT count(*) FROM patterns WHERE id = $1", other) == 1
