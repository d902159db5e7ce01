-- Recall of the conversation (issue 14, item 2): the recall_conversation tool searches this
-- chat's retained messages by their words and its episodes by words and meaning.
--
-- What the person and the bot said (user and assistant rows; tool results are journal text,
-- searched by the journal tools) gets a full-text vector, compacted or not, until the purge
-- deletes the row. Adding the stored column rewrites chat_messages once.
ALTER TABLE chat_messages ADD COLUMN text_search tsvector GENERATED ALWAYS AS (
    CASE WHEN role IN ('user', 'assistant') THEN to_tsvector('english', content) END
) STORED;
CREATE INDEX idx_chat_messages_text_search ON chat_messages USING gin (text_search);

-- An exact scan of one chat's episode vectors, without reading every chat's.
CREATE INDEX idx_episode_embeddings_chat ON episode_embeddings (chat_id, model);
