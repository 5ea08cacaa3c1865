-- Inserts many jobs in one statement. Returns only the columns the database chose (id,
-- state, run_at, created_at): the store rebuilds each row from the job it was given.
-- $1: JSON array of {kind, queue, args, priority, run_at (RFC 3339 or null), max_attempts};
-- $2: now as timestamptz, or NULL for the database clock.
-- PostgreSQL dialect: the batch arrives as one jsonb value, unpacked with
-- jsonb_to_recordset WITH ORDINALITY (which needs the ROWS FROM form to carry a column
-- list) and inserted in ordinality order, so identity ids follow the input order.
-- jsonb_to_recordset turns a JSON null into SQL NULL, so `args: null` is put back as the
-- jsonb 'null' that SQLite stores.
INSERT INTO idem_job (kind, queue, args, priority, state, max_attempts, run_at, created_at)
SELECT j.kind,
       j.queue,
       coalesce(j.args, 'null'::jsonb),
       j.priority,
       CASE WHEN coalesce(j.run_at, t.now) > t.now THEN 'scheduled' ELSE 'available' END,
       j.max_attempts,
       coalesce(j.run_at, t.now),
       t.now
FROM ROWS FROM (
         jsonb_to_recordset($1::jsonb) AS (kind text, queue text, args jsonb,
             priority smallint, run_at timestamptz, max_attempts integer)
     ) WITH ORDINALITY AS j(kind, queue, args, priority, run_at, max_attempts, ord),
     (SELECT coalesce($2::timestamptz, now()) AS now) AS t
ORDER BY j.ord
RETURNING id, state, run_at, created_at
