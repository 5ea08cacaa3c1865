-- Cancels job ?1 if it is unfinished; ?2 ms, NULL = database clock.
UPDATE idem_job
SET state = 'cancelled',
    finalized_at = coalesce(?2, CAST(unixepoch('subsec') * 1000 AS INTEGER)),
    lease_expires_at = NULL
WHERE id = ?1 AND state IN ('scheduled', 'available', 'running', 'retryable')
RETURNING *
