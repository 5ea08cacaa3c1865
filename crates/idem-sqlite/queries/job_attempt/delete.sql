-- Deletes the attempt history of jobs ?1 (JSON array of ids).
DELETE FROM idem_job_attempt WHERE job_id IN (SELECT value FROM json_each(?1))
