-- Extends every current lease in $1/$2 (job ids and their fences, bigint[] each) to now +
-- $3 ms ($4 timestamptz, NULL = database clock: this statement's, clock_timestamp(), so
-- a renewal inside a longer transaction counts from when it runs). A lease that is no
-- longer current is not returned.
-- PostgreSQL dialect: the leases arrive as two arrays in the binary protocol, unpacked
-- with unnest (SQLite: a JSON array, json_each and a row-value IN). The rows are locked
-- first, in id order (`locked`: the sort sits below the lock), whatever order the leases
-- come in: job/complete_many.sql locks the same way, so a worker's heartbeat and its
-- batched completion, which share rows, wait for each other instead of deadlocking.
-- FOR NO KEY UPDATE is the lock the UPDATE takes anyway; it does not conflict with the
-- FOR KEY SHARE an open effect transaction holds (job/lock.sql), so a long effect never
-- holds up the renewal of the worker's other leases. The predicates that decide the
-- write stand on the outer UPDATE too.
WITH locked AS (
    SELECT idem_job.id, l.fence
    FROM idem_job
    JOIN unnest($1::bigint[], $2::bigint[]) AS l(job_id, fence)
      ON idem_job.id = l.job_id AND idem_job.fence = l.fence
    WHERE idem_job.state = 'running'
    ORDER BY idem_job.id
    FOR NO KEY UPDATE OF idem_job
)
UPDATE idem_job
SET lease_expires_at = coalesce($4::timestamptz, clock_timestamp())
                       + $3::bigint * interval '1 millisecond'
FROM locked
WHERE idem_job.id = locked.id
  AND idem_job.fence = locked.fence
  AND idem_job.state = 'running'
RETURNING idem_job.id, idem_job.fence, idem_job.lease_expires_at
