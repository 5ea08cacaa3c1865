-- Jobs that reached completed or dead at or after $1 and before $2, per queue: how many
-- of each, and, over those whose last attempt has a start, the summed run time
-- (finalized_at - attempted_at) and wait from due to start (attempted_at - run_at, 0 when
-- started early), in milliseconds. Reads the range of the finalized_at index only
-- (idem_job_finalized).
-- PostgreSQL dialect: intervals become milliseconds through extract(epoch …).
SELECT queue,
       count(*) FILTER (WHERE state = 'completed') AS completed,
       count(*) FILTER (WHERE state = 'dead') AS dead,
       count(attempted_at) AS timed,
       coalesce(sum(extract(epoch FROM finalized_at - attempted_at) * 1000), 0)::bigint AS run_ms,
       coalesce(sum(greatest(extract(epoch FROM attempted_at - run_at) * 1000, 0)), 0)::bigint
           AS wait_ms
FROM idem_job
WHERE finalized_at >= $1 AND finalized_at < $2 AND state IN ('completed', 'dead')
GROUP BY queue
ORDER BY queue
