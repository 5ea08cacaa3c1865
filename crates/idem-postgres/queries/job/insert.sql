-- Inserts many jobs in one statement. Returns only the columns the database chose (id,
-- state, run_at, created_at): the store rebuilds each row from the job it was given.
-- $1..$8: one array per column, element i for job i: kind text[], queue text[], args
-- jsonb[], priority int2[], run_at timestamptz[] (NULL = now), max_attempts int4[], and
-- for a job inserted claimed claim_worker text[] and lease_ms int8[] (NULL otherwise);
-- $9: now as timestamptz, or NULL for the database clock; $10: enqueue_key text[] (the
-- key each job is enqueued with, kept on the job whether or not it gets the key); $11:
-- principal text[] (who enqueues each job, NULL = the library); $12..$14: batch_id,
-- follows_job_id and follows_batch_id int8[] (a batch's child, a chain's successor, a
-- batch's successor; NULL = none). A claimed job is running from
-- now: attempt 1, fence 1, leased to claim_worker until now + lease_ms (unless its queue
-- is paused: then it is inserted unclaimed, its claim_worker ignored), where now is
-- this statement's clock (clock_timestamp(), not the transaction's start), so a lease
-- does not run down while the transaction waits (idem_store::enqueue renews it once more
-- just before the commit of an enqueue that took keys).
-- PostgreSQL dialect: the batch arrives as arrays in the binary protocol (SQLite: one
-- JSON text), unpacked with unnest WITH ORDINALITY and inserted in ordinality order, so
-- identity ids follow the input order.
INSERT INTO idem_job (kind, queue, args, priority, state, max_attempts, run_at, created_at,
                      attempt, fence, lease_owner, attempted_at, lease_expires_at,
                      enqueue_key, principal, batch_id, follows_job_id, follows_batch_id)
SELECT j.kind,
       j.queue,
       j.args,
       j.priority,
       CASE WHEN c.claim_worker IS NOT NULL THEN 'running'
            WHEN coalesce(j.run_at, t.now) > t.now THEN 'scheduled'
            ELSE 'available' END,
       j.max_attempts,
       coalesce(j.run_at, t.now),
       t.now,
       CASE WHEN c.claim_worker IS NULL THEN 0 ELSE 1 END,
       CASE WHEN c.claim_worker IS NULL THEN 0 ELSE 1 END,
       c.claim_worker,
       CASE WHEN c.claim_worker IS NOT NULL THEN t.now END,
       CASE WHEN c.claim_worker IS NOT NULL
            THEN coalesce($9::timestamptz, clock_timestamp()) + j.lease_ms * interval '1 millisecond'
       END,
       j.enqueue_key,
       j.principal,
       j.batch_id,
       j.follows_job_id,
       j.follows_batch_id
FROM unnest($1::text[], $2::text[], $3::jsonb[], $4::int2[], $5::timestamptz[],
            $6::int4[], $7::text[], $8::int8[], $10::text[], $11::text[], $12::int8[],
            $13::int8[], $14::int8[])
         WITH ORDINALITY AS j(kind, queue, args, priority, run_at, max_attempts,
                              claim_worker, lease_ms, enqueue_key, principal, batch_id,
                              follows_job_id, follows_batch_id, ord)
     CROSS JOIN LATERAL (
         SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM idem_queue_pause AS p
                                      WHERE p.queue = j.queue)
                     THEN j.claim_worker END AS claim_worker) AS c,
     (SELECT coalesce($9::timestamptz, now()) AS now) AS t
ORDER BY j.ord
RETURNING id, state, run_at, created_at
