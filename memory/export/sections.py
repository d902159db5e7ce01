"""What a snapshot holds: one :class:`Section` per chat-scoped table, in the order an import
writes them (a section only refers to sections before it), and the tables left out on purpose.

Every table with a ``chat_id`` column is either a section, a vector side table (exported with
``--with-vectors``), or in :data:`LEFT_OUT` with the reason; a test reads the catalogue and fails
on a table in none of them (so a table added later must be placed).

Column kinds say how a value becomes JSON and back: ``ts`` (ISO 8601 with offset), ``date``,
``time``, ``json`` (JSONB as the JSON value itself), ``text[]`` / ``int[]``, and the scalars.
"""

from __future__ import annotations

import attrs

from memory.embeddings.tables import ALL_TABLES

TEXT, INT, FLOAT, BOOL, TS, DATE, TIME, JSON, TEXTS, INTS = (
    "text",
    "int",
    "float",
    "bool",
    "ts",
    "date",
    "time",
    "json",
    "text[]",
    "int[]",
)


@attrs.frozen
class Col:
    """One exported column: its name, kind, whether it may be null, and (for an id column that
    points at another section's rows) that section's name."""

    name: str
    kind: str
    null: bool = False
    ref: str | None = None
    #: the values the database's CHECK allows (the schema says so, naming the path)
    enum: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None


@attrs.frozen
class Section:
    """One table's rows in the document (key ``name``). ``has_id``: the rows carry their id (other
    sections may refer to it; remapped on import). ``key``: the columns that identify a row in a
    chat (a duplicate in the file is an error; a row already in the chat is kept, not doubled).
    ``vectors``: the side table of its embeddings (``embedding`` in each row with vectors)."""

    name: str
    table: str
    cols: tuple[Col, ...]
    order: str
    has_id: bool = True
    key: tuple[str, ...] = ()
    vectors: str | None = None
    max_rows: int | None = None

    def col(self, name: str) -> Col:
        return next(c for c in self.cols if c.name == name)


def _c(
    name: str,
    kind: str = TEXT,
    null: bool = False,
    ref: str | None = None,
    *,
    enum: tuple[str, ...] = (),
    minimum: float | None = None,
    maximum: float | None = None,
) -> Col:
    return Col(name, kind, null, ref, enum, minimum, maximum)


