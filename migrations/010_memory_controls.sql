-- Memory in the person's hands (issue 16): the audit trail of patterns, the per-day turn
-- counters behind /stats, and what keeps /memory fast (an index, counts kept by triggers).

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

-- /memory's counts of a chat's patterns by status, kept by triggers (counting a chat's 100,000
-- patterns took ~7 ms; this is one index lookup). Inserts and deletes by statement (a COPY or
-- a batch counts once), a status change by row, only when the status changes.
CREATE TABLE chat_pattern_counts (
    chat_id  BIGINT NOT NULL,
    status   TEXT NOT NULL,
    n        BIGINT NOT NULL,
    PRIMARY KEY (chat_id, status)
);
INSERT INTO chat_pattern_counts (chat_id, status, n)
SELECT chat_id, status, count(*) FROM patterns GROUP BY chat_id, status;

CREATE FUNCTION pattern_counts_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chat_pattern_counts AS c (chat_id, status, n)
    SELECT chat_id, status, count(*) FROM added GROUP BY chat_id, status
    ON CONFLICT (chat_id, status) DO UPDATE SET n = c.n + EXCLUDED.n;
    RETURN NULL;
END $$;

CREATE FUNCTION pattern_counts_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE chat_pattern_counts c SET n = c.n - r.n
    FROM (SELECT chat_id, status, count(*) AS n FROM removed GROUP BY chat_id, status) r
    WHERE c.chat_id = r.chat_id AND c.status = r.status;
    RETURN NULL;
END $$;

CREATE FUNCTION pattern_counts_moved() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE chat_pattern_counts SET n = n - 1 WHERE chat_id = OLD.chat_id AND status = OLD.status;
    INSERT INTO chat_pattern_counts AS c (chat_id, status, n) VALUES (NEW.chat_id, NEW.status, 1)
    ON CONFLICT (chat_id, status) DO UPDATE SET n = c.n + 1;
    RETURN NULL;
END $$;

CREATE FUNCTION pattern_counts_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM chat_pattern_counts;
    RETURN NULL;
END $$;

CREATE TRIGGER pattern_counts_added AFTER INSERT ON patterns
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION pattern_counts_added();
CREATE TRIGGER pattern_counts_removed AFTER DELETE ON patterns
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION pattern_counts_removed();
CREATE TRIGGER pattern_counts_moved AFTER UPDATE OF status, chat_id ON patterns
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.chat_id <> NEW.chat_id)
    EXECUTE FUNCTION pattern_counts_moved();
CREATE TRIGGER pattern_counts_truncated AFTER TRUNCATE ON patterns
    FOR EACH STATEMENT EXECUTE FUNCTION pattern_counts_truncated();
