-- Jobs that reached completed or dead at or after ?1 and before ?2 (ms), per queue: how
-- many of each, and, over those whose last attempt has a start, the summed run time
-- (finalized_at - attempted_at) and wait from due to start (attempted_at - run_at, 0 when
-- started early). Reads the range of the finalized_at index only (idem_job_finalized).
SELECT queue,
       sum(state = 'completed') AS completed,
       sum(state = 'dead') AS dead,
       count(attempted_at) AS timed,
       coalesce(sum(finalized_at - attempted_at), 0) AS run_ms,
       coalesce(sum(max(attempted_at - run_at, 0)), 0) AS wait_ms
FROM idem_job
WHERE finalized_at >= ?1 AND finalized_at < ?2 AND state IN ('completed', 'dead')
GROUP BY queue
ORDER BY queue
