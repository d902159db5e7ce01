-- Forgetting forgets (issue 20, item 3).
--
-- A forgotten pattern is deleted (its observations, aliases, embeddings, relations and journal
-- links cascade); only its audit rows stay (id, action, who, when, why), so pattern_audit no
-- longer cascades from patterns.
ALTER TABLE pattern_audit DROP CONSTRAINT pattern_audit_pattern_id_fkey;

-- Patterns forgotten before this migration were only deprecated: they go now, and the reasons
-- of their earlier audit rows (which may quote them) with their text.
UPDATE pattern_audit a SET reason = '(removed: the memory was forgotten)'
WHERE a.action <> 'forget' AND EXISTS (
    SELECT 1 FROM patterns p JOIN pattern_audit f ON f.pattern_id = p.id AND f.action = 'forget'
    WHERE p.id = a.pattern_id AND p.status = 'deprecated');
DELETE FROM patterns p WHERE p.status = 'deprecated' AND EXISTS (
    SELECT 1 FROM pattern_audit f WHERE f.pattern_id = p.id AND f.action = 'forget');

-- A /forget flow's topic, kept apart from its buttons (a button's action carries the flow's
-- id, never text); deleted when its messages are deleted, else with the flow's dead buttons.
CREATE TABLE forget_flows (
    chat_id     BIGINT NOT NULL,
    id          BIGSERIAL,
    topic       TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (chat_id, id)
);
CREATE INDEX idx_forget_flows_age ON forget_flows (created_at);
-- Buttons issued before carried the topic itself: they keep working, without it.
UPDATE callback_tokens SET action = action - 'topic' WHERE action ? 'topic';

-- Retention of the queues' copies of message text (the purge job): a finished inbox row keeps
-- its key (dedupe) but its payload becomes {} after MESSAGE_RETENTION_DAYS; a sent outbox row
-- keeps no text. These indexes find the rows still holding text.
CREATE INDEX idx_inbox_payload_kept ON inbox (received_at)
    WHERE status IN ('done', 'skipped', 'failed') AND payload <> '{}'::jsonb;
CREATE INDEX idx_outbox_text_kept ON outbox (created_at)
    WHERE status IN ('sent', 'failed', 'uncertain') AND (text <> '' OR reply_markup IS NOT NULL);
