-- When the first recorded attempt of each job of ?1 (JSON array of ids) started (ms),
-- in id order; jobs with no attempt that has a start time are absent. Read by the
-- operator retry: a job's first attempt made its oldest effect keys.
SELECT job_id, min(started_at) AS started_at
FROM idem_job_attempt
WHERE job_id IN (SELECT value FROM json_each(?1)) AND started_at IS NOT NULL
GROUP BY job_id
ORDER BY job_id
