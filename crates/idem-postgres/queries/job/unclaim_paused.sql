-- Gives back the claims in $1/$2 (job ids and their fences, bigint[] each: jobs this
-- transaction inserted claimed for a local worker) whose queue is paused now: available
-- again, attempt 0, no lease; the fence stays, so a later claim takes fence + 1. Their
-- ids.
-- PostgreSQL dialect: the leases arrive as two arrays, unpacked with unnest. The rows
-- are this transaction's own, uncommitted, so no other statement can hold them. Run as
-- the last statement before the commit, it sees a pause that committed while the
-- transaction waited (each statement of a READ COMMITTED transaction reads afresh).
UPDATE idem_job
SET state = 'available',
    attempt = 0,
    lease_owner = NULL,
    attempted_at = NULL,
    lease_expires_at = NULL
FROM unnest($1::bigint[], $2::bigint[]) AS l(job_id, fence)
WHERE idem_job.id = l.job_id
  AND idem_job.fence = l.fence
  AND idem_job.state = 'running'
  AND EXISTS (SELECT 1 FROM idem_queue_pause AS p WHERE p.queue = idem_job.queue)
RETURNING idem_job.id
