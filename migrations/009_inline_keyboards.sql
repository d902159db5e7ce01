-- Inline keyboards and callback queries (issue 16, item 3).
--
-- outbox.reply_markup: the inline keyboard a reply carries (Bot API JSON), sent with its last
-- chunk. outbox.kind: 'message' (a reply, sent with sendMessage), 'edit' (the text, and the
-- keyboard or none, of an already sent message: editMessageText) or 'edit_markup' (only its
-- keyboard: editMessageReplyMarkup); an edit names its target in edit_message_id and goes
-- through the same ordered, recorded, exactly-once-or-uncertain path as a reply.
ALTER TABLE outbox ADD COLUMN reply_markup JSONB;
ALTER TABLE outbox ADD COLUMN kind TEXT NOT NULL DEFAULT 'message'
    CHECK (kind IN ('message', 'edit', 'edit_markup'));
ALTER TABLE outbox ADD COLUMN edit_message_id BIGINT;
ALTER TABLE outbox ADD CONSTRAINT outbox_edit_has_target
    CHECK ((kind = 'message') = (edit_message_id IS NULL));

-- A button's callback_data is a short opaque token (no secret, within Telegram's 64 bytes)
-- mapped here to what the tap does. Scoped to its chat (a tap from another chat finds
-- nothing), used at most once (used_at), dead 24 hours after created_at. Tokens issued together
-- for one keyboard share `keyboard`: when a tap edits its message, the keyboard's other
-- buttons die with it. message_id and used_by: the message the token was tapped on and the
-- callback query that used it (so that query's immediate answer, racing the use, still knows it
-- was the one that acted).
CREATE TABLE callback_tokens (
    chat_id     BIGINT NOT NULL,
    token       TEXT NOT NULL,
    keyboard    TEXT NOT NULL,
    action      JSONB NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    used_at     TIMESTAMPTZ,
    used_by     TEXT,
    message_id  BIGINT,
    PRIMARY KEY (chat_id, token)
);
CREATE INDEX idx_callback_tokens_keyboard ON callback_tokens (chat_id, keyboard);
CREATE INDEX idx_callback_tokens_age ON callback_tokens (chat_id, created_at);
