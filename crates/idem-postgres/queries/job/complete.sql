-- Completes job $1 if claim fence $2 is current; $3 timestamptz, NULL = database clock.
UPDATE idem_job
SET state = 'completed',
    finalized_at = coalesce($3::timestamptz, now()),
    lease_expires_at = NULL
WHERE id = $1 AND fence = $2 AND state = 'running'
RETURNING *
