-- A schema ready to be distributed by chat (issue 26, item 5): every chat-scoped table carries
-- chat_id NOT NULL, and every primary key, unique constraint and foreign key between
-- chat-scoped tables includes it, so that on Citus each table can be distributed by chat_id,
-- colocated, and every key is enforced inside one shard. The small shared tables are the
-- reference tables (runtime/schema_layout.py: REFERENCE_TABLES; tests/runtime/
-- test_schema_distribution.py checks the catalogue against it).
--
-- Cost on a large database: no table is rewritten (no column changes type; the HNSW indexes
-- are kept). Each replaced primary key / unique constraint builds one B-tree; each foreign key
-- is validated by one anti-join; the repairs below are one join each and write only rows that
-- disagree (none, when the writers kept the denormalized chat_id, as they do).

-- ---------------------------------------------------------------------------------------------
-- 1. chat_id NOT NULL everywhere. 0 is "no chat" (Telegram never uses chat id 0):
--    runtime.schema_layout.NO_CHAT. inbox: updates without a chat; api_usage: calls made for
--    no chat (imports, merges); entries: journal entries imported before migration 012 that
--    `engram serve` has not yet given to a chat (memory/journal/owner.py).
UPDATE inbox SET chat_id = 0 WHERE chat_id IS NULL;
UPDATE api_usage SET chat_id = 0 WHERE chat_id IS NULL;
UPDATE entries SET chat_id = 0 WHERE chat_id IS NULL;
-- an entry's vectors carry its chat (the writers keep them equal; repaired where they differ)
UPDATE entry_embeddings v SET chat_id = e.chat_id FROM entries e
WHERE e.id = v.entry_id AND v.chat_id IS DISTINCT FROM e.chat_id;

-- The denormalized chat_id of rows that belong to a parent row is the parent's (repairs, if any).
UPDATE pattern_embeddings c SET chat_id = p.chat_id FROM patterns p
WHERE p.id = c.pattern_id AND c.chat_id <> p.chat_id;
UPDATE pattern_observations c SET chat_id = p.chat_id FROM patterns p
WHERE p.id = c.pattern_id AND c.chat_id <> p.chat_id;
UPDATE pattern_aliases c SET chat_id = p.chat_id FROM patterns p
WHERE p.id = c.pattern_id AND c.chat_id <> p.chat_id;
UPDATE alias_embeddings c SET chat_id = a.chat_id FROM pattern_aliases a
WHERE a.id = c.alias_id AND c.chat_id <> a.chat_id;
UPDATE pattern_entries c SET chat_id = p.chat_id FROM patterns p
WHERE p.id = c.pattern_id AND c.chat_id <> p.chat_id;
UPDATE episode_embeddings c SET chat_id = e.chat_id FROM episodes e
WHERE e.id = c.episode_id AND c.chat_id <> e.chat_id;
UPDATE chat_photos c SET chat_id = m.chat_id FROM chat_messages m
WHERE m.id = c.message_id AND c.chat_id <> m.chat_id;
-- a relation joins two patterns of its own chat (the writers never link across chats)
UPDATE pattern_relations r SET chat_id = p.chat_id FROM patterns p
WHERE p.id = r.from_pattern_id AND r.chat_id <> p.chat_id;
DELETE FROM pattern_relations r USING patterns p
WHERE p.id = r.to_pattern_id AND r.chat_id <> p.chat_id;

-- ---------------------------------------------------------------------------------------------
-- 2. Foreign keys without chat_id go first (they depend on the primary keys replaced below).
ALTER TABLE pattern_embeddings DROP CONSTRAINT pattern_embeddings_pattern_id_fkey;
ALTER TABLE pattern_observations DROP CONSTRAINT pattern_observations_pattern_id_fkey;
ALTER TABLE pattern_relations DROP CONSTRAINT pattern_relations_from_pattern_id_fkey,
    DROP CONSTRAINT pattern_relations_to_pattern_id_fkey;
ALTER TABLE pattern_aliases DROP CONSTRAINT pattern_aliases_pattern_id_fkey;
ALTER TABLE alias_embeddings DROP CONSTRAINT alias_embeddings_alias_id_fkey;
ALTER TABLE pattern_entries DROP CONSTRAINT pattern_entries_pattern_id_fkey;
ALTER TABLE episode_embeddings DROP CONSTRAINT episode_embeddings_episode_id_fkey;
ALTER TABLE entry_embeddings DROP CONSTRAINT entry_embeddings_entry_id_fkey;
ALTER TABLE chat_photos DROP CONSTRAINT chat_photos_message_id_fkey;

