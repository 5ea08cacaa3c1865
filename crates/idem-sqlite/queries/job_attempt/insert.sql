-- Records the finished attempt of job ?1's current claim with outcome ?2 and error ?3,
-- finished at ?4 ms (NULL = database clock). Inserts nothing unless the job's state is ?5
-- (NULL = any), so a cancel records an attempt only for a running job.
INSERT INTO idem_job_attempt (job_id, attempt, fence, outcome, error, started_at, finished_at)
SELECT id, attempt, fence, ?2, ?3, attempted_at,
       coalesce(?4, CAST(unixepoch('subsec') * 1000 AS INTEGER))
FROM idem_job
WHERE id = ?1 AND (?5 IS NULL OR state = ?5)
