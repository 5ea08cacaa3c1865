-- Inserts many jobs in one statement. Returns only the columns the database chose (id,
-- state, run_at, created_at): the store rebuilds each row from the job it was given.
-- $1: JSON array of {kind, queue, args, priority, run_at (RFC 3339 or null), max_attempts,
-- and for a job inserted claimed claim_worker and lease_ms}; $2: now as timestamptz, or
-- NULL for the database clock. A claimed job is running from now: attempt 1, fence 1,
-- leased to claim_worker until now + lease_ms.
-- PostgreSQL dialect: the batch arrives as one jsonb value, unpacked with
-- jsonb_to_recordset WITH ORDINALITY (which needs the ROWS FROM form to carry a column
-- list) and inserted in ordinality order, so identity ids follow the input order.
-- jsonb_to_recordset turns a JSON null into SQL NULL, so `args: null` is put back as the
-- jsonb 'null' that SQLite stores.
INSERT INTO idem_job (kind, queue, args, priority, state, max_attempts, run_at, created_at,
                      attempt, fence, lease_owner, attempted_at, lease_expires_at)
SELECT j.kind,
       j.queue,
       coalesce(j.args, 'null'::jsonb),
       j.priority,
       CASE WHEN j.claim_worker IS NOT NULL THEN 'running'
            WHEN coalesce(j.run_at, t.now) > t.now THEN 'scheduled'
            ELSE 'available' END,
       j.max_attempts,
       coalesce(j.run_at, t.now),
       t.now,
       CASE WHEN j.claim_worker IS NULL THEN 0 ELSE 1 END,
       CASE WHEN j.claim_worker IS NULL THEN 0 ELSE 1 END,
       j.claim_worker,
       CASE WHEN j.claim_worker IS NOT NULL THEN t.now END,
       t.now + j.lease_ms * interval '1 millisecond'
FROM ROWS FROM (
         jsonb_to_recordset($1::jsonb) AS (kind text, queue text, args jsonb,
             priority smallint, run_at timestamptz, max_attempts integer,
             claim_worker text, lease_ms bigint)
     ) WITH ORDINALITY AS j(kind, queue, args, priority, run_at, max_attempts, claim_worker,
                            lease_ms, ord),
     (SELECT coalesce($2::timestamptz, now()) AS now) AS t
ORDER BY j.ord
RETURNING id, state, run_at, created_at
