-- Extends every current lease in $1 (JSON array of {job_id, fence}) to now + $2 ms
-- ($3 timestamptz, NULL = database clock). A lease that is no longer current is not returned.
-- PostgreSQL dialect: the leases are unpacked with jsonb_to_recordset and joined with
-- UPDATE ... FROM (SQLite: json_each and a row-value IN).
UPDATE idem_job
SET lease_expires_at = coalesce($3::timestamptz, now()) + $2::bigint * interval '1 millisecond'
FROM jsonb_to_recordset($1::jsonb) AS l(job_id bigint, fence bigint)
WHERE idem_job.state = 'running'
  AND idem_job.id = l.job_id
  AND idem_job.fence = l.fence
RETURNING idem_job.id, idem_job.fence, idem_job.lease_expires_at
