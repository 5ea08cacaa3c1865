-- Completes job ?1 if claim fence ?2 is current; ?3 ms, NULL = database clock.
UPDATE idem_job
SET state = 'completed',
    finalized_at = coalesce(?3, CAST(unixepoch('subsec') * 1000 AS INTEGER)),
    lease_expires_at = NULL
WHERE id = ?1 AND fence = ?2 AND state = 'running'
RETURNING *
