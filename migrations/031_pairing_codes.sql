-- Every process's open pairing code (several engram processes on one database): a /start
-- <code> reaching any process pairs with any of them, once. Only the code's SHA-256 is kept.
CREATE TABLE pairing_codes (
    digest bytea PRIMARY KEY,
    owner text NOT NULL,
    expires_at timestamptz NOT NULL
);
