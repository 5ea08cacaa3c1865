-- Puts every dead job awaiting intent ?1 back to available at ?2 (ms, NULL = database
-- clock), as an operator's retry would (attempt 0, no snoozes): the intent was settled.
-- Each no longer awaits it (`awaited_intent` keeps the key, so the intent purge keeps
-- the outcome the job is to read).
UPDATE idem_job
SET state = 'available',
    attempt = 0,
    snoozes = 0,
    run_at = coalesce(?2, CAST(unixepoch('subsec') * 1000 AS INTEGER)),
    finalized_at = NULL,
    lease_owner = NULL,
    lease_expires_at = NULL,
    awaits_intent = NULL
WHERE awaits_intent = ?1 AND state = 'dead'
RETURNING *
