-- Photos kept (issue 23, KEEP_PHOTOS=on): the image bytes a person sent, beside the user row that
-- says a photo was sent. Off by default: only the row's caption and description are kept. A row
-- deleted (forgetting, retention, erase) takes its photos with it.
CREATE TABLE chat_photos (
    id          BIGSERIAL PRIMARY KEY,
    chat_id     BIGINT NOT NULL,
    message_id  BIGINT NOT NULL REFERENCES chat_messages (id) ON DELETE CASCADE,
    position    SMALLINT NOT NULL,
    media_type  TEXT NOT NULL,
    data        BYTEA NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (chat_id, message_id, position)
);
CREATE INDEX idx_chat_photos_message ON chat_photos (message_id);
