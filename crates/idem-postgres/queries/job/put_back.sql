-- Puts every dead job awaiting intent $1 back to available at $2 (timestamptz, NULL =
-- database clock), as an operator's retry would (attempt 0, no snoozes, awaiting
-- nothing): the intent was settled. Both predicates stand on the UPDATE itself, so a
-- job retried or changed while this statement waited for its row is left alone.
UPDATE idem_job
SET state = 'available',
    attempt = 0,
    snoozes = 0,
    run_at = coalesce($2::timestamptz, now()),
    finalized_at = NULL,
    lease_owner = NULL,
    lease_expires_at = NULL,
    awaits_intent = NULL
WHERE awaits_intent = $1 AND state = 'dead'
RETURNING *
