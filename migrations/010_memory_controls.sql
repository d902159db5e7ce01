-- Memory in the person's hands (issue 16): the audit trail of patterns, the per-day turn
-- counters behind /stats, and the index behind /memory.

-- Every status change and pin of a pattern (seed 000 "Privacy and retention controls"): forget,
-- merge, supersede, dispute, pin/unpin, TTL expiry; why, by whom and when. Written in the same
-- transaction as the change (memory/patterns/audit.py is the one writer). `other_pattern_id`:
-- the survivor of a merge, the pattern that superseded this one.
CREATE TABLE pattern_audit (
    chat_id           BIGINT NOT NULL,
    id                BIGSERIAL,
    pattern_id        BIGINT NOT NULL REFERENCES patterns (id) ON DELETE CASCADE,
    action            TEXT NOT NULL
                      CHECK (action IN ('forget', 'merge', 'supersede', 'dispute', 'pin',
                                        'unpin', 'expire')),
    old_status        TEXT NOT NULL,
    new_status        TEXT NOT NULL,
    reason            TEXT NOT NULL,
    actor             TEXT NOT NULL
                      CHECK (actor IN ('person', 'model', 'compaction', 'merge_job',
                                       'maintenance')),
    other_pattern_id  BIGINT,
    at                TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (chat_id, id)
);
CREATE INDEX idx_pattern_audit_pattern ON pattern_audit (chat_id, pattern_id, id);
CREATE INDEX idx_pattern_audit_at ON pattern_audit (chat_id, at);

-- Turns answered by the model and how many of them had degraded memory retrieval, per chat
-- and local day (TIMEZONE); written with the turn's own commit. Read by /stats.
CREATE TABLE chat_turn_stats (
    chat_id             BIGINT NOT NULL,
    day                 DATE NOT NULL,
    turns               INT NOT NULL DEFAULT 0,
    retrieval_degraded  INT NOT NULL DEFAULT 0,
    PRIMARY KEY (chat_id, day)
);

-- /memory and the turn's profile: a chat's active patterns of one kind, strongest first,
-- without sorting the chat's every pattern.
CREATE INDEX idx_patterns_active_rank ON patterns (chat_id, kind, (strength * confidence) DESC)
    WHERE status = 'active';
