-- The finished attempts of job $1, oldest first. A completed attempt has no row of its
-- own: the completed job's row stands for it (job/complete.sql, job/complete_many.sql).
-- A row recorded for it by an earlier build is read instead, never both.
SELECT job_id, attempt, fence, outcome, error, started_at, finished_at
FROM idem_job_attempt
WHERE job_id = $1
UNION ALL
SELECT id, attempt, fence, 'completed', NULL, attempted_at, finalized_at
FROM idem_job AS j
WHERE id = $1 AND state = 'completed'
  AND NOT EXISTS (SELECT 1 FROM idem_job_attempt AS a
                  WHERE a.job_id = j.id AND a.fence = j.fence)
ORDER BY fence
