-- Who may talk to the bot (issue 17): chats allowed by pairing or by `engram chats allow`, on
-- top of TELEGRAM_ALLOWED_CHAT_IDS; the updates of chats not (yet) allowed, kept 24 hours so a
-- chat paired later is answered; and when each such chat was last told the bot is private.

-- A chat allowed in the database (the setting's chats are not stored). allowed_by: 'pairing'
-- (the one-time code `engram serve` printed; user_id is who sent it) or 'cli'.
CREATE TABLE allowed_chats (
    chat_id     BIGINT PRIMARY KEY,
    allowed_by  TEXT NOT NULL CHECK (allowed_by IN ('pairing', 'cli')),
    user_id     BIGINT,
    allowed_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Updates of chats not allowed, as the inbox would store them. Moved into the inbox when the
-- chat is allowed (those younger than 24 hours); the rest are purged.
CREATE TABLE held_updates (
    chat_id      BIGINT NOT NULL,
    id           BIGSERIAL,
    update_key   TEXT NOT NULL,
    update_id    BIGINT,
    kind         TEXT NOT NULL,
    payload      JSONB NOT NULL,
    received_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (chat_id, id),
    UNIQUE (chat_id, update_key)
);
CREATE INDEX idx_held_updates_received ON held_updates (received_at);

-- The polite "this bot is private" reply: at most one per chat per hour.
CREATE TABLE stranger_notices (
    chat_id      BIGINT PRIMARY KEY,
    notified_at  TIMESTAMPTZ NOT NULL
);
