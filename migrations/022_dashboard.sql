-- The dashboard (issue 25): its logins. A session is a row: the cookie carries a random id
-- (signed), the table its hash, the chat the login may see (NULL: every chat, a login by
-- DASHBOARD_TOKEN) and the session's CSRF token. `engram dashboard link` stores the hash of a
-- one-time secret; the first visit of the link before `expires_at` uses it up.
CREATE TABLE dashboard_sessions (
    id          BIGSERIAL PRIMARY KEY,
    sid_hash    TEXT NOT NULL UNIQUE,
    chat_id     BIGINT,
    csrf        TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at  TIMESTAMPTZ NOT NULL
);
CREATE INDEX idx_dashboard_sessions_expiry ON dashboard_sessions (expires_at);

CREATE TABLE dashboard_links (
    id          BIGSERIAL PRIMARY KEY,
    secret_hash TEXT NOT NULL UNIQUE,
    chat_id     BIGINT,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at  TIMESTAMPTZ NOT NULL,
    used_at     TIMESTAMPTZ
);
