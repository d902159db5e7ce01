-- Several processes on one database (issue 26). A chat is served by the one process holding
-- its lease: a row, not an advisory lock, so the scheme holds where locks are per node
-- (Citus). `owner` names the process (ENGRAM_INSTANCE), `incarnation` one run of it: a
-- restarted process may take back its own leases at once, and a lease taken from another
-- incarnation first recovers what that run left in hand. Expiry is the server's clock.
CREATE TABLE chat_leases (
    chat_id      BIGINT PRIMARY KEY,
    owner        TEXT NOT NULL,
    incarnation  TEXT NOT NULL,
    acquired_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at   TIMESTAMPTZ NOT NULL
);
CREATE INDEX idx_chat_leases_incarnation ON chat_leases (incarnation);

-- Work that must run in one process per database (long polling, the maintenance jobs): a
-- named lease, a small shared table (a reference table on Citus).
CREATE TABLE process_leases (
    name         TEXT PRIMARY KEY,
    owner        TEXT NOT NULL,
    incarnation  TEXT NOT NULL,
    acquired_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at   TIMESTAMPTZ NOT NULL
);
