-- Completes, in one statement, every job in ?1 (JSON array of {job_id, fence}) whose claim
-- is current; ?2 ms, NULL = database clock. Returns the ids completed: a lease missing
-- from the result was no longer current and nothing was written for it.
UPDATE idem_job
SET state = 'completed',
    finalized_at = coalesce(?2, CAST(unixepoch('subsec') * 1000 AS INTEGER)),
    lease_expires_at = NULL
WHERE state = 'running'
  AND (id, fence) IN (SELECT l.value ->> 'job_id', l.value ->> 'fence' FROM json_each(?1) AS l)
RETURNING id
