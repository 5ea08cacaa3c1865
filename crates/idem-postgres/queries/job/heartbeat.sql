-- Extends every current lease in $1/$2 (job ids and their fences, bigint[] each) to now +
-- $3 ms ($4 timestamptz, NULL = database clock). A lease that is no longer current is not
-- returned.
-- PostgreSQL dialect: the leases arrive as two arrays in the binary protocol, unpacked
-- with unnest and joined with UPDATE ... FROM (SQLite: a JSON array, json_each and a
-- row-value IN).
UPDATE idem_job
SET lease_expires_at = coalesce($4::timestamptz, now()) + $3::bigint * interval '1 millisecond'
FROM unnest($1::bigint[], $2::bigint[]) AS l(job_id, fence)
WHERE idem_job.state = 'running'
  AND idem_job.id = l.job_id
  AND idem_job.fence = l.fence
RETURNING idem_job.id, idem_job.fence, idem_job.lease_expires_at
