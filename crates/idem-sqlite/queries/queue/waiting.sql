-- Waiting jobs (available, scheduled, retryable) per queue and kind, with the earliest
-- run_at of each. Reads the claim index's rows only: the WHERE spells its partial
-- predicate the same way (migration 0015).
SELECT queue, kind, count(*) AS count, min(run_at) AS oldest_run_at
FROM idem_job
WHERE (state = 'available' OR state = 'scheduled' OR state = 'retryable')
GROUP BY queue, kind
ORDER BY queue, kind
