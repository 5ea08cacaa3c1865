-- Completes, in one statement, every job in $1/$2 (job ids and their fences, bigint[]
-- each) whose claim is current and keeps the results $4/$5 (job ids and their results,
-- bigint[] and jsonb[]; a job not listed has none); $3 timestamptz, NULL = database clock.
-- $6 false leaves children of batches alone (the store's one-statement path, whose caller
-- completes them again in a transaction that counts their batches). The results are
-- looked up only when there are any (a join to them, even empty, made the batch's plan
-- slower in a tight loop). Each completed attempt is its job's row itself: no attempt
-- row is written (job_attempt/list.sql reads it from the job).
-- Returns the ids completed, each with its batch: a lease missing from the result was
-- not completed and nothing was written for it.
-- PostgreSQL dialect: the leases arrive as two arrays in the binary protocol, unpacked
-- with unnest (SQLite: a JSON array and json_each), so the whole batch is one round trip.
-- The rows are locked first, in id order, as job/heartbeat.sql does, so the two cannot
-- deadlock on the rows they share; the predicates that decide the write stand on the
-- outer UPDATE too.
WITH locked AS (
    SELECT idem_job.id, l.fence
    FROM idem_job
    JOIN unnest($1::bigint[], $2::bigint[]) AS l(job_id, fence)
      ON idem_job.id = l.job_id AND idem_job.fence = l.fence
    WHERE idem_job.state = 'running' AND ($6 OR idem_job.batch_id IS NULL)
    ORDER BY idem_job.id
    FOR NO KEY UPDATE OF idem_job
)
UPDATE idem_job
SET state = 'completed',
    finalized_at = coalesce($3::timestamptz, now()),
    lease_expires_at = NULL,
    result = CASE WHEN cardinality($4::bigint[]) > 0 THEN
                 (SELECT r.result FROM unnest($4::bigint[], $5::jsonb[]) AS r(job_id, result)
                  WHERE r.job_id = idem_job.id LIMIT 1)
             END
FROM locked
WHERE idem_job.id = locked.id
  AND idem_job.fence = locked.fence
  AND idem_job.state = 'running'
  AND ($6 OR idem_job.batch_id IS NULL)
RETURNING idem_job.id, idem_job.batch_id
