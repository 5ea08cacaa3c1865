-- Records a failed attempt of job ?1 under fence ?2 with error ?4: retryable at now + ?3 ms,
-- or dead when ?3 is NULL or no attempts are left. ?5 ms, NULL = database clock.
UPDATE idem_job
SET state = CASE WHEN ?3 IS NULL OR attempt >= max_attempts THEN 'dead' ELSE 'retryable' END,
    run_at = CASE WHEN ?3 IS NULL OR attempt >= max_attempts THEN run_at
                  ELSE coalesce(?5, CAST(unixepoch('subsec') * 1000 AS INTEGER)) + ?3 END,
    finalized_at = CASE WHEN ?3 IS NULL OR attempt >= max_attempts
                        THEN coalesce(?5, CAST(unixepoch('subsec') * 1000 AS INTEGER)) END,
    last_error = ?4,
    lease_expires_at = NULL
WHERE id = ?1 AND fence = ?2 AND state = 'running'
RETURNING *
