-- The vault writer's incremental write (memory/vault/delta.py) finds a chat's patterns changed
-- since its last write by updated_at (every writer of patterns sets it): an index range, not a
-- scan of the chat's every pattern.
CREATE INDEX idx_patterns_updated ON patterns (chat_id, updated_at);