SECTIONS: tuple[Section, ...] = (
    Section(
        "messages",
        "chat_messages",
        (
            _c("external_message_id", null=True),
            _c("role", enum=("user", "assistant", "tool_result")),
            _c("content"),
            _c("tool_calls", JSON, True),
            _c("tool_call_id", null=True),
            _c("tool_name", null=True),
            _c("source", enum=("conversation", "routine")),
            _c("routine_name", null=True),
            _c("summary", null=True),
            _c("compacted_at", TS, True),
            _c("created_at", TS),
        ),
        "id",
        key=("external_message_id", "role", "created_at", "content"),
    ),
    Section(
        "patterns",
        "patterns",
        (
            _c("content"),
            _c(
                "kind",
                enum=(
                    "behavior",
                    "emotion",
                    "belief",
                    "goal",
                    "preference",
                    "temporal",
                    "causal",
                    "fact",
                    "event",
                ),
            ),
            _c("status", enum=("active", "merged", "deprecated", "superseded", "disputed")),
            _c("status_reason", null=True),
            _c("source"),
            _c("confidence", FLOAT, minimum=0.0, maximum=1.0),
            _c("strength", FLOAT, minimum=0.0),
            _c("times_seen", INT),
            _c("contradiction_count", INT),
            _c("temporal", JSON, True),
            _c("canonical_hash"),
            _c("occurs_on", DATE, True),
            _c("occurs_at", TIME, True),
            _c("is_core_tenet", BOOL),
            _c("pinned_at", TS, True),
            _c("first_seen", TS),
            _c("last_seen", TS),
            _c("created_at", TS),
            _c("updated_at", TS),
        ),
        "id",
        key=("canonical_hash",),
        vectors="pattern_embeddings",
    ),
    Section(
        "observations",
        "pattern_observations",
        (
            _c("pattern_id", INT, ref="patterns"),
            _c("chat_message_ids", INTS, ref="messages"),
            _c("evidence"),
            _c("evidence_roles", TEXTS),
            _c("signal", enum=("explicit", "implicit")),
            _c("confidence", FLOAT),
            _c("extractor_version"),
            _c("observed_at", TS),
        ),
        "id",
        key=("pattern_id", "evidence", "observed_at"),
    ),
    Section(
        "relations",
        "pattern_relations",
        (
            _c("from_pattern_id", INT, ref="patterns"),
            _c("to_pattern_id", INT, ref="patterns"),
            _c("relation", enum=("supports", "contradicts", "parent_of", "causes", "supersedes")),
            _c("created_at", TS),
        ),
        "id",
        key=("from_pattern_id", "to_pattern_id", "relation"),
    ),
    Section(
        "aliases",
        "pattern_aliases",
        (_c("pattern_id", INT, ref="patterns"), _c("content"), _c("created_at", TS)),
        "id",
        key=("pattern_id", "content"),
        vectors="alias_embeddings",
    ),
    Section(
        "entry_links",
        "pattern_entries",
        (
            _c("pattern_id", INT, ref="patterns"),
            _c("entry_uuid"),
            _c("source", enum=("compaction", "tool_loop")),
            _c("confidence", FLOAT),
            _c("times_linked", INT),
            _c("last_linked_at", TS),
            _c("created_at", TS),
        ),
        "pattern_id, entry_uuid",
        has_id=False,
        key=("pattern_id", "entry_uuid"),
    ),
    Section(
        "audit",
        "pattern_audit",
        (
            # a forgotten pattern's audit rows stay (migration 011): the id may be no row's
            _c("pattern_id", INT, ref="patterns"),
            _c(
                "action",
                enum=(
                    "forget",
                    "merge",
                    "supersede",
                    "dispute",
                    "pin",
                    "unpin",
                    "expire",
                    "restore",
                ),
            ),
            _c("old_status"),
            _c("new_status"),
            _c("reason"),
            _c("actor", enum=("person", "model", "compaction", "merge_job", "maintenance")),
            _c("other_pattern_id", INT, True, ref="patterns"),
            _c("at", TS),
        ),
        "id",
        key=("pattern_id", "action", "at"),
    ),
    Section(
        "episodes",
        "episodes",
        (
            _c("summary"),
            _c("started_at", TS),
            _c("ended_at", TS),
            _c("message_count", INT),
            _c("first_message_id", INT, True, ref="messages"),
            _c("last_message_id", INT, True, ref="messages"),
            _c("created_at", TS),
        ),
        "id",
        key=("started_at", "ended_at", "summary"),
        vectors="episode_embeddings",
    ),
    Section(
        "journal_entries",
        "entries",
        (
            _c("uuid"),
            _c("created_at", TS),
            _c("modified_at", TS, True),
            _c("timezone", null=True),
            _c("text"),
            _c("tags", TEXTS),
            _c("city", null=True),
            _c("country", null=True),
            _c("place_name", null=True),
            _c("latitude", FLOAT, True),
            _c("longitude", FLOAT, True),
            _c("location", JSON, True),
            _c("weather", JSON, True),
            _c("photo_count", INT),
            _c("video_count", INT),
            _c("audio_count", INT),
            _c("word_count", INT),
            _c("imported_at", TS),
        ),
        "created_at, uuid",
        key=("uuid",),
        vectors="entry_embeddings",
    ),
    Section(
        "daily_metrics",
        "daily_metrics",
        (
            _c("date", DATE),
            _c("weight_kg", FLOAT, True),
            _c("created_at", TS),
            _c("updated_at", TS),
        ),
        "date",
        has_id=False,
        key=("date",),
    ),
    Section(
        "turn_stats",
        "chat_turn_stats",
        (_c("day", DATE), _c("turns", INT), _c("retrieval_degraded", INT)),
        "day",
        has_id=False,
        key=("day",),
    ),
    Section(
        "proactive_settings",
        "chat_proactive",
        (
            _c("active", BOOL),
            _c("quiet_start", INT, True, minimum=0, maximum=23),
            _c("quiet_end", INT, True, minimum=0, maximum=23),
            _c("quiet_off", BOOL),
            _c("digest", enum=("daily", "weekly", "off")),
            _c("max_per_day", INT, True, minimum=0, maximum=32767),
            _c("cooldown_s", INT, True, minimum=0),
            _c("paused_at", TS, True),
            _c("paused_reason", null=True),
            _c("updated_at", TS),
        ),
        "chat_id",
        has_id=False,
        max_rows=1,
    ),
    Section(
        "scheduled_jobs",
        "cron_jobs",
        (
            _c("name"),
            _c("kind", enum=("routine", "reminder")),
            _c("schedule", null=True),
            _c("run_at", TS, True),
            _c("timezone"),
            _c("payload", JSON),
            _c("enabled", BOOL),
            _c("grace_s", INT, minimum=0),
            _c("next_run_at", TS, True),
            _c("last_run_at", TS, True),
            _c("last_outcome", null=True),
            _c("created_at", TS),
        ),
        "id",
        key=("name",),
    ),
    Section(
        "proactive_runs",
        "proactive_runs",
        (
            _c("job_id", INT, True, ref="scheduled_jobs"),
            _c("name"),
            _c("due_at", TS),
            _c("outcome", enum=("sent", "declined", "skipped", "deferred", "failed")),
            _c("reason", null=True),
            _c("model_calls", INT),
            _c("at", TS),
        ),
        "id",
        key=("name", "due_at", "at"),
    ),
)
BY_NAME = {s.name: s for s in SECTIONS}

#: chat-scoped tables a snapshot leaves out, and why (not the person's memory: transport,
#: access control, billing, derived counts, short-lived button state, run logs)
LEFT_OUT: dict[str, str] = {
    "inbox": "the delivery queue of incoming updates (its text is in messages)",
    "outbox": "the delivery queue of replies (their text is in messages)",
    "held_updates": "updates of a chat not yet allowed, kept 24 hours",
    "stranger_notices": "when a not-allowed chat was last told so",
    "allowed_chats": "access control: the operator's, not the chat's memory",
    "callback_tokens": "buttons of past messages (short-lived)",
    "forget_flows": "a /forget flow's topic while its buttons live",
    "api_usage": "the operator's cost accounting",
    "chat_pattern_counts": "derived: a view counting patterns",
    "compaction_runs": "a log of compaction attempts (observability)",
    "erase_requests": "a pending /forget everything confirmation (five minutes)",
    "dashboard_sessions": "a dashboard login (access, not memory)",
    "chat_leases": "which engram process serves the chat right now (operational)",
    "chat_photos": "image bytes kept under KEEP_PHOTOS (the messages say what they showed)",
    "dashboard_links": "a one-time dashboard login link (access, not memory)",
}
VECTOR_TABLES = ALL_TABLES
