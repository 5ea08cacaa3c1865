-- Completes, in one statement, every job in $1 (JSON array of {job_id, fence}) whose claim
-- is current; $2 timestamptz, NULL = database clock. Returns the ids completed: a lease
-- missing from the result was no longer current and nothing was written for it.
-- PostgreSQL dialect: the leases are unpacked with jsonb_to_recordset and joined with
-- UPDATE ... FROM (SQLite: json_each and a row-value IN).
UPDATE idem_job
SET state = 'completed',
    finalized_at = coalesce($2::timestamptz, now()),
    lease_expires_at = NULL
FROM jsonb_to_recordset($1::jsonb) AS l(job_id bigint, fence bigint)
WHERE idem_job.state = 'running'
  AND idem_job.id = l.job_id
  AND idem_job.fence = l.fence
RETURNING idem_job.id
