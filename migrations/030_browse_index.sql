-- The dashboard's memory page lists a chat's patterns newest first (last_seen DESC, id DESC),
-- a page at a time: without this index a chat with 100,000 patterns sorted them all per page.
CREATE INDEX idx_patterns_last_seen ON patterns (chat_id, last_seen DESC, id DESC);
