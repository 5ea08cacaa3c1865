-- Inserts one job of a batch; the store runs this prepared statement once per job, in
-- the batch's order, inside one transaction. Returns only the columns the database chose
-- (id, state, run_at, created_at): the store rebuilds each row from the job it was given.
-- ?1 kind, ?2 queue, ?3 args (JSON text), ?4 priority, ?5 run_at (ms, or NULL for now),
-- ?6 max_attempts, ?7 claim_worker and ?8 lease_ms for a job inserted claimed (else
-- NULL), ?9 the enqueue_key it is enqueued with (kept on the job whether or not it gets
-- the key), ?10 the principal enqueuing it, ?11 batch_id, ?12 follows_job_id,
-- ?13 follows_batch_id, ?14 trace_parent, ?15 now in ms (the batch's one clock reading).
-- A claimed job is running from now: attempt 1, fence 1, leased to claim_worker until
-- now + lease_ms; one whose queue is paused is inserted unclaimed (claim_worker ignored).
-- SQLite dialect: one row per execution of one prepared statement, SQLite's fastest bulk
-- insert (PostgreSQL unpacks the whole batch from arrays in one statement).
INSERT INTO idem_job (kind, queue, args, priority, state, max_attempts, run_at, created_at,
                      attempt, fence, lease_owner, attempted_at, lease_expires_at,
                      enqueue_key, principal, batch_id, follows_job_id, follows_batch_id,
                      trace_parent)
SELECT ?1, ?2, ?3, ?4,
       CASE WHEN c.worker IS NOT NULL THEN 'running'
            WHEN coalesce(?5, ?15) > ?15 THEN 'scheduled'
            ELSE 'available' END,
       ?6, coalesce(?5, ?15), ?15,
       CASE WHEN c.worker IS NULL THEN 0 ELSE 1 END,
       CASE WHEN c.worker IS NULL THEN 0 ELSE 1 END,
       c.worker,
       CASE WHEN c.worker IS NOT NULL THEN ?15 END,
       CASE WHEN c.worker IS NOT NULL THEN ?15 + ?8 END,
       ?9, ?10, ?11, ?12, ?13, ?14
FROM (SELECT CASE WHEN ?7 IS NOT NULL
                       AND NOT EXISTS (SELECT 1 FROM idem_queue_pause AS p WHERE p.queue = ?2)
                  THEN ?7 END AS worker) AS c
RETURNING id, state, run_at, created_at
