-- Each chat owns its journal (issue 20): an entry belongs to one chat, and so does every row
-- keyed by entries. A Day One uuid is unique per chat (two chats may import the same export).
--
-- Existing entries are left without a chat here: which chat is "first" depends on
-- TELEGRAM_ALLOWED_CHAT_IDS, which SQL cannot read. `engram serve` assigns them at start to the
-- first allowed chat and logs how many (actors/journal_owner.py); until then no chat sees them.
-- Every journal query filters on chat_id = the turn's chat, so an entry without one is visible
-- to none.

ALTER TABLE entries ADD COLUMN chat_id BIGINT;
ALTER TABLE entries DROP CONSTRAINT entries_uuid_key;
ALTER TABLE entries ADD CONSTRAINT entries_chat_uuid_key UNIQUE (chat_id, uuid);

DROP INDEX idx_entries_created;
CREATE INDEX idx_entries_chat_created ON entries (chat_id, created_at);
DROP INDEX idx_entries_city;
CREATE INDEX idx_entries_chat_city ON entries (chat_id, lower(city));

-- The vectors carry their entry's chat (as pattern/alias/episode vectors do); kept equal to
-- entries.chat_id by the writers (memory/embeddings/store.py, memory/journal/owner.py).
ALTER TABLE entry_embeddings ADD COLUMN chat_id BIGINT;