-- 3. Primary keys and unique constraints led by chat_id (one ALTER per table: one pass).
ALTER TABLE inbox ALTER COLUMN chat_id SET NOT NULL,
    DROP CONSTRAINT inbox_pkey, ADD CONSTRAINT inbox_pkey PRIMARY KEY (chat_id, id),
    DROP CONSTRAINT inbox_update_key_key,
    ADD CONSTRAINT inbox_update_key_key UNIQUE (chat_id, update_key);
ALTER TABLE outbox
    DROP CONSTRAINT outbox_pkey, ADD CONSTRAINT outbox_pkey PRIMARY KEY (chat_id, id);
ALTER TABLE api_usage ALTER COLUMN chat_id SET DEFAULT 0, ALTER COLUMN chat_id SET NOT NULL,
    DROP CONSTRAINT api_usage_pkey, ADD CONSTRAINT api_usage_pkey PRIMARY KEY (chat_id, id);
ALTER TABLE chat_messages
    DROP CONSTRAINT chat_messages_pkey,
    ADD CONSTRAINT chat_messages_pkey PRIMARY KEY (chat_id, id);
ALTER TABLE chat_photos
    DROP CONSTRAINT chat_photos_pkey, ADD CONSTRAINT chat_photos_pkey PRIMARY KEY (chat_id, id);
ALTER TABLE patterns
    DROP CONSTRAINT patterns_pkey, ADD CONSTRAINT patterns_pkey PRIMARY KEY (chat_id, id);
ALTER TABLE pattern_embeddings
    DROP CONSTRAINT pattern_embeddings_pkey,
    ADD CONSTRAINT pattern_embeddings_pkey PRIMARY KEY (chat_id, pattern_id, model);
ALTER TABLE pattern_observations
    DROP CONSTRAINT pattern_observations_pkey,
    ADD CONSTRAINT pattern_observations_pkey PRIMARY KEY (chat_id, id);
ALTER TABLE pattern_relations
    DROP CONSTRAINT pattern_relations_pkey,
    ADD CONSTRAINT pattern_relations_pkey PRIMARY KEY (chat_id, id),
    DROP CONSTRAINT pattern_relations_from_pattern_id_to_pattern_id_relation_key,
    ADD CONSTRAINT pattern_relations_from_to_relation_key
        UNIQUE (chat_id, from_pattern_id, to_pattern_id, relation);
ALTER TABLE pattern_aliases
    DROP CONSTRAINT pattern_aliases_pkey,
    ADD CONSTRAINT pattern_aliases_pkey PRIMARY KEY (chat_id, id),
    DROP CONSTRAINT pattern_aliases_pattern_id_content_key,
    ADD CONSTRAINT pattern_aliases_pattern_id_content_key UNIQUE (chat_id, pattern_id, content);
ALTER TABLE alias_embeddings
    DROP CONSTRAINT alias_embeddings_pkey,
    ADD CONSTRAINT alias_embeddings_pkey PRIMARY KEY (chat_id, alias_id, model);
ALTER TABLE pattern_entries
    DROP CONSTRAINT pattern_entries_pkey,
    ADD CONSTRAINT pattern_entries_pkey PRIMARY KEY (chat_id, pattern_id, entry_uuid);
ALTER TABLE episodes
    DROP CONSTRAINT episodes_pkey, ADD CONSTRAINT episodes_pkey PRIMARY KEY (chat_id, id);
ALTER TABLE episode_embeddings
    DROP CONSTRAINT episode_embeddings_pkey,
    ADD CONSTRAINT episode_embeddings_pkey PRIMARY KEY (chat_id, episode_id, model);
ALTER TABLE entries ALTER COLUMN chat_id SET DEFAULT 0, ALTER COLUMN chat_id SET NOT NULL,
    DROP CONSTRAINT entries_pkey, ADD CONSTRAINT entries_pkey PRIMARY KEY (chat_id, id);
ALTER TABLE entry_embeddings ALTER COLUMN chat_id SET NOT NULL,
    DROP CONSTRAINT entry_embeddings_pkey,
    ADD CONSTRAINT entry_embeddings_pkey PRIMARY KEY (chat_id, entry_id, model);
ALTER TABLE compaction_runs
    DROP CONSTRAINT compaction_runs_pkey,
    ADD CONSTRAINT compaction_runs_pkey PRIMARY KEY (chat_id, id);
ALTER TABLE cron_jobs
    DROP CONSTRAINT cron_jobs_pkey, ADD CONSTRAINT cron_jobs_pkey PRIMARY KEY (chat_id, id);
