-- Inserts many jobs in one statement. Returns only the columns the database chose (id,
-- state, run_at, created_at): the store rebuilds each row from the job it was given.
-- ?1: JSON array of {kind, queue, args, priority, run_at (ms or null), max_attempts, and
-- for a job inserted claimed claim_worker and lease_ms, the enqueue_key it is
-- enqueued with (kept on the job whether or not it gets the key), the principal
-- enqueuing it, and batch_id, follows_job_id and follows_batch_id when set}; ?2: now in ms, or NULL for the
-- database clock. A claimed job is running from now: attempt 1, fence 1, leased to
-- claim_worker until now + lease_ms; one whose queue is paused is inserted unclaimed
-- (its claim_worker is ignored).
-- SQLite dialect: the batch arrives as one JSON text and is unpacked with json_each.
INSERT INTO idem_job (kind, queue, args, priority, state, max_attempts, run_at, created_at,
                      attempt, fence, lease_owner, attempted_at, lease_expires_at,
                      enqueue_key, principal, batch_id, follows_job_id, follows_batch_id)
SELECT j.value ->> 'kind',
       j.value ->> 'queue',
       json(j.value -> 'args'),
       j.value ->> 'priority',
       CASE WHEN j.claim_worker IS NOT NULL THEN 'running'
            WHEN coalesce(j.value ->> 'run_at', t.now) > t.now THEN 'scheduled'
            ELSE 'available' END,
       j.value ->> 'max_attempts',
       coalesce(j.value ->> 'run_at', t.now),
       t.now,
       CASE WHEN j.claim_worker IS NULL THEN 0 ELSE 1 END,
       CASE WHEN j.claim_worker IS NULL THEN 0 ELSE 1 END,
       j.claim_worker,
       CASE WHEN j.claim_worker IS NOT NULL THEN t.now END,
       CASE WHEN j.claim_worker IS NOT NULL THEN t.now + (j.value ->> 'lease_ms') END,
       j.value ->> 'enqueue_key',
       j.value ->> 'principal',
       j.value ->> 'batch_id',
       j.value ->> 'follows_job_id',
       j.value ->> 'follows_batch_id'
FROM (SELECT e.key, e.value,
             CASE WHEN NOT EXISTS (SELECT 1 FROM idem_queue_pause AS p
                                   WHERE p.queue = e.value ->> 'queue')
                  THEN e.value ->> 'claim_worker' END AS claim_worker
      FROM json_each(?1) AS e) AS j,
     (SELECT coalesce(?2, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now) AS t
ORDER BY j.key
RETURNING id, state, run_at, created_at
