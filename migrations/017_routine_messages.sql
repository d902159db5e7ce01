-- Routine messages are memory (issue 22, seed 004 "Phase 2.5"): what a routine sent is stored
-- as an assistant row marked source = 'routine' with the routine's name, its full text in
-- `content` (recall_conversation finds it) and a 2–3 sentence `summary` made when it was sent,
-- which the window shows instead of the full text.
ALTER TABLE chat_messages
    ADD COLUMN source TEXT NOT NULL DEFAULT 'conversation'
        CHECK (source IN ('conversation', 'routine')),
    ADD COLUMN routine_name TEXT,
    ADD COLUMN summary TEXT,
    ADD CONSTRAINT chat_messages_routine_row CHECK (
        (source = 'routine') = (routine_name IS NOT NULL AND summary IS NOT NULL)
        AND (source = 'conversation' OR role = 'assistant'));
