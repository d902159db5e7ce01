-- Prompt caching (issue 14): how much of a call's prompt was read from or written to the
-- provider's prompt cache. Both are parts of input_tokens (which counts every prompt token);
-- a read is billed at 0.1x the input rate, a write at 1.25x (5-minute TTL) or 2x (1 hour),
-- and cost_usd is computed with them (memory/llm/cost.py).
ALTER TABLE api_usage
    ADD COLUMN cache_read_tokens  INT NOT NULL DEFAULT 0,
    ADD COLUMN cache_write_tokens INT NOT NULL DEFAULT 0;
