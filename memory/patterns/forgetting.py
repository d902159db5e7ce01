"""Forgetting that forgets (issue 20, item 3): a forgotten pattern's text goes, everything
derived from it with it; the messages that mention a topic go on request, and the copies of
their text the queues keep.

* :func:`erase_patterns` — after the forget's audit row is written
  (:func:`memory.patterns.controls.forget_patterns`), deletes the pattern rows and, through
  their cascades, the observations (evidence text), aliases and their vectors, embeddings,
  relations and journal links; the patterns merged into them (their text lives on in the
  survivor) go too, and the chat's stored tool results quoting them say :data:`RESULT_GONE`
  instead (else the next turn's window would bring the text back). Only the audit rows stay
  (id, action, who, when, why): their free-text reasons other than the forget's are replaced
  by :data:`REASON_GONE`.
* :func:`count_messages_mentioning` / :func:`delete_messages_mentioning` — every row of the
  chat's conversation that mentions the topic (user, assistant, tool call and tool result rows,
  with the results of a deleted call), the episodes (their vectors cascade), and the text of
  the chat's finished ``inbox`` payloads and ``outbox`` messages that mention it (the row and
  its dedupe key stay, the payload becomes ``{}``, the text ``''``; rows still pending are
  left: they are newer than the request and on their way).
* :func:`scrub_flow_copies` — the copies the ``/forget`` flow's own message left: its sent
  texts and keyboards, and the callback queries tapped on it (Telegram sends the message back).

A topic becomes a query in one place, :func:`memory.patterns.topic.topic_tsquery` (positive
words only).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from memory.patterns.topic import topic_tsquery
from runtime.db import Queries

#: the reason an earlier audit row of a forgotten pattern keeps (its own may quote the text)
REASON_GONE = "(removed: the memory was forgotten)"
#: statuses of rows whose text may be scrubbed: finished, never read again for their text
INBOX_FINISHED = ("done", "skipped", "failed")
OUTBOX_FINISHED = ("sent", "failed", "uncertain")
#: what a stored tool result quoting a forgotten pattern says instead (the model saw a recall)
RESULT_GONE = '{"removed": "this result quoted a memory the person has since forgotten"}'

# $1 chat, $2 pattern ids, $3 the reason kept: the patterns, the ones merged into them
# (recursively, through the merges' audit rows), their audit reasons, then the rows
_ERASE = """
WITH RECURSIVE gone(id) AS (
    SELECT p.id FROM patterns p WHERE p.chat_id = $1 AND p.id = ANY($2::bigint[])
    UNION
    SELECT a.pattern_id FROM pattern_audit a JOIN gone g ON a.other_pattern_id = g.id
    JOIN patterns p ON p.id = a.pattern_id AND p.chat_id = $1 AND p.status = 'merged'
    WHERE a.chat_id = $1 AND a.action = 'merge'
),
reasons AS (
    UPDATE pattern_audit SET reason = $3
    WHERE chat_id = $1 AND pattern_id IN (SELECT id FROM gone) AND action <> 'forget'
),
texts AS (
    SELECT p.content, btrim(to_json(p.content)::text, '"') AS quoted
    FROM patterns p WHERE p.id IN (SELECT id FROM gone) AND length(p.content) > 0
),
results AS (
    UPDATE chat_messages m SET content = $4
    WHERE m.chat_id = $1 AND m.role = 'tool_result' AND EXISTS (
        SELECT 1 FROM texts t
        WHERE strpos(m.content, t.content) > 0 OR strpos(m.content, t.quoted) > 0)
)
DELETE FROM patterns WHERE chat_id = $1 AND id IN (SELECT id FROM gone) RETURNING id
"""


async def erase_patterns(conn: Queries, chat_id: int, pattern_ids: Sequence[int]) -> list[int]:
    """Delete the chat's patterns ``pattern_ids`` and those merged into them, with everything
    that cascades from them, keeping their audit rows (give a transaction's connection); the
    ids deleted."""
    if not pattern_ids:
        return []
    rows = await conn.fetch(_ERASE, chat_id, list(pattern_ids), REASON_GONE, RESULT_GONE)
    return sorted(int(r["id"]) for r in rows)


@attrs.frozen
class Mentions:
    messages: int
    episodes: int

    @property
    def total(self) -> int:
        return self.messages + self.episodes


# what a chat_messages row says: its text, and an assistant row's tool calls (their input)
# (and a routine message's summary, shown in the window instead of its text)
_ROW_TEXT = (
    "to_tsvector('english', m.content || ' ' || coalesce(m.summary, '') || ' ' "
    "|| coalesce(m.tool_calls::text, ''))"
)
_MESSAGES = f"""
SELECT m.id, m.role, m.content, m.tool_calls FROM chat_messages m
WHERE m.chat_id = $1 AND $2 <> '' AND {_ROW_TEXT} @@ to_tsquery('english', $2)
"""
_COUNT_EPISODES = """
SELECT count(*) FROM episodes
WHERE chat_id = $1 AND $2 <> '' AND text_search @@ to_tsquery('english', $2)
"""


def _said(rows: Sequence[Mapping[str, Any]]) -> int:
    """The messages the person saw: user and assistant rows with text (not a bare tool call)."""
    return sum(1 for r in rows if r["role"] in ("user", "assistant") and r["content"].strip())


async def count_messages_mentioning(db: Queries, chat_id: int, topic: str) -> Mentions:
    """How many of the chat's retained messages (said by the person or the bot) and episode
    summaries mention ``topic`` (its positive words, full text)."""
    q = topic_tsquery(topic)
    rows = await db.fetch(_MESSAGES, chat_id, q)
    episodes = await db.fetchval(_COUNT_EPISODES, chat_id, q)
    return Mentions(_said(rows), int(episodes or 0))


_DELETE = f"""
WITH hit AS ({_MESSAGES}),
calls AS (
    SELECT c->>'id' AS call_id FROM hit, jsonb_array_elements(
        CASE WHEN jsonb_typeof(hit.tool_calls) = 'array' THEN hit.tool_calls ELSE '[]' END) c
)
DELETE FROM chat_messages m WHERE m.chat_id = $1 AND (
    m.id IN (SELECT id FROM hit)
    OR (m.role = 'tool_result' AND m.tool_call_id IN (SELECT call_id FROM calls))
) RETURNING m.role, m.content
"""
_DELETE_EPISODES = """
DELETE FROM episodes
WHERE chat_id = $1 AND $2 <> '' AND text_search @@ to_tsquery('english', $2)
"""
_SCRUB_INBOX = """
UPDATE inbox SET payload = '{}'::jsonb
WHERE chat_id = $1 AND $2 <> '' AND status = ANY($3::text[]) AND payload <> '{}'::jsonb
  AND to_tsvector('english', payload) @@ to_tsquery('english', $2)
"""
_SCRUB_OUTBOX = """
UPDATE outbox SET text = '', reply_markup = NULL
WHERE chat_id = $1 AND $2 <> '' AND status = ANY($3::text[])
  AND (text <> '' OR reply_markup IS NOT NULL)
  AND to_tsvector('english', text || ' ' || coalesce(reply_markup::text, ''))
      @@ to_tsquery('english', $2)
"""


async def delete_messages_mentioning(conn: Queries, chat_id: int, topic: str) -> Mentions:
    """Delete every row of the chat's conversation that mentions ``topic`` (and the results of
    a deleted tool call), its episodes that mention it, and scrub the text of its finished
    inbox and outbox rows that mention it (give a transaction's connection for all or
    nothing); how many messages (said by the person or the bot) and episodes went."""
    q = topic_tsquery(topic)
    rows = await conn.fetch(_DELETE, chat_id, q)
    episodes = await conn.execute(_DELETE_EPISODES, chat_id, q)
    await conn.execute(_SCRUB_INBOX, chat_id, q, list(INBOX_FINISHED))
    await conn.execute(_SCRUB_OUTBOX, chat_id, q, list(OUTBOX_FINISHED))
    return Mentions(_said(rows), int(episodes.split()[-1]))


_FLOW_OUTBOX = """
UPDATE outbox SET text = '', reply_markup = NULL
WHERE chat_id = $1 AND status = ANY($3::text[]) AND (text <> '' OR reply_markup IS NOT NULL)
  AND (edit_message_id = $2 OR $2 = ANY(telegram_message_ids))
"""
_FLOW_TAPS = """
UPDATE inbox SET payload = '{}'::jsonb
WHERE chat_id = $1 AND kind = 'callback_query' AND payload <> '{}'::jsonb
  AND status <> 'pending' AND (payload #>> '{callback_query,message,message_id}') = $2::bigint::text
"""


async def scrub_flow_copies(conn: Queries, chat_id: int, message_id: int) -> None:
    """Scrub what the chat's message ``message_id`` (a ``/forget`` flow's) left behind: the
    text and keyboard of its sent message and edits, and the payloads of the taps on it (a
    callback query carries the message) — the one being handled included."""
    await conn.execute(_FLOW_OUTBOX, chat_id, message_id, list(OUTBOX_FINISHED))
    await conn.execute(_FLOW_TAPS, chat_id, message_id)
