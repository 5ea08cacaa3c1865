-- Puts every dead job awaiting intent $1 back to available at $2 (timestamptz, NULL =
-- database clock), as an operator's retry would (attempt 0, no snoozes): the intent was
-- settled; each no longer awaits it (`awaited_intent` keeps the key, so the intent purge
-- keeps the outcome the job is to read). The rows are locked first, in id order (the
-- CTE's sort sits below its lock), as job/retry.sql locks them, so the two never wait for
-- each other in a cycle; the predicates stand on the UPDATE too, so a job retried or
-- changed while this statement waited for its row is left alone.
WITH locked AS (
    SELECT id FROM idem_job
    WHERE awaits_intent = $1 AND state = 'dead'
    ORDER BY id
    FOR NO KEY UPDATE
)
UPDATE idem_job
SET state = 'available',
    attempt = 0,
    snoozes = 0,
    run_at = coalesce($2::timestamptz, now()),
    finalized_at = NULL,
    lease_owner = NULL,
    lease_expires_at = NULL,
    awaits_intent = NULL
FROM locked
WHERE idem_job.id = locked.id
  AND idem_job.awaits_intent = $1
  AND idem_job.state = 'dead'
RETURNING idem_job.*
