"""How the schema spreads over servers (issue 26, item 5): one home for the list.

Every table of the public schema is one of two kinds:

* **reference tables** (:data:`REFERENCE_TABLES`): small, shared by every chat, read by key
  (settings-like state, the migrations' record, dashboard logins). On Citus they are
  ``create_reference_table``: a copy on every node.
* **distributed tables**: every other table. Each is chat-scoped: it has ``chat_id`` NOT NULL
  (:data:`DISTRIBUTION_COLUMN`), and its primary key, unique constraints and foreign keys to
  other distributed tables all include it, so on Citus it is
  ``create_distributed_table(t, 'chat_id', colocate_with => ...)`` and every key is checked
  inside one shard.

``tests/runtime/test_schema_distribution.py`` checks the migrated catalogue against this.
A row that belongs to no chat (an update without a chat, a model call made for no chat, a
journal entry not yet given to a chat) carries :data:`NO_CHAT`.
"""

from __future__ import annotations

from collections.abc import Iterable

#: the column every distributed table is distributed (and colocated) by
DISTRIBUTION_COLUMN = "chat_id"

#: ``chat_id`` of a row that belongs to no chat (Telegram never uses 0 for a chat)
NO_CHAT = 0

#: small shared tables; each is replicated whole (no chat_id in their keys, no foreign key to
#: a distributed table)
REFERENCE_TABLES: frozenset[str] = frozenset(
    {
        "schema_migrations",  # the migration runner's record (runtime/migrate.py)
        "bot_state",  # key/value process state: the polling offset, heartbeats
        "dashboard_sessions",  # dashboard logins; chat_id NULL = every chat
        "dashboard_links",  # one-time dashboard login links
        "process_leases",  # which process runs the poller and each maintenance job
        "pairing_codes",  # the open pairing codes' hashes, before any chat may talk
    }
)


def distributed_tables(tables: Iterable[str]) -> list[str]:
    """The distributed ones of ``tables`` (every table not a reference table), sorted."""
    return sorted(t for t in tables if t not in REFERENCE_TABLES)
