-- engram schema, version 1.
-- Adapted from seed 000 "Database Schema": chat_id on every chat-scoped table, embeddings in
-- per-model side tables (owner id, model, dims), durable inbox/outbox, journal entries,
-- daily metrics, episodes. Vector indexes are per model (HNSW on a cast to the model's dims,
-- partial on model); the embedding layer creates them for models not listed here.

CREATE EXTENSION IF NOT EXISTS vector;

-- ---------------------------------------------------------------------------------------------
-- Durable ingress: an update is acknowledged to Telegram only after it is here.
CREATE TABLE inbox (
    id            BIGSERIAL PRIMARY KEY,
    update_key    TEXT NOT NULL UNIQUE,          -- 'update:<update_id>' (dedupe across restarts)
    update_id     BIGINT,
    chat_id       BIGINT,                        -- NULL for updates without a chat
    kind          TEXT NOT NULL,                 -- message | edited_message | callback_query | ...
    payload       JSONB NOT NULL,
    status        TEXT NOT NULL DEFAULT 'pending'
                  CHECK (status IN ('pending', 'processing', 'done', 'skipped', 'failed')),
    attempts      INT NOT NULL DEFAULT 0,
    last_error    TEXT,
    received_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    processed_at  TIMESTAMPTZ
);
CREATE INDEX idx_inbox_open ON inbox (chat_id, id) WHERE status IN ('pending', 'processing');

-- Replies to send, in order per chat; the row id makes a second send detectable.
CREATE TABLE outbox (
    id                    BIGSERIAL PRIMARY KEY,
    chat_id               BIGINT NOT NULL,
    text                  TEXT NOT NULL,
    parse_mode            TEXT CHECK (parse_mode IN ('HTML', 'MarkdownV2')),
    reply_to_message_id   BIGINT,
    inbox_ids             BIGINT[] NOT NULL DEFAULT '{}',
    status                TEXT NOT NULL DEFAULT 'pending'
                          CHECK (status IN ('pending', 'sending', 'sent', 'failed', 'uncertain')),
    attempts              INT NOT NULL DEFAULT 0,
    last_error            TEXT,
    chunks_sent           INT NOT NULL DEFAULT 0,  -- chunks already delivered (resume point)
    telegram_message_ids  BIGINT[] NOT NULL DEFAULT '{}',
    created_at            TIMESTAMPTZ NOT NULL DEFAULT now(),
    sent_at               TIMESTAMPTZ
);
CREATE INDEX idx_outbox_open ON outbox (chat_id, id) WHERE status IN ('pending', 'sending');

-- Small durable key/value state (e.g. the long-polling offset).
CREATE TABLE bot_state (
    key         TEXT PRIMARY KEY,
    value       JSONB NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- ---------------------------------------------------------------------------------------------
-- Short-term memory: the conversation (user, assistant and tool_result rows).
CREATE TABLE chat_messages (
    id                   BIGSERIAL PRIMARY KEY,
    chat_id              BIGINT NOT NULL,
    external_message_id  TEXT,                   -- 'update:<id>' for user rows; NULL otherwise
    role                 TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'tool_result')),
    content              TEXT NOT NULL,
    tool_calls           JSONB,                  -- assistant rows: [{id, name, input}] tool_use blocks
    tool_call_id         TEXT,                   -- tool_result rows: the tool_use id they answer
    tool_name            TEXT,
    compacted_at         TIMESTAMPTZ,            -- soft delete after compaction
    created_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (chat_id, external_message_id)
);
CREATE INDEX idx_chat_messages_active ON chat_messages (chat_id, created_at, id)
    WHERE compacted_at IS NULL;
CREATE INDEX idx_chat_messages_compacted ON chat_messages (compacted_at)
    WHERE compacted_at IS NOT NULL;

-- ---------------------------------------------------------------------------------------------
-- Long-term memory: patterns.
CREATE TABLE patterns (
    id                   BIGSERIAL PRIMARY KEY,
    chat_id              BIGINT NOT NULL,
    content              TEXT NOT NULL,
    kind                 TEXT NOT NULL DEFAULT 'behavior'
                         CHECK (kind IN ('behavior', 'emotion', 'belief', 'goal', 'preference',
                                         'temporal', 'causal')),
    confidence           DOUBLE PRECISION NOT NULL DEFAULT 0.5
                         CHECK (confidence >= 0 AND confidence <= 1),
    strength             DOUBLE PRECISION NOT NULL DEFAULT 1.0 CHECK (strength >= 0),
    times_seen           INT NOT NULL DEFAULT 1,
    contradiction_count  INT NOT NULL DEFAULT 0,
    status               TEXT NOT NULL DEFAULT 'active'
                         CHECK (status IN ('active', 'merged', 'deprecated', 'superseded',
                                           'disputed')),
    status_reason        TEXT,
    source               TEXT NOT NULL DEFAULT 'compaction',  -- compaction | explicit | merge
    temporal             JSONB,
    canonical_hash       TEXT NOT NULL,
    first_seen           TIMESTAMPTZ NOT NULL,
    last_seen            TIMESTAMPTZ NOT NULL,
    created_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    text_search          tsvector GENERATED ALWAYS AS (
                             to_tsvector('english', coalesce(content, ''))) STORED
);
CREATE INDEX idx_patterns_chat_status ON patterns (chat_id, status);
CREATE INDEX idx_patterns_hash ON patterns (chat_id, canonical_hash);
CREATE INDEX idx_patterns_text_search ON patterns USING gin (text_search);

