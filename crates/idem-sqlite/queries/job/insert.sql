-- Inserts many jobs in one statement. Returns only the columns the database chose (id,
-- state, run_at, created_at): the store rebuilds each row from the job it was given.
-- ?1: JSON array of {kind, queue, args, priority, run_at (ms or null), max_attempts};
-- ?2: now in ms, or NULL for the database clock.
-- SQLite dialect: the batch arrives as one JSON text and is unpacked with json_each.
INSERT INTO idem_job (kind, queue, args, priority, state, max_attempts, run_at, created_at)
SELECT j.value ->> 'kind',
       j.value ->> 'queue',
       json(j.value -> 'args'),
       j.value ->> 'priority',
       CASE WHEN coalesce(j.value ->> 'run_at', t.now) > t.now THEN 'scheduled'
            ELSE 'available' END,
       j.value ->> 'max_attempts',
       coalesce(j.value ->> 'run_at', t.now),
       t.now
FROM json_each(?1) AS j,
     (SELECT coalesce(?2, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now) AS t
ORDER BY j.key
RETURNING id, state, run_at, created_at
