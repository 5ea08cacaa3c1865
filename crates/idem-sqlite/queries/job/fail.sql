-- Records a failed attempt of job ?1 under fence ?2 with error ?4: retryable at now + ?3 ms,
-- or dead when ?3 is NULL or no attempts are left. ?5 ms, NULL = database clock.
-- ?6 1 = snooze: scheduled at now + ?3 ms with the claim's attempt given back and the
-- snooze counted (snoozes + 1), never dead; a snooze keeps the last error (its message is
-- in the attempt history). ?7 0 leaves a child of a batch alone (the store's one-hop
-- path, whose caller fails it again in a transaction that counts its batch).
UPDATE idem_job
SET state = CASE WHEN ?6 THEN 'scheduled'
                 WHEN ?3 IS NULL OR attempt >= max_attempts THEN 'dead'
                 ELSE 'retryable' END,
    attempt = CASE WHEN ?6 THEN attempt - 1 ELSE attempt END,
    snoozes = CASE WHEN ?6 THEN snoozes + 1 ELSE snoozes END,
    run_at = CASE WHEN NOT ?6 AND (?3 IS NULL OR attempt >= max_attempts) THEN run_at
                  ELSE coalesce(?5, CAST(unixepoch('subsec') * 1000 AS INTEGER)) + ?3 END,
    finalized_at = CASE WHEN NOT ?6 AND (?3 IS NULL OR attempt >= max_attempts)
                        THEN coalesce(?5, CAST(unixepoch('subsec') * 1000 AS INTEGER)) END,
    last_error = CASE WHEN ?6 THEN last_error ELSE ?4 END,
    lease_expires_at = NULL
WHERE id = ?1 AND fence = ?2 AND state = 'running' AND (?7 OR batch_id IS NULL)
RETURNING *
