-- Records the finished attempt of job ?1's current claim with outcome ?2 and error ?3,
-- finished at ?4 ms (NULL = database clock). Inserts nothing unless the job's state is ?5
-- (NULL = any), so a cancel records an attempt only for a running job. A snoozed claim
-- gave its attempt back (attempt - 1 on the job row), so its number is the row's attempt + 1.
INSERT INTO idem_job_attempt (job_id, attempt, fence, outcome, error, started_at, finished_at)
SELECT id, attempt + CASE WHEN ?2 = 'snoozed' THEN 1 ELSE 0 END, fence, ?2, ?3, attempted_at,
       coalesce(?4, CAST(unixepoch('subsec') * 1000 AS INTEGER))
FROM idem_job
WHERE id = ?1 AND (?5 IS NULL OR state = ?5)
