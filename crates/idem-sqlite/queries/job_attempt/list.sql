-- The finished attempts of job ?1, oldest first.
SELECT * FROM idem_job_attempt WHERE job_id = ?1 ORDER BY fence
