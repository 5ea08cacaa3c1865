-- Waiting jobs (available, scheduled, retryable) per queue and kind, with the earliest
-- run_at of each. Reads the claim index's rows only (its partial predicate).
SELECT queue, kind, count(*) AS count, min(run_at) AS oldest_run_at
FROM idem_job
WHERE state IN ('available', 'scheduled', 'retryable')
GROUP BY queue, kind
ORDER BY queue, kind