CREATE TABLE pattern_embeddings (
    pattern_id  BIGINT NOT NULL REFERENCES patterns (id) ON DELETE CASCADE,
    model       TEXT NOT NULL,
    chat_id     BIGINT NOT NULL,                -- denormalized for per-chat vector search
    dims        INT NOT NULL,
    embedding   vector NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (pattern_id, model),
    CHECK (vector_dims(embedding) = dims)
);
CREATE INDEX idx_pattern_embeddings_chat ON pattern_embeddings (model, chat_id);
CREATE INDEX idx_pattern_embeddings_te3s ON pattern_embeddings
    USING hnsw ((embedding::vector(1536)) vector_cosine_ops) WITH (m = 16, ef_construction = 64)
    WHERE model = 'text-embedding-3-small';

-- Provenance: evidence is an immutable snapshot that survives message purging.
CREATE TABLE pattern_observations (
    id                 BIGSERIAL PRIMARY KEY,
    pattern_id         BIGINT NOT NULL REFERENCES patterns (id) ON DELETE CASCADE,
    chat_id            BIGINT NOT NULL,
    chat_message_ids   BIGINT[] NOT NULL DEFAULT '{}',
    evidence           TEXT NOT NULL,
    evidence_roles     TEXT[] NOT NULL DEFAULT '{}',
    signal             TEXT NOT NULL DEFAULT 'explicit' CHECK (signal IN ('explicit', 'implicit')),
    confidence         DOUBLE PRECISION NOT NULL DEFAULT 0.5,
    extractor_version  TEXT NOT NULL DEFAULT 'v1',
    observed_at        TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX idx_pattern_observations_pattern ON pattern_observations (pattern_id);

CREATE TABLE pattern_relations (
    id               BIGSERIAL PRIMARY KEY,
    chat_id          BIGINT NOT NULL,
    from_pattern_id  BIGINT NOT NULL REFERENCES patterns (id) ON DELETE CASCADE,
    to_pattern_id    BIGINT NOT NULL REFERENCES patterns (id) ON DELETE CASCADE,
    relation         TEXT NOT NULL
                     CHECK (relation IN ('supports', 'contradicts', 'parent_of', 'causes',
                                         'supersedes')),
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (from_pattern_id, to_pattern_id, relation)
);
CREATE INDEX idx_pattern_relations_to ON pattern_relations (to_pattern_id);

CREATE TABLE pattern_aliases (
    id          BIGSERIAL PRIMARY KEY,
    pattern_id  BIGINT NOT NULL REFERENCES patterns (id) ON DELETE CASCADE,
    chat_id     BIGINT NOT NULL,
    content     TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (pattern_id, content)
);

CREATE TABLE alias_embeddings (
    alias_id    BIGINT NOT NULL REFERENCES pattern_aliases (id) ON DELETE CASCADE,
    model       TEXT NOT NULL,
    chat_id     BIGINT NOT NULL,
    dims        INT NOT NULL,
    embedding   vector NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (alias_id, model),
    CHECK (vector_dims(embedding) = dims)
);

CREATE TABLE pattern_entries (
    pattern_id      BIGINT NOT NULL REFERENCES patterns (id) ON DELETE CASCADE,
    entry_uuid      TEXT NOT NULL,
    chat_id         BIGINT NOT NULL,
    source          TEXT NOT NULL DEFAULT 'compaction' CHECK (source IN ('compaction', 'tool_loop')),
    confidence      DOUBLE PRECISION NOT NULL DEFAULT 0.5,
    times_linked    INT NOT NULL DEFAULT 1,
    last_linked_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (pattern_id, entry_uuid)
);
CREATE INDEX idx_pattern_entries_entry ON pattern_entries (entry_uuid);

-- Summaries of compacted spans (episodic memory).
CREATE TABLE episodes (
    id                BIGSERIAL PRIMARY KEY,
    chat_id           BIGINT NOT NULL,
    summary           TEXT NOT NULL,
    started_at        TIMESTAMPTZ NOT NULL,
    ended_at          TIMESTAMPTZ NOT NULL,
    message_count     INT NOT NULL,
    first_message_id  BIGINT,
    last_message_id   BIGINT,
    created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    text_search       tsvector GENERATED ALWAYS AS (
                          to_tsvector('english', coalesce(summary, ''))) STORED
);
CREATE INDEX idx_episodes_chat ON episodes (chat_id, ended_at);
CREATE INDEX idx_episodes_text_search ON episodes USING gin (text_search);

CREATE TABLE episode_embeddings (
    episode_id  BIGINT NOT NULL REFERENCES episodes (id) ON DELETE CASCADE,
    model       TEXT NOT NULL,
    chat_id     BIGINT NOT NULL,
    dims        INT NOT NULL,
    embedding   vector NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (episode_id, model),
    CHECK (vector_dims(embedding) = dims)
);

-- One row per compaction attempt (observability).
CREATE TABLE compaction_runs (
    id                   BIGSERIAL PRIMARY KEY,
    chat_id              BIGINT NOT NULL,
    started_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at          TIMESTAMPTZ,
    status               TEXT NOT NULL DEFAULT 'running'
                         CHECK (status IN ('running', 'ok', 'failed', 'skipped')),
    messages_compacted   INT NOT NULL DEFAULT 0,
    patterns_created     INT NOT NULL DEFAULT 0,
    patterns_reinforced  INT NOT NULL DEFAULT 0,
    patterns_contradicted INT NOT NULL DEFAULT 0,
    error                TEXT
);
CREATE INDEX idx_compaction_runs_chat ON compaction_runs (chat_id, started_at);

-- ---------------------------------------------------------------------------------------------
-- The journal (a Day One export) and daily metrics.
CREATE TABLE entries (
    id           BIGSERIAL PRIMARY KEY,
    uuid         TEXT NOT NULL UNIQUE,
    created_at   TIMESTAMPTZ NOT NULL,           -- Day One creationDate
    modified_at  TIMESTAMPTZ,                    -- Day One modifiedDate
    timezone     TEXT,                           -- Day One timeZone (IANA)
    text         TEXT NOT NULL DEFAULT '',
    tags         TEXT[] NOT NULL DEFAULT '{}',
    city         TEXT,
    country      TEXT,
    place_name   TEXT,
    latitude     DOUBLE PRECISION,
    longitude    DOUBLE PRECISION,
    location     JSONB,
    weather      JSONB,
    photo_count  INT NOT NULL DEFAULT 0,
    video_count  INT NOT NULL DEFAULT 0,
    audio_count  INT NOT NULL DEFAULT 0,
    word_count   INT NOT NULL DEFAULT 0,
    imported_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    text_search  tsvector GENERATED ALWAYS AS (
                     to_tsvector('english', coalesce(text, ''))) STORED
);
CREATE INDEX idx_entries_created ON entries (created_at);
CREATE INDEX idx_entries_text_search ON entries USING gin (text_search);
CREATE INDEX idx_entries_tags ON entries USING gin (tags);
CREATE INDEX idx_entries_city ON entries (lower(city));

CREATE TABLE entry_embeddings (
    entry_id    BIGINT NOT NULL REFERENCES entries (id) ON DELETE CASCADE,
    model       TEXT NOT NULL,
    dims        INT NOT NULL,
    embedding   vector NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (entry_id, model),
    CHECK (vector_dims(embedding) = dims)
);
CREATE INDEX idx_entry_embeddings_te3s ON entry_embeddings
    USING hnsw ((embedding::vector(1536)) vector_cosine_ops) WITH (m = 16, ef_construction = 64)
    WHERE model = 'text-embedding-3-small';

CREATE TABLE daily_metrics (
    chat_id     BIGINT NOT NULL,
    date        DATE NOT NULL,
    weight_kg   DOUBLE PRECISION CHECK (weight_kg > 0),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (chat_id, date)
);

-- ---------------------------------------------------------------------------------------------
-- API usage and cost (rates live in settings, not here).
CREATE TABLE api_usage (
    id                BIGSERIAL PRIMARY KEY,
    chat_id           BIGINT,
    provider          TEXT NOT NULL,            -- anthropic | openai | local
    model             TEXT NOT NULL,
    purpose           TEXT NOT NULL,            -- agent | compaction | dedup_adjudication |
                                                -- embedding | transcription | merge
    input_tokens      INT NOT NULL DEFAULT 0,
    output_tokens     INT NOT NULL DEFAULT 0,
    duration_seconds  DOUBLE PRECISION,
    cost_usd          DOUBLE PRECISION NOT NULL DEFAULT 0,
    latency_ms        INT,
    ok                BOOLEAN NOT NULL DEFAULT true,
    error             TEXT,
    created_at        TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX idx_api_usage_created ON api_usage (created_at);
CREATE INDEX idx_api_usage_purpose ON api_usage (purpose);
CREATE INDEX idx_api_usage_chat ON api_usage (chat_id, created_at);
