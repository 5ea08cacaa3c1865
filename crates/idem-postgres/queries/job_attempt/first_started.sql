-- When the first recorded attempt of each job of $1 (bigint[]) started, in id order;
-- jobs with no attempt that has a start time are absent. Read by the operator retry: a
-- job's first attempt made its oldest effect keys. A completed attempt has no attempt
-- row: the completed job's own start stands for it.
SELECT job_id, min(started_at) AS started_at
FROM (
    SELECT job_id, started_at FROM idem_job_attempt
    WHERE job_id = ANY($1::bigint[]) AND started_at IS NOT NULL
    UNION ALL
    SELECT id, attempted_at FROM idem_job
    WHERE id = ANY($1::bigint[]) AND state = 'completed' AND attempted_at IS NOT NULL
) AS started
GROUP BY job_id
ORDER BY job_id
