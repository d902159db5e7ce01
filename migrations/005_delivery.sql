-- Delivery under faults (issue 15).
--
-- outbox.chunk_in_flight: the index of the chunk the sender has handed (or is about to hand) to
-- the Bot API and whose outcome is not recorded yet; committed before the request, cleared when
-- the chunk is recorded sent or known not delivered. An open row found with it set when a
-- sender starts was interrupted mid-request: it is marked `uncertain` and never resent.
ALTER TABLE outbox ADD COLUMN chunk_in_flight INT CHECK (chunk_in_flight >= 0);

-- inbox.crashes: how many times a process start found the row still `processing` (its process
-- died during its turn). Counted apart from `attempts`, which only the row's own failures
-- charge; a row past the crash cap (actors.queues.inbox.MAX_CRASHES) is skipped.
ALTER TABLE inbox ADD COLUMN crashes INT NOT NULL DEFAULT 0;