ALTER TABLE proactive_runs
    DROP CONSTRAINT proactive_runs_pkey,
    ADD CONSTRAINT proactive_runs_pkey PRIMARY KEY (chat_id, id);

-- 4. Foreign keys within one chat: (chat_id, x_id) -> (chat_id, id), same actions as before.
ALTER TABLE pattern_embeddings ADD CONSTRAINT pattern_embeddings_pattern_id_fkey
    FOREIGN KEY (chat_id, pattern_id) REFERENCES patterns (chat_id, id) ON DELETE CASCADE;
ALTER TABLE pattern_observations ADD CONSTRAINT pattern_observations_pattern_id_fkey
    FOREIGN KEY (chat_id, pattern_id) REFERENCES patterns (chat_id, id) ON DELETE CASCADE;
ALTER TABLE pattern_relations
    ADD CONSTRAINT pattern_relations_from_pattern_id_fkey
        FOREIGN KEY (chat_id, from_pattern_id) REFERENCES patterns (chat_id, id)
        ON DELETE CASCADE,
    ADD CONSTRAINT pattern_relations_to_pattern_id_fkey
        FOREIGN KEY (chat_id, to_pattern_id) REFERENCES patterns (chat_id, id) ON DELETE CASCADE;
ALTER TABLE pattern_aliases ADD CONSTRAINT pattern_aliases_pattern_id_fkey
    FOREIGN KEY (chat_id, pattern_id) REFERENCES patterns (chat_id, id) ON DELETE CASCADE;
ALTER TABLE alias_embeddings ADD CONSTRAINT alias_embeddings_alias_id_fkey
    FOREIGN KEY (chat_id, alias_id) REFERENCES pattern_aliases (chat_id, id) ON DELETE CASCADE;
ALTER TABLE pattern_entries ADD CONSTRAINT pattern_entries_pattern_id_fkey
    FOREIGN KEY (chat_id, pattern_id) REFERENCES patterns (chat_id, id) ON DELETE CASCADE;
ALTER TABLE episode_embeddings ADD CONSTRAINT episode_embeddings_episode_id_fkey
    FOREIGN KEY (chat_id, episode_id) REFERENCES episodes (chat_id, id) ON DELETE CASCADE;
-- ON UPDATE CASCADE: an unowned entry (chat 0) given to a chat takes its vectors along
-- (memory/journal/owner.py; on one server only: Citus does not move a row between chats).
ALTER TABLE entry_embeddings ADD CONSTRAINT entry_embeddings_entry_id_fkey
    FOREIGN KEY (chat_id, entry_id) REFERENCES entries (chat_id, id)
    ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE chat_photos ADD CONSTRAINT chat_photos_message_id_fkey
    FOREIGN KEY (chat_id, message_id) REFERENCES chat_messages (chat_id, id) ON DELETE CASCADE;

-- 5. The indexes that served the old foreign keys (a parent's delete finds its children)
--    and lookups by a child's parent, now within the chat.
DROP INDEX idx_pattern_observations_pattern;
CREATE INDEX idx_pattern_observations_pattern ON pattern_observations (chat_id, pattern_id);
DROP INDEX idx_pattern_relations_to;
CREATE INDEX idx_pattern_relations_to ON pattern_relations (chat_id, to_pattern_id);
DROP INDEX idx_pattern_entries_entry;
CREATE INDEX idx_pattern_entries_entry ON pattern_entries (chat_id, entry_uuid);
-- chat_photos (chat_id, message_id, position) is unique already and leads with the same columns
DROP INDEX idx_chat_photos_message;

-- ---------------------------------------------------------------------------------------------
-- 6. Pattern counts without triggers (Citus runs triggers on distributed tables only with
--    citus.enable_unsafe_triggers): counted on read, from idx_patterns_chat_status (an
--    index-only scan of the chat's patterns). Same name and columns as the table it replaces;
--    a status with no pattern has no row.
DROP TRIGGER pattern_counts_added ON patterns;
DROP TRIGGER pattern_counts_removed ON patterns;
DROP TRIGGER pattern_counts_moved ON patterns;
DROP TRIGGER pattern_counts_truncated ON patterns;
DROP FUNCTION pattern_counts_added();
DROP FUNCTION pattern_counts_removed();
DROP FUNCTION pattern_counts_moved();
DROP FUNCTION pattern_counts_truncated();
DROP TABLE chat_pattern_counts;
CREATE VIEW chat_pattern_counts AS
    SELECT chat_id, status, count(*) AS n FROM patterns GROUP BY chat_id, status;
