-- Facts, dated events and core tenets (issue 14, items 3 and 4).
--
-- Two new pattern kinds: `fact` (a stable fact about the person: job, family, where they live)
-- and `event` (something that happens on a date: "my team offsite is on 15 March"). An event
-- carries the day it happens (`occurs_on`, resolved against the local time of the message that
-- said it) and optionally its local time of day (`occurs_at`); no other kind has a date.
--
-- Core tenets (seed 000 "Core tenets"): `is_core_tenet` patterns never decay and are always in
-- the turn's profile; `pinned_at` is when the pattern became one (by the extractor, for a very
-- confident identity belief or fact, or by the person's `/memory pin`).

ALTER TABLE patterns DROP CONSTRAINT IF EXISTS patterns_kind_check;
ALTER TABLE patterns ADD CONSTRAINT patterns_kind_check
    CHECK (kind IN ('behavior', 'emotion', 'belief', 'goal', 'preference', 'temporal', 'causal',
                    'fact', 'event'));

ALTER TABLE patterns
    ADD COLUMN IF NOT EXISTS occurs_on DATE,
    ADD COLUMN IF NOT EXISTS occurs_at TIME,
    ADD COLUMN IF NOT EXISTS is_core_tenet BOOLEAN NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS pinned_at TIMESTAMPTZ;

-- an event has its day, nothing else has one; a time of day needs the day
ALTER TABLE patterns ADD CONSTRAINT patterns_event_date
    CHECK ((kind = 'event') = (occurs_on IS NOT NULL)
           AND (occurs_at IS NULL OR occurs_on IS NOT NULL));

-- the profile's reads: a chat's upcoming events by date, and its pinned patterns
CREATE INDEX idx_patterns_events ON patterns (chat_id, occurs_on) WHERE occurs_on IS NOT NULL;
CREATE INDEX idx_patterns_core ON patterns (chat_id) WHERE is_core_tenet;
