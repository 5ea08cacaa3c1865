-- Moves up to ?1 running jobs whose lease expired before now (?3 ms, NULL = database clock)
-- to retryable, or to dead when no attempts are left (the job's max_attempts, or the cap
-- ?4 when lower; NULL = no cap). A retryable job runs again at now + ?2 ms, or with
-- ?2 = 0 keeps its run_at, so its place in claim order. The outer predicates mirror
-- PostgreSQL's (the single writer already serialises the rescue here).
UPDATE idem_job
SET state = CASE WHEN attempt >= min(max_attempts, coalesce(?4, max_attempts)) THEN 'dead' ELSE 'retryable' END,
    run_at = CASE WHEN attempt >= min(max_attempts, coalesce(?4, max_attempts)) THEN run_at
                  WHEN ?2 = 0 THEN run_at
                  ELSE coalesce(?3, CAST(unixepoch('subsec') * 1000 AS INTEGER)) + ?2 END,
    finalized_at = CASE WHEN attempt >= min(max_attempts, coalesce(?4, max_attempts))
                        THEN coalesce(?3, CAST(unixepoch('subsec') * 1000 AS INTEGER)) END,
    last_error = 'lease expired: the worker holding fence ' || fence
                 || ' stopped heartbeating (crashed, paused or partitioned)',
    lease_expires_at = NULL
WHERE id IN (
    SELECT id FROM idem_job
    WHERE state = 'running'
      AND lease_expires_at < coalesce(?3, CAST(unixepoch('subsec') * 1000 AS INTEGER))
    ORDER BY lease_expires_at
    LIMIT ?1
)
  AND state = 'running'
  AND lease_expires_at < coalesce(?3, CAST(unixepoch('subsec') * 1000 AS INTEGER))
RETURNING *
