-- The proactive lane (issue 22): scheduled jobs per chat, each chat's proactive preferences,
-- and the outcome of every run (what the gates and the rules decided; what was sent).

-- A chat's proactive preferences. No row: the defaults (proactive off until the person turns it
-- on; quiet hours, daily cap and cooldown from the settings). NULL columns follow the settings.
CREATE TABLE chat_proactive (
    chat_id        BIGINT PRIMARY KEY,
    active         BOOLEAN NOT NULL DEFAULT false,
    quiet_start    SMALLINT CHECK (quiet_start BETWEEN 0 AND 23),  -- local hour, NULL: setting
    quiet_end      SMALLINT CHECK (quiet_end BETWEEN 0 AND 23),
    quiet_off      BOOLEAN NOT NULL DEFAULT false,                  -- /quiet off
    digest         TEXT NOT NULL DEFAULT 'weekly' CHECK (digest IN ('daily', 'weekly', 'off')),
    max_per_day    SMALLINT CHECK (max_per_day >= 0),               -- NULL: setting
    cooldown_s     INT CHECK (cooldown_s >= 0),                     -- NULL: setting
    paused_at      TIMESTAMPTZ,           -- the chat blocked the bot (403): jobs wait
    paused_reason  TEXT,
    updated_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK ((quiet_start IS NULL) = (quiet_end IS NULL))
);

-- Seed 000's cron_jobs, per chat: a routine on a cron schedule (evaluated in `timezone`), or a
-- one-shot reminder at `run_at`. `next_run_at` NULL: nothing more to run (a one-shot done).
CREATE TABLE cron_jobs (
    id             BIGSERIAL PRIMARY KEY,
    chat_id        BIGINT NOT NULL,
    name           TEXT NOT NULL,          -- 'nightly-reflection', 'weekly-recap', 'reminder-<n>'
    kind           TEXT NOT NULL CHECK (kind IN ('routine', 'reminder')),
    schedule       TEXT,                   -- cron expression, local to `timezone`
    run_at         TIMESTAMPTZ,            -- one-shot
    timezone       TEXT NOT NULL,
    payload        JSONB NOT NULL DEFAULT '{}',
    enabled        BOOLEAN NOT NULL DEFAULT true,
    grace_s        INT NOT NULL DEFAULT 3600 CHECK (grace_s >= 0),
    next_run_at    TIMESTAMPTZ,
    last_run_at    TIMESTAMPTZ,
    last_outcome   TEXT,
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK ((schedule IS NULL) <> (run_at IS NULL)),
    UNIQUE (chat_id, name)
);
CREATE INDEX idx_cron_jobs_due ON cron_jobs (next_run_at)
    WHERE enabled AND next_run_at IS NOT NULL;

-- Every run of a job and what came of it: sent, declined by the model, skipped (a rule found
-- nothing to say, a gate, a missed run past its grace), deferred (a gate said later), failed.
-- Proactive sends today and the last send (cap, cooldown) are read from here.
CREATE TABLE proactive_runs (
    id             BIGSERIAL PRIMARY KEY,
    chat_id        BIGINT NOT NULL,
    job_id         BIGINT,
    name           TEXT NOT NULL,
    due_at         TIMESTAMPTZ NOT NULL,
    outcome        TEXT NOT NULL
                   CHECK (outcome IN ('sent', 'declined', 'skipped', 'deferred', 'failed')),
    reason         TEXT,
    model_calls    INT NOT NULL DEFAULT 0,
    at             TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX idx_proactive_runs_chat ON proactive_runs (chat_id, at);
